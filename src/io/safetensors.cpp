// safetensors reader and writer; the format and the rules are described in include/oxmera/io.hpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/format_io.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/io.hpp"

static_assert(std::endian::native == std::endian::little, "oxmera's safetensors I/O assumes a little-endian host");

namespace oxmera {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr size_t kMaxJsonDepth = 3;                // header object > tensor entry > shape array
constexpr size_t kMaxArrayLength = 64;             // longest array a header may hold (shape rank)
constexpr size_t kChunkBytes = size_t{1} << 20;    // conversion / write buffer

using io_detail::Fd;
using io_detail::sys_error;

// Reads exactly n bytes at offset; Io error on failure or a short file.
// Reads n bytes at offset of the file or buffer (its sizes are checked against f.size before any read).
void pread_all(const io_detail::InputFile& f, void* dst, size_t n, uint64_t offset, const std::string& where) {
  if (f.bytes != nullptr) {
    OXM_CHECK(offset <= f.size && n <= f.size - offset, Io, where, ": the buffer ends early");
    if (n > 0) std::memcpy(dst, f.bytes + offset, n);
    return;
  }
  const int fd = f.fd.get();
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const size_t want = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t got = ::pread(fd, p, want, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      OXM_FAIL(Io, where, ": read failed: ", sys_error(errno));
    }
    OXM_CHECK(got > 0, Io, where, ": file ended early (was it truncated while reading?)");
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// ---------------------------------------------------------------------------------------------- dtypes
// Element types a file may hold that oxmera loads, and how each lands in memory.
enum class FileType { F32, F64, I64, U8, F16, BF16, I8, I16, I32, U16, U32, BOOL };

struct FileTypeInfo {
  const char* name;
  FileType type;
  size_t itemsize;
  DType target;
};
constexpr FileTypeInfo kLoadable[] = {
    {"F32", FileType::F32, 4, DType::F32}, {"F64", FileType::F64, 8, DType::F64},
    {"I64", FileType::I64, 8, DType::I64}, {"U8", FileType::U8, 1, DType::U8},
    {"F16", FileType::F16, 2, DType::F32}, {"BF16", FileType::BF16, 2, DType::F32},
    {"I8", FileType::I8, 1, DType::I64},   {"I16", FileType::I16, 2, DType::I64},
    {"I32", FileType::I32, 4, DType::I64}, {"U16", FileType::U16, 2, DType::I64},
    {"U32", FileType::U32, 4, DType::I64}, {"BOOL", FileType::BOOL, 1, DType::U8},
};
// Dtypes of the format that oxmera does not load (not exactly representable, or sub-byte / fp8 formats).
constexpr const char* kKnownUnsupported[] = {"U64",     "F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3",
                                             "F6_E3M2", "F4",      "C64",     "E8M0"};

const char* file_dtype_name(DType d) {
  switch (d) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::I64:
      return "I64";
    case DType::U8:
      return "U8";
  }
  return "?";
}
// Position of the dtype in the reference implementation's Dtype enum (it sorts by it, descending).
int reference_rank(DType d) {
  switch (d) {
    case DType::U8:
      return 0;
    case DType::F32:
      return 1;
    case DType::F64:
      return 2;
    case DType::I64:
      return 3;
  }
  return 0;
}

// Exact IEEE half → single conversion (subnormals, infinities and NaN payloads included).
inline uint32_t f16_to_f32_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return sign | 0x7f800000u | (man << 13);
  if (exp != 0) return sign | ((exp + 112u) << 23) | (man << 13);
  if (man == 0) return sign;
  uint32_t e = 113;  // a subnormal is man * 2^-24: normalise the mantissa
  while (!(man & 0x400u)) {
    man <<= 1;
    --e;
  }
  return sign | (e << 23) | ((man & 0x3ffu) << 13);
}

