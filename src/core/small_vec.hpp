#pragma once
// A minimal small-buffer vector for hot-path objects (autograd edges, gradient buffers).
#include <cstddef>
#include <utility>
#include <vector>

namespace oxmera::detail {

template <class T, size_t N>
class SmallVec {
 public:
  SmallVec() = default;
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](size_t i) noexcept { return i < N ? inline_[i] : overflow_[i - N]; }
  const T& operator[](size_t i) const noexcept { return i < N ? inline_[i] : overflow_[i - N]; }
  void push_back(T v) {
    if (size_ < N)
      inline_[size_] = std::move(v);
    else
      overflow_.push_back(std::move(v));
    ++size_;
  }
  void resize(size_t n) {
    if (n > N) overflow_.resize(n - N);
    size_ = n;
  }
  void clear() {
    for (size_t i = 0; i < N && i < size_; ++i) inline_[i] = T();
    overflow_.clear();
    size_ = 0;
  }

 private:
  T inline_[N]{};
  std::vector<T> overflow_;
  size_t size_ = 0;
};

}  // namespace oxmera::detail
