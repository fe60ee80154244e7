// Byte sources and sinks of the file formats (see format_io.hpp).
#include "io/format_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/fault_injection.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera::io_detail {

std::string sys_error(int err) { return std::strerror(err); }

void Fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

InputFile open_input(const std::string& path, const char* fn) {
  InputFile f;
  f.path = path;
  f.fn = fn;
  f.fd = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  OXM_CHECK(f.fd.get() >= 0, Io, fn, ": cannot open ", path, ": ", sys_error(errno));
  struct stat st {};
  OXM_CHECK(::fstat(f.fd.get(), &st) == 0, Io, fn, ": ", path, ": stat failed: ", sys_error(errno));
  OXM_CHECK(S_ISREG(st.st_mode), Io, fn, ": ", path, " is not a regular file");
  f.size = static_cast<uint64_t>(st.st_size);
  return f;
}

InputFile memory_input(const void* data, size_t size, const std::string& name, const char* fn) {
  OXM_CHECK(data != nullptr || size == 0, InvalidArgument, fn, ": a null pointer with a size of ", size, " bytes");
  InputFile f;
  f.path = name.empty() ? detail::concat("a buffer of ", size, " bytes") : name;
  f.fn = fn;
  f.size = size;
  static const unsigned char kNone = 0;  // a non-null pointer for an empty buffer
  f.bytes = data != nullptr ? static_cast<const unsigned char*>(data) : &kNone;
  return f;
}

