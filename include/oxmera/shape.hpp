#pragma once
// Small inline vector of dimension sizes / strides: no heap allocation up to kInline dims.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace oxmera {

class SmallDims {
 public:
  static constexpr int kInline = 6;
  using value_type = int64_t;

  SmallDims() noexcept = default;
  SmallDims(std::initializer_list<int64_t> v) { assign(v.begin(), v.size()); }
  SmallDims(const std::vector<int64_t>& v) { assign(v.data(), v.size()); }  // NOLINT: implicit by design
  SmallDims(const int64_t* p, size_t n) { assign(p, n); }
  explicit SmallDims(size_t n, int64_t fill = 0) {
    resize(n);
    std::fill(begin(), end(), fill);
  }
  SmallDims(const SmallDims& o) { assign(o.data(), o.size()); }
  SmallDims(SmallDims&& o) noexcept { steal(o); }
  SmallDims& operator=(const SmallDims& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  SmallDims& operator=(SmallDims&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~SmallDims() { release(); }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  int64_t* data() noexcept { return heap_ ? heap_ : inline_; }
  const int64_t* data() const noexcept { return heap_ ? heap_ : inline_; }
  int64_t& operator[](size_t i) noexcept { return data()[i]; }
  int64_t operator[](size_t i) const noexcept { return data()[i]; }
  int64_t* begin() noexcept { return data(); }
  int64_t* end() noexcept { return data() + size_; }
  const int64_t* begin() const noexcept { return data(); }
  const int64_t* end() const noexcept { return data() + size_; }
  int64_t back() const noexcept { return data()[size_ - 1]; }

  void resize(size_t n) {
    if (n > capacity()) grow(n);
    if (n > size_) std::fill(data() + size_, data() + n, 0);
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t v) {
    if (size_ == capacity()) grow(size_ * 2 + 1);
    data()[size_++] = v;
  }
  void insert(size_t pos, int64_t v) {
    push_back(0);
    int64_t* d = data();
    std::memmove(d + pos + 1, d + pos, (size_ - 1 - pos) * sizeof(int64_t));
    d[pos] = v;
  }
  void erase(size_t pos) {
    int64_t* d = data();
    std::memmove(d + pos, d + pos + 1, (size_ - 1 - pos) * sizeof(int64_t));
    --size_;
  }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

  bool operator==(const SmallDims& o) const noexcept {
    return size_ == o.size_ && std::equal(begin(), end(), o.begin());
  }
  bool operator!=(const SmallDims& o) const noexcept { return !(*this == o); }

  // Product of the entries; no overflow check (use checked_numel where the size matters).
  int64_t product() const noexcept {
    int64_t p = 1;
    for (int64_t v : *this) p *= v;
    return p;
  }
  std::string str() const;  // "[2, 3]"

 private:
  size_t capacity() const noexcept { return heap_ ? cap_ : kInline; }
  void assign(const int64_t* p, size_t n) {
    if (n > capacity()) grow(n);
    if (n) std::memmove(data(), p, n * sizeof(int64_t));
    size_ = static_cast<uint32_t>(n);
  }
  void grow(size_t n) {
    auto* h = new int64_t[n];
    if (size_) std::memcpy(h, data(), size_ * sizeof(int64_t));
    delete[] heap_;
    heap_ = h;
    cap_ = static_cast<uint32_t>(n);
  }
  void release() noexcept {
    delete[] heap_;
    heap_ = nullptr;
    size_ = 0;
  }
  void steal(SmallDims& o) noexcept {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      o.heap_ = nullptr;
    } else {
      std::memcpy(inline_, o.inline_, size_ * sizeof(int64_t));
    }
    o.size_ = 0;
  }

  int64_t inline_[kInline]{};  // zeroed: cheap, and keeps -Wmaybe-uninitialized quiet on copies
  int64_t* heap_ = nullptr;
  uint32_t size_ = 0;
  uint32_t cap_ = 0;
};

using Shape = SmallDims;
using Strides = SmallDims;
using Dims = SmallDims;  // lists of dimension indices (may be negative)

std::ostream& operator<<(std::ostream& os, const SmallDims& s);

// Number of elements, or an InvalidArgument error naming `op` for negative sizes and an overflow of
// int64 (also counting bytes of `itemsize`).
int64_t checked_numel(const Shape& shape, const char* op, size_t itemsize = 1);
// Row-major contiguous strides for `shape`.
Strides contiguous_strides(const Shape& shape);
// NumPy broadcast of two shapes; BroadcastIncompatible naming `op` otherwise.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Normalises a possibly negative dim for a tensor of rank `rank`; IndexOutOfBounds names the dim given.
int64_t normalize_dim(int64_t dim, int64_t rank, const char* op);

}  // namespace oxmera
