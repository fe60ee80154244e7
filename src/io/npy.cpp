// NumPy .npy and .npz readers and writers; formats and dtype mapping in include/oxmera/formats.hpp.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>

#include "io/format_io.hpp"
#include "oxmera/formats.hpp"

static_assert(std::endian::native == std::endian::little, "oxmera's .npy I/O assumes a little-endian host");

namespace oxmera {
namespace {
using namespace io_detail;

constexpr size_t kMaxNpyHeader = size_t{1} << 20;
constexpr size_t kMaxRank = 64;

enum class Elem { F4, F8, I8, U1, B1, I1, I2, I4, U2, U4 };
struct NpyType {
  const char* code;  // kind and size, after the byte-order character
  Elem elem;
  size_t itemsize;
  DType target;
};
constexpr NpyType kNpyTypes[] = {
    {"f4", Elem::F4, 4, DType::F32}, {"f8", Elem::F8, 8, DType::F64}, {"i8", Elem::I8, 8, DType::I64},
    {"u1", Elem::U1, 1, DType::U8},  {"b1", Elem::B1, 1, DType::U8},  {"i1", Elem::I1, 1, DType::I64},
    {"i2", Elem::I2, 2, DType::I64}, {"i4", Elem::I4, 4, DType::I64}, {"u2", Elem::U2, 2, DType::I64},
    {"u4", Elem::U4, 4, DType::I64},
};

// ------------------------------------------------------------------------- the header: a Python dict literal
struct NpyHeader {
  const NpyType* type = nullptr;
  bool fortran = false;
  Shape shape;
  int64_t numel = 0;
};

class DictParser {
 public:
  DictParser(std::string_view s, std::string prefix, uint64_t base) : s_(s), prefix_(std::move(prefix)), base_(base) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    std::string descr;
    expect('{', "the header dict");
    for (;;) {
      ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const size_t key_at = i_;
      const std::string key = str("a key");
      ws();
      expect(':', "':' after a key");
      ws();
      if (key == "descr") {
        OXM_CHECK(peek() == '\'' || peek() == '"', UnsupportedDType, prefix_, "header offset ", base_ + i_,
                  ": field 'descr': structured or sub-array dtypes are not supported (oxmera reads plain <f4, <f8, "
                  "<i8, |u1, |b1, <i4, <i2, |i1, <u4, <u2 arrays)");
        descr = str("field 'descr'");
        have_descr = true;
      } else if (key == "fortran_order") {
        if (s_.substr(i_, 4) == "True") {
          h.fortran = true, i_ += 4;
        } else if (s_.substr(i_, 5) == "False") {
          h.fortran = false, i_ += 5;
        } else {
          fail("field 'fortran_order': expected True or False");
        }
        have_fortran = true;
      } else if (key == "shape") {
        h.shape = shape();
        have_shape = true;
      } else {
        i_ = key_at;
        fail(detail::concat("unexpected key '", key, "' (a .npy header has descr, fortran_order and shape)"));
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      ws();
      expect('}', "',' or '}' after a value");
      break;
    }
    ws();
    OXM_CHECK(i_ == s_.size(), Io, prefix_, "header offset ", base_ + i_, ": text after the header dict");
    OXM_CHECK(have_descr && have_fortran && have_shape, Io, prefix_, "the header lacks field '",
              !have_descr     ? "descr"
              : !have_fortran ? "fortran_order"
                              : "shape",
              "'");
    h.type = dtype(descr);
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    OXM_FAIL(Io, prefix_, "header offset ", base_ + i_, ": ", why);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c, const char* what) {
    if (peek() != c) fail(detail::concat("expected ", what));
    ++i_;
  }
  std::string str(const char* what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail(detail::concat("expected a quoted string for ", what));
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) fail(detail::concat("unterminated string in ", what));
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  Shape shape() {
    Shape out;
    expect('(', "field 'shape': a tuple");
    for (;;) {
      ws();
      if (peek() == ')') {
        ++i_;
        return out;
      }
      if (peek() < '0' || peek() > '9') fail("field 'shape': expected a non-negative integer");
      uint64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        const uint64_t digit = static_cast<uint64_t>(peek() - '0');
        if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10)
          fail("field 'shape': a size does not fit int64");
        v = v * 10 + digit;
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2 longs
      if (out.size() >= kMaxRank) fail(detail::concat("field 'shape': more than ", kMaxRank, " dimensions"));
      out.push_back(static_cast<int64_t>(v));
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      ws();
      expect(')', "field 'shape': ',' or ')'");
      return out;
    }
  }
  const NpyType* dtype(const std::string& d) const {
    OXM_CHECK(d.size() >= 2, UnsupportedDType, prefix_, "field 'descr': dtype '", d, "' is not supported");
    const char order = d[0];
    const std::string code = d.substr(1);
    const NpyType* t = nullptr;
    for (const auto& c : kNpyTypes)
      if (code == c.code) t = &c;
    OXM_CHECK(t, UnsupportedDType, prefix_, "field 'descr': dtype '", d,
              "' is not supported (oxmera reads <f4, <f8, <i8, |u1, |b1 and <i4, <i2, |i1, <u4, <u2 as i64)");
    OXM_CHECK(order == '<' || order == '|' || order == '=' || (order == '>' && t->itemsize == 1), UnsupportedDType,
              prefix_, "field 'descr': dtype '", d,
              order == '>' ? "' is big-endian; oxmera reads little-endian .npy files (convert with "
                             "a.astype(a.dtype.newbyteorder('<')))"
                           : "' has an unknown byte order");
    OXM_CHECK(order != '|' || t->itemsize == 1, Io, prefix_, "field 'descr': dtype '", d,
              "': '|' (no byte order) is only valid for 1-byte types");
    return t;
  }