template <class Src, class Dst>
void widen(const char* src, Dst* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    Src v;
    std::memcpy(&v, src + i * sizeof(Src), sizeof(Src));
    dst[i] = static_cast<Dst>(v);
  }
}

void convert(FileType type, const char* src, void* dst, size_t n) {
  switch (type) {
    case FileType::F16:
    case FileType::BF16: {
      auto* out = static_cast<uint32_t*>(dst);
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = type == FileType::F16 ? f16_to_f32_bits(h) : static_cast<uint32_t>(h) << 16;
      }
      return;
    }
    case FileType::I8:
      return widen<int8_t>(src, static_cast<int64_t*>(dst), n);
    case FileType::I16:
      return widen<int16_t>(src, static_cast<int64_t*>(dst), n);
    case FileType::I32:
      return widen<int32_t>(src, static_cast<int64_t*>(dst), n);
    case FileType::U16:
      return widen<uint16_t>(src, static_cast<int64_t*>(dst), n);
    case FileType::U32:
      return widen<uint32_t>(src, static_cast<int64_t*>(dst), n);
    default:
      std::memcpy(dst, src, n * 1);
      return;  // not reached: same-layout types are read directly
  }
}

// ---------------------------------------------------------------------------------------------- loading
struct Entry {
  std::string name;
  const FileTypeInfo* type = nullptr;
  Shape shape;
  int64_t numel = 0;
  uint64_t begin = 0, end = 0;
};

