// IDX (MNIST) reader and writer; the format and the dtype mapping are described in include/oxmera/formats.hpp.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "io/format_io.hpp"
#include "oxmera/formats.hpp"

static_assert(std::endian::native == std::endian::little, "save_idx copies the low bytes of little-endian values");

namespace oxmera {
namespace {
using namespace io_detail;

struct IdxType {
  unsigned char code;
  const char* name;
  size_t itemsize;
  DType target;
};
constexpr IdxType kIdxTypes[] = {
    {0x08, "u8", 1, DType::U8},   {0x09, "i8", 1, DType::I64},  {0x0B, "i16", 2, DType::I64},
    {0x0C, "i32", 4, DType::I64}, {0x0D, "f32", 4, DType::F32}, {0x0E, "f64", 8, DType::F64},
};

uint64_t load_be(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// Big-endian file elements of `t` → native elements of t.target.
void convert_be(const IdxType& t, const unsigned char* src, void* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = load_be(src + i * t.itemsize, t.itemsize);
    switch (t.code) {
      case 0x08:
        static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(bits);
        break;
      case 0x09:
        static_cast<int64_t*>(dst)[i] = static_cast<int8_t>(static_cast<uint8_t>(bits));
        break;
      case 0x0B:
        static_cast<int64_t*>(dst)[i] = static_cast<int16_t>(static_cast<uint16_t>(bits));
        break;
      case 0x0C:
        static_cast<int64_t*>(dst)[i] = static_cast<int32_t>(static_cast<uint32_t>(bits));
        break;
      case 0x0D: {
        const auto b = static_cast<uint32_t>(bits);
        std::memcpy(static_cast<float*>(dst) + i, &b, 4);
        break;
      }
      default:
        std::memcpy(static_cast<double*>(dst) + i, &bits, 8);
        break;
    }
  }
}

struct IdxHeader {
  const IdxType* type;
  Shape shape;
  int64_t numel;
};

IdxHeader read_header(ByteSource& src) {
  unsigned char magic[4];
  read_exact(src, magic, 4, "the IDX magic (4 bytes)");
  OXM_CHECK(magic[0] == 0 && magic[1] == 0, Io, src.prefix(), "byte offset 0: field 'magic': bytes ",
            static_cast<int>(magic[0]), " ", static_cast<int>(magic[1]),
            " where IDX has 0 0 (not an IDX file, or a compressed file other than gzip)");
  IdxHeader h{nullptr, {}, 0};
  for (const auto& t : kIdxTypes)
    if (t.code == magic[2]) h.type = &t;
  OXM_CHECK(h.type, Io, src.prefix(), "byte offset 2: field 'type code': unknown code ", static_cast<int>(magic[2]),
            " (IDX has 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)");
  const int rank = magic[3];
  for (int d = 0; d < rank; ++d) {
    unsigned char b[4];
    read_exact(src, b, 4, detail::concat("the size of dimension ", d));
    h.shape.push_back(static_cast<int64_t>(load_be(b, 4)));
  }
  h.numel = file_numel(h.shape, h.type->itemsize, itemsize(h.type->target), src.prefix());
  return h;
}

Tensor read_idx(const InputFile& f) {
  const std::string& path = f.path;
  unsigned char head[2] = {0, 0};
  if (f.size >= 2) pread_exact(f, head, 2, 0, "the magic");
  const bool gz = head[0] == 0x1f && head[1] == 0x8b;
  SourceFactory open = [&]() -> std::unique_ptr<ByteSource> {
    if (gz)
      return std::make_unique<InflateSource>(f, 0, f.size, InflateSource::Mode::Gzip, std::nullopt, path + " (gzip)");
    return std::make_unique<FileSource>(f, 0, f.size, path);
  };
  auto src = open();
  const IdxHeader h = read_header(*src);
  const uint64_t need = static_cast<uint64_t>(h.numel) * h.type->itemsize;
  src =
      verified_data(std::move(src), open, need, detail::concat("the ", h.type->name, " data of sizes ", h.shape.str()));
  Tensor out = empty(h.shape, h.type->target);
  if (h.numel == 0) return out;
  char* dst = static_cast<char*>(raw_data(out));
  if (h.type->code == 0x08) {  // bytes need no conversion
    read_exact(*src, dst, static_cast<size_t>(need), "the data");
    expect_end(*src, "the data");
    return out;
  }
  const size_t osz = itemsize(h.type->target);
  std::vector<unsigned char> chunk(kChunk);
  const size_t per = kChunk / h.type->itemsize;
  for (size_t done = 0; done < static_cast<size_t>(h.numel);) {
    const size_t k = std::min(per, static_cast<size_t>(h.numel) - done);
    read_exact(*src, chunk.data(), k * h.type->itemsize, "the data");
    convert_be(*h.type, chunk.data(), dst + done * osz, k);
    done += k;
  }
  expect_end(*src, "the data");
  return out;
}

}  // namespace

Tensor load_idx(const std::string& path) { return read_idx(open_input(path, "load_idx")); }

Tensor load_idx_from_bytes(const void* data, size_t size, const std::string& name) {
  return read_idx(memory_input(data, size, name, "load_idx_from_bytes"));
}

void save_idx(const std::string& path, const Tensor& tensor, bool gzip) {
  OXM_CHECK(tensor.defined(), InvalidArgument, "save_idx: ", path, ": the tensor is undefined");
  const Shape& shape = tensor.shape();
  OXM_CHECK(shape.size() <= 255, InvalidArgument, "save_idx: ", path, ": rank ", shape.size(),
            " is more than IDX's 255 dimensions");
  for (size_t d = 0; d < shape.size(); ++d)
    OXM_CHECK(shape[d] <= int64_t{0xffffffff}, InvalidArgument, "save_idx: ", path, ": size ", shape[d],
              " of dimension ", d, " does not fit IDX's u32 sizes");
  unsigned char code = 0;
  size_t fsz = 0;
  switch (tensor.dtype()) {
    case DType::U8:
      code = 0x08, fsz = 1;
      break;
    case DType::F32:
      code = 0x0D, fsz = 4;
      break;
    case DType::F64:
      code = 0x0E, fsz = 8;
      break;
    case DType::I64:
      code = 0x0C, fsz = 4;
      break;
  }
  const Tensor c = host_contiguous(tensor);
  const int64_t n = c.numel();
  if (tensor.dtype() == DType::I64) {
    const int64_t* v = c.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      OXM_CHECK(v[i] >= std::numeric_limits<int32_t>::min() && v[i] <= std::numeric_limits<int32_t>::max(),
                InvalidArgument, "save_idx: ", path, ": element ", i, " of the i64 tensor is ", v[i],
                ", outside the i32 range IDX stores i64 tensors as (code 0x0C)");
  }

  AtomicFile file(path, "save_idx");
  std::unique_ptr<DeflateSink> z;
  if (gzip) z = std::make_unique<DeflateSink>(file, DeflateSink::Mode::Gzip);
  auto put = [&](const void* p, size_t k) { z ? z->write(p, k) : file.write(p, k); };
  std::vector<unsigned char> buf;
  buf.push_back(0), buf.push_back(0), buf.push_back(code), buf.push_back(static_cast<unsigned char>(shape.size()));
  for (int64_t d : shape)
    for (int s = 24; s >= 0; s -= 8) buf.push_back(static_cast<unsigned char>(static_cast<uint64_t>(d) >> s));
  put(buf.data(), buf.size());
  const char* src = static_cast<const char*>(raw_data(c));
  const size_t msz = itemsize(c.dtype());
  const size_t per = kChunk / fsz;
  buf.resize(per * fsz);
  for (size_t done = 0; done < static_cast<size_t>(n);) {
    const size_t k = std::min(per, static_cast<size_t>(n) - done);
    for (size_t i = 0; i < k; ++i) {
      uint64_t bits = 0;
      if (c.dtype() == DType::I64) {
        int64_t v;
        std::memcpy(&v, src + (done + i) * msz, 8);
        bits = static_cast<uint32_t>(static_cast<int32_t>(v));
      } else {
        std::memcpy(&bits, src + (done + i) * msz, msz);  // little-endian host: the low bytes
      }
      for (size_t b = 0; b < fsz; ++b) buf[i * fsz + b] = static_cast<unsigned char>(bits >> (8 * (fsz - 1 - b)));
    }
    put(buf.data(), k * fsz);
    done += k;
  }
  if (z) z->finish();
  file.commit();
}

}  // namespace oxmera