  std::string_view s_;
  std::string prefix_;
  uint64_t base_;
  size_t i_ = 0;
};

NpyHeader read_npy_header(ByteSource& src) {
  unsigned char magic[8];
  read_exact(src, magic, 8, "the .npy magic and version (8 bytes)");
  OXM_CHECK(std::memcmp(magic, "\x93NUMPY", 6) == 0, Io, src.prefix(),
            "byte offset 0: field 'magic': not a .npy file (it does not start with \\x93NUMPY)");
  const int major = magic[6], minor = magic[7];
  OXM_CHECK(major >= 1 && major <= 3 && minor == 0, Io, src.prefix(), "byte offset 6: field 'version': .npy format ",
            major, ".", minor, " (oxmera reads 1.0, 2.0 and 3.0)");
  uint64_t hlen = 0;
  unsigned char lb[4] = {0, 0, 0, 0};
  const size_t nlen = major == 1 ? 2 : 4;
  read_exact(src, lb, nlen, "the header length");
  for (size_t i = nlen; i-- > 0;) hlen = (hlen << 8) | lb[i];
  OXM_CHECK(hlen <= kMaxNpyHeader, Io, src.prefix(), "byte offset 8: field 'header length': ", hlen,
            " bytes, more than oxmera's limit of ", kMaxNpyHeader);
  if (auto rem = src.remaining())
    OXM_CHECK(*rem >= hlen, Io, src.prefix(), "byte offset 8: field 'header length': ", hlen, " bytes but only ", *rem,
              " follow (truncated)");
  const uint64_t base = src.position();
  std::string text(static_cast<size_t>(hlen), '\0');
  read_exact(src, text.data(), text.size(), "the header");
  return DictParser(text, src.prefix(), base).parse();
}

void convert_le(Elem e, const unsigned char* src, void* dst, size_t n, size_t first, const ByteSource& s) {
  auto widen = [&]<class T>(T) {
    auto* out = static_cast<int64_t*>(dst);
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, src + i * sizeof(T), sizeof(T));
      out[i] = static_cast<int64_t>(v);
    }
  };
  switch (e) {
    case Elem::B1:
      for (size_t i = 0; i < n; ++i)
        OXM_CHECK(src[i] <= 1, Io, s.prefix(), "bool element ", first + i, " holds byte ", static_cast<int>(src[i]),
                  " (a numpy bool is 0 or 1; corrupted data)");
      std::memcpy(dst, src, n);
      return;
    case Elem::I1:
      return widen(int8_t{});
    case Elem::I2:
      return widen(int16_t{});
    case Elem::I4:
      return widen(int32_t{});
    case Elem::U2:
      return widen(uint16_t{});
    case Elem::U4:
      return widen(uint32_t{});
    default:
      return;  // same layout: read in place
  }
}