// The parser's messages quote the bytes it choked on: escape them so that messages stay printable UTF-8.
std::string printable(const char* s) {
  std::string out;
  for (; *s; ++s) {
    const auto c = static_cast<unsigned char>(*s);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

struct HeaderAbort {
  std::string why;
};

// Parses the header JSON, rejecting duplicate keys, deep nesting and long arrays while parsing (so a
// hostile header cannot make the parser build a huge document).
json parse_header(const char* data, size_t n, const std::string& where) {
  struct Level {
    bool is_array;
    size_t count;
    std::unordered_set<std::string> keys;
  };
  std::vector<Level> stack;
  auto count_element = [&]() {
    if (!stack.empty() && stack.back().is_array && ++stack.back().count > kMaxArrayLength)
      throw HeaderAbort{detail::concat("an array in the header has more than ", kMaxArrayLength, " elements")};
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        count_element();
        if (stack.size() >= kMaxJsonDepth) throw HeaderAbort{"the header JSON is nested too deeply"};
        stack.push_back(Level{ev == json::parse_event_t::array_start, 0, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        stack.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!stack.back().keys.insert(k).second)
          throw HeaderAbort{stack.size() == 1 ? detail::concat("duplicate tensor name '", k, "' in the header")
                                              : detail::concat("duplicate key '", k, "' in the header")};
        break;
      }
      case json::parse_event_t::value:
        count_element();
        break;
    }
    return true;
  };
  try {
    return json::parse(data, data + n, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const HeaderAbort& a) {
    OXM_FAIL(Io, where, ": invalid header: ", a.why);
  } catch (const json::exception& e) {
    OXM_FAIL(Io, where, ": the header is not valid UTF-8 JSON: ", printable(e.what()));
  }
}

uint64_t as_offset(const json& v, const std::string& where, const std::string& name) {
  OXM_CHECK(v.is_number_unsigned(), Io, where, ": tensor '", name,
            "': data_offsets must hold non-negative integers, got ", v.dump());
  return v.get<uint64_t>();
}

// `where`: "<function>: <file or buffer>", the start of every message.
Entry parse_entry(const std::string& name, const json& v, uint64_t data_len, const std::string& where, const char* fn) {
  auto fail_prefix = [&] { return detail::concat(where, ": tensor '", name, "': "); };
  OXM_CHECK(v.is_object(), Io, fail_prefix(), "the entry must be a JSON object, got ", v.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    OXM_CHECK(v.contains(field), Io, fail_prefix(), "missing field '", field, "'");
  for (auto it = v.begin(); it != v.end(); ++it)
    OXM_CHECK(it.key() == "dtype" || it.key() == "shape" || it.key() == "data_offsets", Io, fail_prefix(),
              "unexpected field '", it.key(), "'");

  Entry e;
  e.name = name;
  const json& dt = v["dtype"];
  OXM_CHECK(dt.is_string(), Io, fail_prefix(), "dtype must be a string, got ", dt.dump());
  const auto& ds = dt.get_ref<const std::string&>();
  for (const auto& info : kLoadable)
    if (ds == info.name) e.type = &info;
  if (!e.type) {
    bool known = false;
    for (const char* k : kKnownUnsupported) known = known || ds == k;
    OXM_FAIL(Io, fail_prefix(), known ? "unsupported dtype " : "unknown dtype ", ds,
             " (oxmera loads F32, F64, I64, U8; F16 and BF16 as F32; I8, I16, I32, U16, U32 as I64; BOOL as U8)");
  }

  const json& sh = v["shape"];
  OXM_CHECK(sh.is_array(), Io, fail_prefix(), "shape must be an array, got ", sh.dump());
  for (const auto& d : sh) {
    OXM_CHECK(d.is_number_integer() || d.is_number_float(), Io, fail_prefix(),
              "shape must hold non-negative integers, got ", sh.dump());
    OXM_CHECK(d.is_number_unsigned(), Io, fail_prefix(), "shape ", sh.dump(), " holds a negative or non-integer size");
    const uint64_t u = d.get<uint64_t>();
    OXM_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), Io, fail_prefix(), "shape ", sh.dump(),
              " holds a size too large for int64");
    e.shape.push_back(static_cast<int64_t>(u));
  }
  try {
    e.numel = checked_numel(e.shape, fn, e.type->itemsize);
    (void)checked_numel(e.shape, fn, itemsize(e.type->target));
  } catch (const Error&) {
    OXM_FAIL(Io, fail_prefix(), "shape ", sh.dump(), " has more bytes than int64 can count");
  }

  const json& off = v["data_offsets"];
  OXM_CHECK(off.is_array() && off.size() == 2, Io, fail_prefix(), "data_offsets must be [begin, end], got ",
            off.dump());
  e.begin = as_offset(off[0], where, name);
  e.end = as_offset(off[1], where, name);
  OXM_CHECK(e.begin <= e.end, Io, fail_prefix(), "data_offsets ", off.dump(), " end before they begin");
  OXM_CHECK(e.end <= data_len, Io, fail_prefix(), "data_offsets ", off.dump(), " lie outside the data section of ",
            data_len, " bytes");
  const uint64_t want = static_cast<uint64_t>(e.numel) * e.type->itemsize;
  OXM_CHECK(e.end - e.begin == want, Io, fail_prefix(), "data_offsets ", off.dump(), " span ", e.end - e.begin,
            " bytes but dtype ", e.type->name, " and shape ", sh.dump(), " need ", want);
  return e;
}

SafetensorsFile load_impl(const io_detail::InputFile& f) {
  const std::string where = detail::concat(f.fn, ": ", f.path);
  const uint64_t file_size = f.size;
  OXM_CHECK(file_size >= 8, Io, where, ": ", f.bytes != nullptr ? "buffer" : "file", " of ", file_size,
            " bytes is too small for the 8-byte header length");

  unsigned char len_bytes[8];
  pread_all(f, len_bytes, 8, 0, where);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  OXM_CHECK(n <= kMaxHeaderBytes, Io, where, ": header length ", n, " exceeds the limit of ", kMaxHeaderBytes,
            " bytes");
  OXM_CHECK(n <= file_size - 8, Io, where, ": header length ", n, " is larger than the rest of the file (",
            file_size - 8, " bytes)");
  const uint64_t data_len = file_size - 8 - n;

  std::string header(n, '\0');
  pread_all(f, header.data(), n, 8, where);
  // nlohmann's lexer takes a NUL byte for the end of the input; valid JSON never holds one (control
  // characters in strings must be escaped), so reject it rather than ignore what follows.
  OXM_CHECK(header.find('\0') == std::string::npos, Io, where,
            ": the header is not valid UTF-8 JSON: it holds a NUL byte at offset ", header.find('\0'));
  json doc = parse_header(header.data(), header.size(), where);
  std::string().swap(header);
  OXM_CHECK(doc.is_object(), Io, where, ": the header must be a JSON object, got ", doc.type_name());

  SafetensorsFile out;
  std::vector<Entry> entries;
  entries.reserve(doc.size());
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "__metadata__") {
      OXM_CHECK(it->is_object(), Io, where, ": __metadata__ must be an object, got ", it->type_name());
      for (auto m = it->begin(); m != it->end(); ++m) {
        OXM_CHECK(m->is_string(), Io, where, ": __metadata__ value of '", m.key(), "' must be a string, got ",
                  m->dump());
        out.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(it.key(), *it, data_len, where, f.fn));
  }
  doc = json();

  // Like the reference: the tensors, ordered by offset, tile the data section exactly.
  std::vector<const Entry*> order;
  order.reserve(entries.size());
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    OXM_CHECK(e->begin >= covered, Io, where, ": tensor '", e->name, "' (bytes [", e->begin, ", ", e->end,
              ")) overlaps tensor '", prev ? prev->name : "", "' (bytes [", prev ? prev->begin : 0, ", ",
              prev ? prev->end : 0, "))");
    OXM_CHECK(e->begin == covered, Io, where, ": gap of ", e->begin - covered,
              " bytes in the data section before tensor '", e->name, "' (bytes [", covered, ", ", e->begin,
              ") belong to no tensor)");
    covered = e->end;
    prev = e;
  }
  OXM_CHECK(covered == data_len, Io, where, ": the data section has ", data_len - covered,
            " trailing bytes that belong to no tensor (it is ", data_len, " bytes, the tensors cover ", covered, ")");

  // Everything is valid: allocate and read.
  const uint64_t data_start = 8 + n;
  std::vector<char> chunk;
  for (const auto& e : entries) {
    Tensor t = empty(e.shape, e.type->target);
    if (e.numel > 0) {
      void* dst = io_detail::raw_data(t);
      const size_t isz = e.type->itemsize;
      if (isz == itemsize(e.type->target)) {  // same layout (F32, F64, I64, U8, BOOL)
        pread_all(f, dst, e.end - e.begin, data_start + e.begin, where);
      } else {
        const size_t per = kChunkBytes / isz;
        chunk.resize(per * isz);
        const size_t osz = itemsize(e.type->target);
        for (size_t done = 0; done < static_cast<size_t>(e.numel);) {
          const size_t k = std::min(per, static_cast<size_t>(e.numel) - done);
          pread_all(f, chunk.data(), k * isz, data_start + e.begin + done * isz, where);
          convert(e.type->type, chunk.data(), static_cast<char*>(dst) + done * osz, k);
          done += k;
        }
      }
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------- saving
struct SaveItem {
  const std::string* name;
  const Tensor* tensor;
  int64_t nbytes;
};

void save_impl(const std::string& path, std::vector<SaveItem> items, bool reference_order,
               const std::map<std::string, std::string>& metadata) {
  OXM_CHECK(!path.empty(), InvalidArgument, "save_safetensors: empty path");
  {
    std::unordered_set<std::string_view> seen;
    for (const auto& it : items) {
      OXM_CHECK(*it.name != "__metadata__", InvalidArgument,
                "save_safetensors: the tensor name '__metadata__' is reserved by the format");
      OXM_CHECK(seen.insert(*it.name).second, InvalidArgument, "save_safetensors: duplicate tensor name '", *it.name,
                "'");
      OXM_CHECK(it.tensor->defined(), InvalidArgument, "save_safetensors: tensor '", *it.name, "' is undefined");
    }
  }
  for (auto& it : items) {
    const auto isz = itemsize(it.tensor->dtype());
    it.nbytes = checked_numel(it.tensor->shape(), "save_safetensors", isz) * static_cast<int64_t>(isz);
  }
  if (reference_order)
    std::stable_sort(items.begin(), items.end(), [](const SaveItem& a, const SaveItem& b) {
      const int ra = reference_rank(a.tensor->dtype()), rb = reference_rank(b.tensor->dtype());
      return ra != rb ? ra > rb : *a.name < *b.name;
    });

  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  int64_t offset = 0;
  for (const auto& it : items) {
    ordered_json e = ordered_json::object();
    e["dtype"] = file_dtype_name(it.tensor->dtype());
    ordered_json shape = ordered_json::array();
    for (int64_t d : it.tensor->shape()) shape.push_back(d);
    e["shape"] = std::move(shape);
    OXM_CHECK(offset <= std::numeric_limits<int64_t>::max() - it.nbytes, InvalidArgument,
              "save_safetensors: the tensors hold more bytes than int64 can count");
    e["data_offsets"] = ordered_json::array({offset, offset + it.nbytes});
    offset += it.nbytes;
    header[*it.name] = std::move(e);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {
    OXM_FAIL(InvalidArgument, "save_safetensors: a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  // Written to a temporary file beside the target, fsynced and renamed over it (removed on any failure).
  io_detail::AtomicFile file(path, "save_safetensors");
  std::vector<char> buf;
  buf.reserve(kChunkBytes);
  auto put = [&](const void* p, size_t n) {
    if (buf.size() + n > kChunkBytes) {
      file.write(buf.data(), buf.size());
      buf.clear();
    }
    if (n >= kChunkBytes) {
      file.write(p, n);
    } else {
      buf.insert(buf.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
    }
  };
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));
  put(len_bytes, 8);
  put(text.data(), text.size());
  for (const auto& it : items) {
    if (it.nbytes == 0) continue;
    put(io_detail::raw_data(io_detail::host_contiguous(*it.tensor)), static_cast<size_t>(it.nbytes));
  }
  file.write(buf.data(), buf.size());
  file.commit();
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SaveItem> items;
  items.reserve(tensors.size());
  for (const auto& [name, t] : tensors) items.push_back(SaveItem{&name, &t, 0});
  save_impl(path, std::move(items), /*reference_order=*/true, metadata);
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SaveItem> items;
  items.reserve(tensors.size());
  for (const auto& [name, t] : tensors) items.push_back(SaveItem{&name, &t, 0});
  save_impl(path, std::move(items), /*reference_order=*/false, metadata);
}

void save_safetensors(const std::string& path, std::initializer_list<std::pair<const std::string, Tensor>> tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SaveItem> items;
  items.reserve(tensors.size());
  for (const auto& [name, t] : tensors) items.push_back(SaveItem{&name, &t, 0});
  save_impl(path, std::move(items), /*reference_order=*/true, metadata);
}

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  return load_impl(io_detail::open_input(path, "load_safetensors")).tensors;
}

SafetensorsFile load_safetensors_with_metadata(const std::string& path) {
  return load_impl(io_detail::open_input(path, "load_safetensors"));
}

std::map<std::string, Tensor> load_safetensors_from_bytes(const void* data, size_t size, const std::string& name) {
  return load_impl(io_detail::memory_input(data, size, name, "load_safetensors_from_bytes")).tensors;
}

SafetensorsFile load_safetensors_with_metadata_from_bytes(const void* data, size_t size, const std::string& name) {
  return load_impl(io_detail::memory_input(data, size, name, "load_safetensors_from_bytes"));
}

}  // namespace oxmera
