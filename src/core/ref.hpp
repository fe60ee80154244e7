#pragma once
// Intrusive reference counting for internal objects (storage, autograd nodes).
#include <atomic>
#include <cstdint>
#include <utility>

namespace oxmera::detail {

// T must have `std::atomic<int32_t> refcount` and a free function `destroy(T*)`.
template <class T>
class Ref {
 public:
  Ref() noexcept = default;
  Ref(std::nullptr_t) noexcept {}  // NOLINT
  // Adopts a pointer whose count already includes this reference.
  static Ref adopt(T* p) noexcept {
    Ref r;
    r.p_ = p;
    return r;
  }
  // Shares a raw pointer: increments the count.
  static Ref share(T* p) noexcept {
    if (p) p->refcount.fetch_add(1, std::memory_order_relaxed);
    return adopt(p);
  }
  Ref(const Ref& o) noexcept : p_(o.p_) {
    if (p_) p_->refcount.fetch_add(1, std::memory_order_relaxed);
  }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref& operator=(const Ref& o) noexcept {
    Ref(o).swap(*this);
    return *this;
  }
  Ref& operator=(Ref&& o) noexcept {
    Ref(std::move(o)).swap(*this);
    return *this;
  }
  ~Ref() { reset(); }
  void reset() noexcept {
    if (p_ && p_->refcount.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(p_);
    p_ = nullptr;
  }
  T* release() noexcept { return std::exchange(p_, nullptr); }
  void swap(Ref& o) noexcept { std::swap(p_, o.p_); }
  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  bool operator==(const Ref& o) const noexcept { return p_ == o.p_; }

 private:
  T* p_ = nullptr;
};

}  // namespace oxmera::detail