void pread_exact(const InputFile& f, void* dst, size_t n, uint64_t offset, const std::string& what) {
  if (f.bytes != nullptr) {
    OXM_CHECK(offset <= f.size && n <= f.size - offset, Io, f.fn, ": ", f.path, ": the buffer ends at byte offset ",
              std::min(offset, f.size), " while reading ", what, " (bytes ", offset, "..", offset + n, ")");
    if (n > 0) std::memcpy(dst, f.bytes + offset, n);
    return;
  }
  auto* p = static_cast<char*>(dst);
  const uint64_t start = offset;
  while (n > 0) {
    const ssize_t got = ::pread(f.fd.get(), p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      OXM_FAIL(Io, f.fn, ": ", f.path, ": read of ", what, " at byte offset ", offset, " failed: ", sys_error(errno));
    }
    OXM_CHECK(got > 0, Io, f.fn, ": ", f.path, ": the file ends at byte offset ", offset, " while reading ", what,
              " (bytes ", start, "..", start + (offset - start) + n, "); is it truncated?");
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// ------------------------------------------------------------------------------------------------ sources
size_t ByteSource::read(void* dst, size_t n) {
  if (n == 0 || ended_) return 0;
  const size_t got = read_raw(dst, n);
  if (got == 0) {
    ended_ = true;
    if (crc_expected_)
      OXM_CHECK(crc_ == *crc_expected_, Io, prefix(), "CRC-32 mismatch: the data has ", std::hex, crc_,
                ", the archive says ", *crc_expected_, " (corrupted file)");
    return 0;
  }
  if (crc_expected_) crc_ = crc32_update(crc_, dst, got);
  pos_ += got;
  return got;
}

std::string at(const ByteSource& s) { return detail::concat(s.offset_kind(), " ", s.pos_); }

void read_exact(ByteSource& s, void* dst, size_t n, const std::string& what) {
  auto* p = static_cast<char*>(dst);
  const uint64_t start = s.position();
  while (n > 0) {
    const size_t got = s.read(p, n);
    OXM_CHECK(got > 0, Io, s.prefix(), "the data ends at ", at(s), " while reading ", what, " (which began at ", start,
              " and needs ", (s.position() - start) + n, " bytes); the file is truncated or its sizes lie");
    p += got;
    n -= got;
  }
}

void expect_end(ByteSource& s, const std::string& what) {
  char c;
  OXM_CHECK(s.read(&c, 1) == 0, Io, s.prefix(), what, " is followed by more bytes (at ", at(s),
            "): the sizes in the header do not match the data");
}

FileSource::FileSource(const InputFile& f, uint64_t begin, uint64_t end, std::string where)
    : ByteSource(f.fn, std::move(where)), f_(f), cur_(begin), end_(end) {}

size_t FileSource::read_raw(void* dst, size_t n) {
  const size_t k = static_cast<size_t>(std::min<uint64_t>(n, end_ - cur_));
  if (k == 0) return 0;
  pread_exact(f_, dst, k, cur_, "data");
  cur_ += k;
  return k;
}

struct InflateSource::State {
  const InputFile& f;
  uint64_t cur, end;
  Mode mode;
  std::optional<uint64_t> expected;
  z_stream zs{};
  bool init = false, done = false;
  std::vector<unsigned char> in;
  uint64_t produced = 0;
  State(const InputFile& file, uint64_t b, uint64_t e, Mode m, std::optional<uint64_t> exp)
      : f(file), cur(b), end(e), mode(m), expected(exp) {}
};

InflateSource::InflateSource(const InputFile& f, uint64_t begin, uint64_t end, Mode mode,
                             std::optional<uint64_t> expected_size, std::string where)
    : ByteSource(f.fn, std::move(where)), st_(std::make_unique<State>(f, begin, end, mode, expected_size)) {
  const int rc = inflateInit2(&st_->zs, mode == Mode::Gzip ? 16 + MAX_WBITS : -MAX_WBITS);
  OXM_CHECK(rc == Z_OK, OutOfMemory, f.fn, ": ", f.path, ": zlib inflateInit2 failed (", rc, ")");
  st_->init = true;
  st_->in.resize(kChunk);
}

InflateSource::~InflateSource() {
  if (st_ && st_->init) inflateEnd(&st_->zs);
}

size_t InflateSource::read_raw(void* dst, size_t n) {
  State& s = *st_;
  if (s.done || n == 0) return 0;
  const char* kind = s.mode == Mode::Gzip ? "gzip" : "deflate";
  s.zs.next_out = static_cast<Bytef*>(dst);
  const size_t want = std::min<size_t>(n, size_t{1} << 30);  // uInt counts; read() callers loop
  s.zs.avail_out = static_cast<uInt>(want);
  while (s.zs.avail_out > 0) {
    if (s.zs.avail_in == 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(kChunk, s.end - s.cur));
      if (k > 0) {
        pread_exact(s.f, s.in.data(), k, s.cur, detail::concat(kind, " data"));
        s.cur += k;
      }
      s.zs.next_in = s.in.data();
      s.zs.avail_in = static_cast<uInt>(k);
    }
    const uInt before_out = s.zs.avail_out;
    const uInt before_in = s.zs.avail_in;
    const int rc = inflate(&s.zs, Z_NO_FLUSH);
    s.produced += before_out - s.zs.avail_out;
    if (rc == Z_STREAM_END) {
      s.done = true;
      const uint64_t trailing = s.zs.avail_in + (s.end - s.cur);
      OXM_CHECK(trailing == 0, Io, prefix(), "the ", kind, " stream ends at compressed byte offset ",
                s.cur - s.zs.avail_in, " but ", trailing, " more bytes follow (",
                s.mode == Mode::Gzip ? "a second gzip member or trailing garbage; oxmera reads one member"
                                     : "the member's compressed size is wrong",
                ")");
      break;
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR)
      OXM_FAIL(Io, prefix(), "corrupted ", kind, " data near compressed byte offset ", s.cur - s.zs.avail_in, ": ",
               s.zs.msg ? s.zs.msg : "invalid stream");
    OXM_CHECK(rc != Z_MEM_ERROR, OutOfMemory, prefix(), "zlib ran out of memory");
    if (before_in == 0 && s.zs.avail_out == before_out && s.cur == s.end)
      OXM_FAIL(Io, prefix(), "the ", kind, " stream is truncated: the file ends (byte offset ", s.end,
               ") before the end of the compressed data, after ", s.produced, " decompressed bytes");
    if (s.expected)
      OXM_CHECK(s.produced <= *s.expected, Io, prefix(), "the member decompresses to more than the ", *s.expected,
                " bytes the archive says (corrupted or lying size)");
  }
  if (s.done && s.expected)
    OXM_CHECK(s.produced == *s.expected, Io, prefix(), "the member decompresses to ", s.produced,
              " bytes, the archive says ", *s.expected, " (corrupted or lying size)");
  return want - s.zs.avail_out;
}

std::unique_ptr<ByteSource> verified_data(std::unique_ptr<ByteSource> src, const SourceFactory& reopen, uint64_t need,
                                          const std::string& what) {
  if (auto rem = src->remaining()) {
    OXM_CHECK(*rem >= need, Io, src->prefix(), what, " needs ", need, " bytes after ", at(*src), " but only ", *rem,
              " are there (the file is truncated or its sizes lie)");
    OXM_CHECK(*rem == need, Io, src->prefix(), what, " needs ", need, " bytes after ", at(*src), " but ", *rem,
              " are there (", *rem - need, " trailing bytes belong to nothing)");
    return src;
  }
  const uint64_t header = src->position();
  std::vector<char> scratch(kChunk);
  uint64_t seen = 0;
  for (;;) {
    const size_t got = src->read(scratch.data(), scratch.size());
    if (got == 0) break;
    seen += got;
    OXM_CHECK(seen <= need, Io, src->prefix(), "the decompressed data is longer than the ", need, " bytes ", what,
              " needs (the sizes in the header do not match)");
  }
  OXM_CHECK(seen == need, Io, src->prefix(), what, " needs ", need, " bytes after decompressed byte offset ", header,
            " but the stream holds only ", seen, " (the file is truncated or its sizes lie)");
  auto again = reopen();
  uint64_t skip = header;
  while (skip > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(skip, scratch.size()));
    read_exact(*again, scratch.data(), k, "the header");
    skip -= k;
  }
  return again;
}