// Reads one .npy array from the source `open` makes (twice when it is a compressed stream).
Tensor read_npy(const SourceFactory& open) {
  auto src = open();
  const NpyHeader h = read_npy_header(*src);
  Shape file_shape = h.shape;
  if (h.fortran) std::reverse(file_shape.begin(), file_shape.end());
  const int64_t numel = file_numel(file_shape, h.type->itemsize, itemsize(h.type->target), src->prefix());
  const uint64_t need = static_cast<uint64_t>(numel) * h.type->itemsize;
  src =
      verified_data(std::move(src), open, need, detail::concat("the ", h.type->code, " data of shape ", h.shape.str()));
  Tensor t = empty(file_shape, h.type->target);
  if (numel > 0) {
    char* dst = static_cast<char*>(raw_data(t));
    const size_t fsz = h.type->itemsize, osz = itemsize(h.type->target);
    if (fsz == osz && h.type->elem != Elem::B1) {
      read_exact(*src, dst, static_cast<size_t>(need), "the data");
    } else {
      std::vector<unsigned char> chunk(kChunk);
      const size_t per = kChunk / fsz;
      for (size_t done = 0; done < static_cast<size_t>(numel);) {
        const size_t k = std::min(per, static_cast<size_t>(numel) - done);
        read_exact(*src, chunk.data(), k * fsz, "the data");
        convert_le(h.type->elem, chunk.data(), dst + done * osz, k, done, *src);
        done += k;
      }
    }
  }
  expect_end(*src, "the data");
  if (h.fortran && h.shape.size() > 1) {
    Dims rev;
    for (size_t d = h.shape.size(); d-- > 0;) rev.push_back(static_cast<int64_t>(d));
    t = t.permute(rev).contiguous();
  }
  return t;
}

const char* npy_descr(DType d) {
  switch (d) {
    case DType::F32:
      return "<f4";
    case DType::F64:
      return "<f8";
    case DType::I64:
      return "<i8";
    case DType::U8:
      return "|u1";
  }
  return "?";
}

std::string npy_header_bytes(const Tensor& t) {
  std::string dict = detail::concat("{'descr': '", npy_descr(t.dtype()), "', 'fortran_order': False, 'shape': (");
  for (size_t d = 0; d < t.shape().size(); ++d) dict += detail::concat(d ? ", " : "", t.shape()[d]);
  dict += t.shape().size() == 1 ? ",), }" : "), }";
  const bool v2 = dict.size() + 11 + 63 > 65535;
  const size_t pre = v2 ? 12 : 10;
  const size_t total = (pre + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - pre - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const size_t n = dict.size();
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out + dict;
}

// Writes t as .npy bytes through put(p, n).
template <class Put>
void write_npy(const Tensor& t, Put&& put) {
  const std::string head = npy_header_bytes(t);
  put(head.data(), head.size());
  const Tensor c = host_contiguous(t);
  const size_t bytes = static_cast<size_t>(c.numel()) * itemsize(c.dtype());
  const char* p = static_cast<const char*>(raw_data(c));
  for (size_t done = 0; done < bytes;) {
    const size_t k = std::min(kChunk * 16, bytes - done);
    put(p + done, k);
    done += k;
  }
}

// ---------------------------------------------------------------------------------------------- zip
uint64_t le(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}
void put_le(std::string& s, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) s += static_cast<char>(i < 8 ? (v >> (8 * i)) & 0xff : 0);
}

