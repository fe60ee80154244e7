#pragma once
// Byte sources and sinks shared by the file formats of include/oxmera/formats.hpp: bounded reads of a file
// range, streaming inflate (gzip or raw deflate) in fixed-size chunks, atomic output files (also what
// save_safetensors writes through) and deflate sinks. Internal to src/io.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oxmera/error.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::io_detail {

inline constexpr size_t kChunk = size_t{1} << 16;  // read / inflate / convert buffer

std::string sys_error(int err);  // strerror as a string

class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() noexcept;
  int get() const noexcept { return fd_; }
  int release() noexcept {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

// A regular file opened for reading, or bytes in memory (the *_from_bytes loaders: `bytes` is set, no fd); `fn`
// names the public function in messages, `path` the file or the buffer.
struct InputFile {
  Fd fd;
  uint64_t size = 0;
  std::string path;
  const char* fn = "";
  const unsigned char* bytes = nullptr;  // memory input: [bytes, bytes + size), owned by the caller
};
InputFile open_input(const std::string& path, const char* fn);
// `size` bytes at `data` (the caller keeps them alive while the InputFile is used); named `name` in messages, or
// "a buffer of <size> bytes" when `name` is empty.
InputFile memory_input(const void* data, size_t size, const std::string& name, const char* fn);
// Exactly n bytes at offset, or an Io error saying what was being read.
void pread_exact(const InputFile& f, void* dst, size_t n, uint64_t offset, const std::string& what);

// A stream of bytes; read() returns 0 only at the end. When an expected CRC-32 / length is set, reaching the end
// checks them (an Io error naming `where`).
class ByteSource {
 public:
  ByteSource(std::string fn, std::string where) : fn_(std::move(fn)), where_(std::move(where)) {}
  virtual ~ByteSource() = default;
  size_t read(void* dst, size_t n);
  uint64_t position() const noexcept { return pos_; }
  // Bytes left when the source knows it (a file range); nullopt for a compressed stream.
  virtual std::optional<uint64_t> remaining() const = 0;
  void expect_crc(uint32_t crc) { crc_expected_ = crc; }
  const std::string& fn() const noexcept { return fn_; }
  const std::string& where() const noexcept { return where_; }
  // "<fn>: <where>: "
  std::string prefix() const { return fn_ + ": " + where_ + ": "; }

 protected:
  virtual size_t read_raw(void* dst, size_t n) = 0;
  // What an offset counts ("byte offset" for a plain file, "decompressed byte offset" for a stream).
  virtual const char* offset_kind() const noexcept { return "byte offset"; }

 private:
  std::string fn_, where_;
  uint64_t pos_ = 0;
  uint32_t crc_ = 0;
  std::optional<uint32_t> crc_expected_;
  bool ended_ = false;

  friend void read_exact(ByteSource&, void*, size_t, const std::string&);
  friend std::string at(const ByteSource&);
};
// "<offset kind> <position>" for messages.
std::string at(const ByteSource& s);
// Exactly n bytes or an Io error: "<fn>: <where>: the data ends at <offset> while reading <what> (n bytes)".
void read_exact(ByteSource& s, void* dst, size_t n, const std::string& what);
// Io error unless the source is at its end ("<what> is followed by more bytes").
void expect_end(ByteSource& s, const std::string& what);

// Bytes [begin, end) of a file.
class FileSource final : public ByteSource {
 public:
  FileSource(const InputFile& f, uint64_t begin, uint64_t end, std::string where);
  std::optional<uint64_t> remaining() const override { return end_ - cur_; }

 protected:
  size_t read_raw(void* dst, size_t n) override;

 private:
  const InputFile& f_;
  uint64_t cur_, end_;
};

// The decompressed bytes of a gzip stream (one member; zlib checks its CRC and length) or of a raw deflate
// stream (a zip member: exactly `expected_size` bytes, and the compressed range must end with the stream).
class InflateSource final : public ByteSource {
 public:
  enum class Mode { Gzip, RawDeflate };
  InflateSource(const InputFile& f, uint64_t begin, uint64_t end, Mode mode, std::optional<uint64_t> expected_size,
                std::string where);
  ~InflateSource() override;
  std::optional<uint64_t> remaining() const override { return std::nullopt; }

 protected:
  size_t read_raw(void* dst, size_t n) override;
  const char* offset_kind() const noexcept override { return "decompressed byte offset"; }

 private:
  struct State;
  std::unique_ptr<State> st_;
};

using SourceFactory = std::function<std::unique_ptr<ByteSource>()>;
// After a header of `header_bytes` was read from `src`, makes sure exactly `need` data bytes follow before the
// caller allocates for them: a file range is compared with its length; a compressed stream is decompressed and
// counted (in kChunk pieces, failing as soon as it passes `need`), then reopened and positioned after the header.
// Returns the source to read the data from.
std::unique_ptr<ByteSource> verified_data(std::unique_ptr<ByteSource> src, const SourceFactory& reopen, uint64_t need,
                                          const std::string& what);

// A file written to a temporary name in the target's directory, renamed over the target by commit(); removed
// when destroyed uncommitted.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, const char* fn);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* p, size_t n);
  void patch(uint64_t offset, const void* p, size_t n);  // overwrite bytes already written
  uint64_t size() const noexcept { return size_; }
  void commit();

 private:
  std::string path_, tmp_;
  const char* fn_;
  Fd fd_;
  uint64_t size_ = 0;
  bool committed_ = false;
};

// Deflates what is written into `out` (gzip wrapper or raw deflate); finish() flushes the end of the stream.
class DeflateSink {
 public:
  enum class Mode { Gzip, RawDeflate };
  DeflateSink(AtomicFile& out, Mode mode);
  ~DeflateSink();
  void write(const void* p, size_t n);
  void finish();

 private:
  struct State;
  std::unique_ptr<State> st_;
};

uint32_t crc32_update(uint32_t crc, const void* p, size_t n);

// A contiguous CPU copy of t (detached), for writing its bytes.
Tensor host_contiguous(const Tensor& t);
void* raw_data(const Tensor& t);

// Shape overflow as an Io error: numel of `shape` with elements of `file_itemsize` bytes in the file and
// `mem_itemsize` in memory, or "<prefix>the sizes <shape> hold more bytes than int64 can count".
int64_t file_numel(const Shape& shape, size_t file_itemsize, size_t mem_itemsize, const std::string& prefix);

}  // namespace oxmera::io_detail