// ------------------------------------------------------------------------------------------------ sinks
namespace {
// An injected failure of the next file operation (core/fault_injection.hpp): sets errno and returns true.
bool injected_fault() noexcept {
  const int err = fault_detail::file_fault_due();
  if (err == 0) return false;
  errno = err;
  return true;
}

std::string temp_path_for(const std::filesystem::path& target) {
  static std::atomic<uint64_t> counter{0};
  const auto now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t salt = now ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
  char buf[40];
  std::snprintf(buf, sizeof buf, ".tmp.%d.%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(salt));
  std::string name = ".";
  name += target.filename().string();
  name += buf;
  return (target.parent_path() / name).string();
}
}  // namespace

AtomicFile::AtomicFile(const std::string& path, const char* fn) : path_(path), fn_(fn) {
  OXM_CHECK(!path.empty(), InvalidArgument, fn, ": empty path");
  tmp_ = temp_path_for(std::filesystem::path(path));
  fd_ = Fd(injected_fault() ? -1 : ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  OXM_CHECK(fd_.get() >= 0, Io, fn, ": ", path, ": cannot create the temporary file ", tmp_, ": ", sys_error(errno));
}

AtomicFile::~AtomicFile() {
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* src, size_t n) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = injected_fault() ? -1 : ::write(fd_.get(), p, std::min<size_t>(n, size_t{1} << 30));
    if (put < 0) {
      if (errno == EINTR) continue;
      OXM_FAIL(Io, fn_, ": ", path_, ": write failed: ", sys_error(errno));
    }
    p += put;
    n -= static_cast<size_t>(put);
    size_ += static_cast<uint64_t>(put);
  }
}

void AtomicFile::patch(uint64_t offset, const void* p, size_t n) {
  const ssize_t put = injected_fault() ? -1 : ::pwrite(fd_.get(), p, n, static_cast<off_t>(offset));
  OXM_CHECK(put >= 0, Io, fn_, ": ", path_, ": write failed: ", sys_error(errno));
  OXM_CHECK(put == static_cast<ssize_t>(n), Io, fn_, ": ", path_, ": short write (", put, " of ", n,
            " bytes at byte offset ", offset, "); the disk may be full");
}