struct ZipEntry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, local_offset = 0;
};

std::vector<ZipEntry> read_central_directory(const InputFile& f) {
  const std::string& path = f.path;
  OXM_CHECK(f.size >= 22, Io, f.fn, ": ", path, ": file of ", f.size,
            " bytes is too small for a zip archive's end record (22 bytes)");
  // The end-of-central-directory record: the last 22 bytes, or earlier when an archive comment follows it.
  const uint64_t tail_len = std::min<uint64_t>(f.size, 22 + 65535);
  std::vector<unsigned char> tail(static_cast<size_t>(tail_len));
  pread_exact(f, tail.data(), tail.size(), f.size - tail_len, "the end of the archive");
  size_t at_end = std::string::npos;
  for (size_t i = tail.size() - 22 + 1; i-- > 0;)
    if (le(&tail[i], 4) == 0x06054b50 && i + 22 + le(&tail[i + 20], 2) == tail.size()) {
      at_end = i;
      break;
    }
  OXM_CHECK(at_end != std::string::npos, Io, f.fn, ": ", path,
            ": no zip end-of-central-directory record (not a zip / .npz file, or truncated)");
  const uint64_t eocd = f.size - tail_len + at_end;
  const unsigned char* e = &tail[at_end];
  uint64_t disk = le(e + 4, 2), cd_disk = le(e + 6, 2), count = le(e + 10, 2), cd_size = le(e + 12, 4),
           cd_offset = le(e + 16, 4);
  uint64_t cd_limit = eocd;
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // zip64: a locator right before the end record points at the zip64 end record.
    OXM_CHECK(eocd >= 20, Io, f.fn, ": ", path, ": byte offset ", eocd, ": zip64 sizes but no zip64 locator");
    unsigned char loc[20];
    pread_exact(f, loc, 20, eocd - 20, "the zip64 locator");
    OXM_CHECK(le(loc, 4) == 0x07064b50, Io, f.fn, ": ", path, ": byte offset ", eocd - 20,
              ": field 'zip64 locator': missing (the end record holds zip64 markers)");
    const uint64_t z64 = le(loc + 8, 8);
    OXM_CHECK(z64 <= eocd - 20 && eocd - 20 - z64 >= 56, Io, f.fn, ": ", path, ": byte offset ", eocd - 20,
              ": field 'zip64 end record offset': ", z64, " lies outside the archive");
    unsigned char r[56];
    pread_exact(f, r, 56, z64, "the zip64 end record");
    OXM_CHECK(le(r, 4) == 0x06064b50, Io, f.fn, ": ", path, ": byte offset ", z64,
              ": field 'zip64 end record signature': wrong");
    disk = le(r + 16, 4), cd_disk = le(r + 20, 4), count = le(r + 32, 8), cd_size = le(r + 40, 8),
    cd_offset = le(r + 48, 8);
    cd_limit = z64;
  }
  OXM_CHECK(disk == 0 && cd_disk == 0, Io, f.fn, ": ", path, ": multi-disk zip archives are not supported");
  OXM_CHECK(cd_offset <= cd_limit && cd_size <= cd_limit - cd_offset, Io, f.fn, ": ", path, ": byte offset ", eocd,
            ": the central directory (offset ", cd_offset, ", ", cd_size, " bytes) lies outside the archive");
  OXM_CHECK(count <= cd_size / 46, Io, f.fn, ": ", path, ": byte offset ", eocd, ": field 'entry count': ", count,
            " entries cannot fit a central directory of ", cd_size, " bytes");
  std::vector<unsigned char> cd(static_cast<size_t>(cd_size));
  if (cd_size) pread_exact(f, cd.data(), cd.size(), cd_offset, "the central directory");

  std::vector<ZipEntry> out;
  out.reserve(static_cast<size_t>(count));
  size_t p = 0;
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t off = cd_offset + p;
    OXM_CHECK(cd.size() - p >= 46 && le(&cd[p], 4) == 0x02014b50, Io, f.fn, ": ", path, ": byte offset ", off,
              ": central directory entry ", k, ": bad signature or truncated");
    ZipEntry z;
    z.flags = static_cast<uint16_t>(le(&cd[p + 8], 2));
    z.method = static_cast<uint16_t>(le(&cd[p + 10], 2));
    z.crc = static_cast<uint32_t>(le(&cd[p + 16], 4));
    z.csize = le(&cd[p + 20], 4);
    z.usize = le(&cd[p + 24], 4);
    const size_t nlen = le(&cd[p + 28], 2), xlen = le(&cd[p + 30], 2), clen = le(&cd[p + 32], 2);
    const uint64_t start_disk = le(&cd[p + 34], 2);
    z.local_offset = le(&cd[p + 42], 4);
    OXM_CHECK(cd.size() - p - 46 >= nlen + xlen + clen, Io, f.fn, ": ", path, ": byte offset ", off,
              ": central directory entry ", k, ": name / extra / comment run past the directory");
    z.name.assign(reinterpret_cast<const char*>(&cd[p + 46]), nlen);
    // zip64 extended information: the 64-bit values of the fields that hold 0xffffffff, in this order.
    for (size_t x = p + 46 + nlen; x + 4 <= p + 46 + nlen + xlen;) {
      const uint64_t id = le(&cd[x], 2), sz = le(&cd[x + 2], 2);
      OXM_CHECK(x + 4 + sz <= p + 46 + nlen + xlen, Io, f.fn, ": ", path, ": central directory entry '", z.name,
                "': an extra field runs past its entry");
      if (id == 0x0001) {
        size_t q = x + 4;
        auto take = [&](uint64_t& field, const char* what) {
          if (field != 0xffffffff) return;
          OXM_CHECK(q + 8 <= x + 4 + sz, Io, f.fn, ": ", path, ": central directory entry '", z.name,
                    "': field 'zip64 ", what, "': missing from the zip64 extra field");
          field = le(&cd[q], 8);
          q += 8;
        };
        take(z.usize, "uncompressed size");
        take(z.csize, "compressed size");
        take(z.local_offset, "local header offset");
      }
      x += 4 + sz;
    }
    OXM_CHECK(start_disk == 0 || start_disk == 0xffff, Io, f.fn, ": ", path,
              ": multi-disk zip archives are not supported");
    out.push_back(std::move(z));
    p += 46 + nlen + xlen + clen;
  }
  return out;
}

}  // namespace

Tensor load_npy(const std::string& path) {
  const InputFile f = open_input(path, "load_npy");
  return read_npy([&]() -> std::unique_ptr<ByteSource> { return std::make_unique<FileSource>(f, 0, f.size, path); });
}

Tensor load_npy_from_bytes(const void* data, size_t size, const std::string& name) {
  const InputFile f = memory_input(data, size, name, "load_npy_from_bytes");
  return read_npy([&]() -> std::unique_ptr<ByteSource> { return std::make_unique<FileSource>(f, 0, f.size, f.path); });
}

void save_npy(const std::string& path, const Tensor& tensor) {
  OXM_CHECK(tensor.defined(), InvalidArgument, "save_npy: ", path, ": the tensor is undefined");
  AtomicFile file(path, "save_npy");
  write_npy(tensor, [&](const void* p, size_t n) { file.write(p, n); });
  file.commit();
}

namespace {
std::map<std::string, Tensor> read_npz(const InputFile& f) {
  const std::string& path = f.path;
  const std::vector<ZipEntry> entries = read_central_directory(f);
  std::map<std::string, Tensor> out;
  for (const ZipEntry& z : entries) {
    const std::string where = detail::concat(path, ": member '", z.name, "'");
    OXM_CHECK(z.name.size() > 4 && z.name.compare(z.name.size() - 4, 4, ".npy") == 0, Io, f.fn, ": ", where,
              ": not a .npy array (an .npz holds <name>.npy members)");
    OXM_CHECK(!(z.flags & 0x1), Io, f.fn, ": ", where, ": encrypted members are not supported");
    OXM_CHECK(z.method == 0 || z.method == 8, Io, f.fn, ": ", where, ": compression method ", z.method,
              " (oxmera reads stored (0) and deflated (8) members)");
    OXM_CHECK(z.local_offset <= f.size && f.size - z.local_offset >= 30, Io, f.fn, ": ", where,
              ": field 'local header offset': ", z.local_offset, " lies outside the archive of ", f.size, " bytes");
    unsigned char lh[30];
    pread_exact(f, lh, 30, z.local_offset, "a local file header");
    OXM_CHECK(le(lh, 4) == 0x04034b50, Io, f.fn, ": ", where, ": byte offset ", z.local_offset,
              ": field 'local header signature': wrong (corrupted archive)");
    const uint64_t data = z.local_offset + 30 + le(lh + 26, 2) + le(lh + 28, 2);
    OXM_CHECK(data <= f.size && z.csize <= f.size - data, Io, f.fn, ": ", where, ": byte offset ", data,
              ": field 'compressed size': ", z.csize, " bytes run past the end of the archive (", f.size, " bytes)");
    OXM_CHECK(z.method != 0 || z.csize == z.usize, Io, f.fn, ": ", where, ": a stored member's sizes differ (", z.csize,
              " compressed, ", z.usize, " uncompressed)");
    const std::string name = z.name.substr(0, z.name.size() - 4);
    OXM_CHECK(!out.count(name), Io, f.fn, ": ", where, ": a second member named '", name, "'");
    SourceFactory open = [&]() -> std::unique_ptr<ByteSource> {
      std::unique_ptr<ByteSource> s;
      if (z.method == 0)
        s = std::make_unique<FileSource>(f, data, data + z.csize, where);
      else
        s = std::make_unique<InflateSource>(f, data, data + z.csize, InflateSource::Mode::RawDeflate, z.usize, where);
      s->expect_crc(z.crc);
      return s;
    };
    out.emplace(name, read_npy(open));
  }
  return out;
}

void save_npz_impl(const std::string& path, const std::vector<std::pair<const std::string*, const Tensor*>>& items,
                   bool compress) {
  std::set<std::string> seen;
  for (const auto& [name, t] : items) {
    OXM_CHECK(!name->empty(), InvalidArgument, "save_npz: ", path, ": an empty array name");
    OXM_CHECK(name->size() + 4 <= 0xffff, InvalidArgument, "save_npz: ", path, ": array name too long");
    OXM_CHECK(seen.insert(*name).second, InvalidArgument, "save_npz: ", path, ": duplicate array name '", *name, "'");
    OXM_CHECK(t->defined(), InvalidArgument, "save_npz: ", path, ": array '", *name, "' is undefined");
  }
  OXM_CHECK(items.size() < 0xffff, InvalidArgument, "save_npz: ", path, ": more than 65534 arrays");
  AtomicFile file(path, "save_npz");
  std::string central;
  const uint16_t method = compress ? 8 : 0;
  auto fits = [&](uint64_t v, const std::string& name) {
    OXM_CHECK(v < 0xffffffffull, InvalidArgument, "save_npz: ", path, ": array '", name,
              "': members or archives of 4 GiB and more need zip64, which oxmera does not write");
  };
  for (const auto& [name, t] : items) {
    const std::string member = *name + ".npy";
    bool utf8 = false;
    for (unsigned char c : member) utf8 = utf8 || c >= 0x80;
    const uint16_t flags = utf8 ? 0x800 : 0;
    const uint64_t local = file.size();
    fits(local, *name);
    std::string lh;
    put_le(lh, 0x04034b50, 4), put_le(lh, 20, 2), put_le(lh, flags, 2), put_le(lh, method, 2);
    put_le(lh, 0, 2), put_le(lh, 0x21, 2);  // 1980-01-01 00:00: reproducible archives
    put_le(lh, 0, 12);                      // CRC and sizes, patched below
    put_le(lh, member.size(), 2), put_le(lh, 0, 2);
    lh += member;
    file.write(lh.data(), lh.size());
    const uint64_t data_start = file.size();
    uint32_t crc = 0;
    uint64_t usize = 0;
    if (compress) {
      DeflateSink z(file, DeflateSink::Mode::RawDeflate);
      write_npy(*t, [&](const void* p, size_t n) {
        crc = crc32_update(crc, p, n);
        usize += n;
        z.write(p, n);
      });
      z.finish();
    } else {
      write_npy(*t, [&](const void* p, size_t n) {
        crc = crc32_update(crc, p, n);
        usize += n;
        file.write(p, n);
      });
    }
    const uint64_t csize = file.size() - data_start;
    fits(usize, *name), fits(csize, *name), fits(file.size(), *name);
    std::string sizes;
    put_le(sizes, crc, 4), put_le(sizes, csize, 4), put_le(sizes, usize, 4);
    file.patch(local + 14, sizes.data(), sizes.size());
    put_le(central, 0x02014b50, 4), put_le(central, 20, 2), put_le(central, 20, 2), put_le(central, flags, 2);
    put_le(central, method, 2), put_le(central, 0, 2), put_le(central, 0x21, 2);
    central += sizes;
    put_le(central, member.size(), 2), put_le(central, 0, 2), put_le(central, 0, 2), put_le(central, 0, 2);
    put_le(central, 0, 2), put_le(central, 0, 4), put_le(central, local, 4);
    central += member;
  }
  const uint64_t cd_offset = file.size();
  fits(cd_offset + central.size(), "(central directory)");
  std::string end;
  put_le(end, 0x06054b50, 4), put_le(end, 0, 4), put_le(end, items.size(), 2), put_le(end, items.size(), 2);
  put_le(end, central.size(), 4), put_le(end, cd_offset, 4), put_le(end, 0, 2);
  file.write(central.data(), central.size());
  file.write(end.data(), end.size());
  file.commit();
}
}  // namespace

std::map<std::string, Tensor> load_npz(const std::string& path) { return read_npz(open_input(path, "load_npz")); }

std::map<std::string, Tensor> load_npz_from_bytes(const void* data, size_t size, const std::string& name) {
  return read_npz(memory_input(data, size, name, "load_npz_from_bytes"));
}

void save_npz(const std::string& path, const std::map<std::string, Tensor>& tensors, bool compress) {
  std::vector<std::pair<const std::string*, const Tensor*>> items;
  for (const auto& [n, t] : tensors) items.emplace_back(&n, &t);
  save_npz_impl(path, items, compress);
}

void save_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors, bool compress) {
  std::vector<std::pair<const std::string*, const Tensor*>> items;
  for (const auto& [n, t] : tensors) items.emplace_back(&n, &t);
  save_npz_impl(path, items, compress);
}

}  // namespace oxmera

namespace oxmera {
void save_npz(const std::string& path, std::initializer_list<std::pair<const std::string, Tensor>> tensors,
              bool compress) {
  std::vector<std::pair<const std::string*, const Tensor*>> items;
  for (const auto& [n, t] : tensors) items.emplace_back(&n, &t);
  save_npz_impl(path, items, compress);
}
}  // namespace oxmera