void AtomicFile::commit() {
  OXM_CHECK(!injected_fault() && ::fsync(fd_.get()) == 0, Io, fn_, ": ", path_, ": fsync failed: ", sys_error(errno));
  {
    // The descriptor is closed whatever happens (an injected failure must not leak it either).
    const int close_fault = fault_detail::file_fault_due();
    const int rc = ::close(fd_.release());
    if (close_fault) errno = close_fault;
    OXM_CHECK(rc == 0 && !close_fault, Io, fn_, ": ", path_, ": close failed: ", sys_error(errno));
  }
  OXM_CHECK(!injected_fault() && ::rename(tmp_.c_str(), path_.c_str()) == 0, Io, fn_, ": cannot rename ", tmp_, " to ",
            path_, ": ", sys_error(errno));
  committed_ = true;
  // Make the rename durable (the data is already in place; a failure here is still reported).
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  Fd dfd(injected_fault() ? -1 : ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  OXM_CHECK(dfd.get() >= 0, Io, fn_, ": ", path_, ": cannot open the directory to fsync it: ", sys_error(errno));
  OXM_CHECK((!injected_fault() && ::fsync(dfd.get()) == 0) || errno == EINVAL, Io, fn_, ": ", path_,
            ": fsync of the directory failed: ", sys_error(errno));
}

struct DeflateSink::State {
  AtomicFile& out;
  z_stream zs{};
  bool init = false;
  std::vector<unsigned char> buf;
  explicit State(AtomicFile& o) : out(o) {}
  void pump(int flush) {
    for (;;) {
      zs.next_out = buf.data();
      zs.avail_out = static_cast<uInt>(buf.size());
      const int rc = deflate(&zs, flush);
      OXM_CHECK(rc != Z_STREAM_ERROR, Io, "deflate: zlib stream error");
      out.write(buf.data(), buf.size() - zs.avail_out);
      if (flush == Z_FINISH ? rc == Z_STREAM_END : (zs.avail_out != 0 && zs.avail_in == 0)) return;
    }
  }
};

DeflateSink::DeflateSink(AtomicFile& out, Mode mode) : st_(std::make_unique<State>(out)) {
  const int rc = deflateInit2(&st_->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED,
                              mode == Mode::Gzip ? 16 + MAX_WBITS : -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  OXM_CHECK(rc == Z_OK, OutOfMemory, "deflate: zlib deflateInit2 failed (", rc, ")");
  st_->init = true;
  st_->buf.resize(kChunk);
}

DeflateSink::~DeflateSink() {
  if (st_ && st_->init) deflateEnd(&st_->zs);
}

void DeflateSink::write(const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  while (n > 0) {
    const size_t k = std::min<size_t>(n, size_t{1} << 30);
    st_->zs.next_in = const_cast<Bytef*>(c);
    st_->zs.avail_in = static_cast<uInt>(k);
    st_->pump(Z_NO_FLUSH);
    c += k;
    n -= k;
  }
}

void DeflateSink::finish() {
  st_->zs.next_in = nullptr;
  st_->zs.avail_in = 0;
  st_->pump(Z_FINISH);
}

uint32_t crc32_update(uint32_t crc, const void* p, size_t n) {
  const auto* c = static_cast<const Bytef*>(p);
  while (n > 0) {
    const auto k = static_cast<uInt>(std::min<size_t>(n, size_t{1} << 30));
    crc = static_cast<uint32_t>(::crc32(crc, c, k));
    c += k;
    n -= k;
  }
  return crc;
}

Tensor host_contiguous(const Tensor& t) {
  NoGradGuard no_grad;
  return t.detach().to(Device::cpu()).contiguous();
}

void* raw_data(const Tensor& t) {
  switch (t.dtype()) {
    case DType::F32:
      return t.data_ptr<float>();
    case DType::F64:
      return t.data_ptr<double>();
    case DType::I64:
      return t.data_ptr<int64_t>();
    case DType::U8:
      return t.data_ptr<uint8_t>();
  }
  return nullptr;
}

int64_t file_numel(const Shape& shape, size_t file_itemsize, size_t mem_itemsize, const std::string& prefix) {
  try {
    const int64_t n = checked_numel(shape, "file_numel", file_itemsize);
    (void)checked_numel(shape, "file_numel", mem_itemsize);
    return n;
  } catch (const Error&) {
    OXM_FAIL(Io, prefix, "the sizes ", shape.str(),
             " hold more bytes than int64 can count (a corrupted or lying header)");
  }
}

}  // namespace oxmera::io_detail
