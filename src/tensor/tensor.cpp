// Tensor handles, metadata, element access and printing. What needs a backend or the complete autograd node
// (allocating and freeing storage; creating and destroying a TensorImpl, whose grad_fn is a Ref<Node>) is
// defined in the ops layer (src/ops/storage.cpp).
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "tensor/tensor_impl.hpp"

namespace oxmera {
namespace detail {

void retain(TensorImpl* p) noexcept { p->refcount.fetch_add(1, std::memory_order_relaxed); }
void release(TensorImpl* p) noexcept {
  if (p->refcount.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(p);
}

void TensorImpl::refresh_contiguous() {
  int64_t expected = 1;
  contiguous = true;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) {
      contiguous = false;
      return;
    }
    expected *= shape[i];
  }
}

Tensor make_empty(const Shape& shape, DType dtype, Device device, const char* op) {
  int64_t n = checked_numel(shape, op, itemsize(dtype));
  TensorImpl* t = new_impl();
  Tensor out(t);
  t->storage = allocate_storage(static_cast<size_t>(n) * itemsize(dtype), device);
  t->shape = shape;
  t->strides = contiguous_strides(shape);
  t->numel = n;
  t->dtype = dtype;
  return out;
}

Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  const TensorImpl& b = *base.impl();
  TensorImpl* t = new_impl();
  Tensor out(t);
  t->storage = b.storage;
  t->numel = shape.product();
  t->shape = std::move(shape);
  t->strides = std::move(strides);
  t->offset = offset;
  t->dtype = b.dtype;
  t->refresh_contiguous();
  return out;
}

void check_defined(const Tensor& t, const char* op, const char* arg) {
  OXM_CHECK(t.defined(), InvalidArgument, op, ": ", arg, " is an undefined tensor (default-constructed)");
}

}  // namespace detail

using detail::impl_of;

#define OXM_IMPL(op) (detail::check_defined(*this, op), impl_of(*this))

const Shape& Tensor::shape() const { return OXM_IMPL("shape").shape; }
const Strides& Tensor::strides() const { return OXM_IMPL("strides").strides; }
int64_t Tensor::dim() const { return static_cast<int64_t>(OXM_IMPL("dim").shape.size()); }
int64_t Tensor::numel() const { return OXM_IMPL("numel").numel; }
int64_t Tensor::size(int64_t d) const {
  auto& t = OXM_IMPL("size");
  return t.shape[normalize_dim(d, static_cast<int64_t>(t.shape.size()), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  auto& t = OXM_IMPL("stride");
  return t.strides[normalize_dim(d, static_cast<int64_t>(t.shape.size()), "stride")];
}
int64_t Tensor::storage_offset() const { return OXM_IMPL("storage_offset").offset; }
DType Tensor::dtype() const { return OXM_IMPL("dtype").dtype; }
Device Tensor::device() const { return OXM_IMPL("device").device(); }
bool Tensor::is_contiguous() const { return OXM_IMPL("is_contiguous").contiguous; }
bool Tensor::shares_storage(const Tensor& o) const {
  return defined() && o.defined() && impl_->storage == o.impl_->storage;
}

template <class T>
T* Tensor::data_ptr() const {
  auto& t = OXM_IMPL("data_ptr");
  OXM_CHECK(t.dtype == dtype_of_v<T>, DTypeMismatch, "data_ptr: tensor has dtype ", t.dtype,
            " but the pointer type is ", dtype_of_v<T>);
  OXM_CHECK(t.device().is_cpu(), DeviceMismatch, "data_ptr: tensor is on ", t.device(),
            "; move it with .to(Device::cpu()) first");
  return t.ptr<T>();
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  auto& t0 = OXM_IMPL("to_vector");
  OXM_CHECK(t0.dtype == dtype_of_v<T>, DTypeMismatch, "to_vector: tensor has dtype ", t0.dtype,
            " but the element type asked for is ", dtype_of_v<T>, "; cast with .to(DType) first");
  Tensor c = to(Device::cpu()).contiguous();
  const T* p = c.impl()->ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

template <class T>
T Tensor::item() const {
  auto& t = OXM_IMPL("item");
  OXM_CHECK(t.numel == 1, ShapeMismatch, "item: needs a one-element tensor, got shape ", t.shape);
  return to_vector<T>()[0];
}

#define OXM_INSTANTIATE(T)                              \
  template T* Tensor::data_ptr<T>() const;              \
  template std::vector<T> Tensor::to_vector<T>() const; \
  template T Tensor::item<T>() const;
OXM_INSTANTIATE(float)
OXM_INSTANTIATE(double)
OXM_INSTANTIATE(int64_t)
OXM_INSTANTIATE(uint8_t)
#undef OXM_INSTANTIATE

// ---------------------------------------------------------------- printing
namespace {
constexpr int64_t kPrintEdge = 6;  // per dim, the head and tail shown when it has more than twice this

// `v` holds the shown elements (a dim longer than 2 * kPrintEdge cut to its head and tail) of a tensor of
// shape `full`, row-major in the shown shape.
template <class T>
void print_values(std::ostream& os, const std::vector<T>& v, const Shape& shown, const Shape& full) {
  auto strides = contiguous_strides(shown);
  auto rec = [&](auto&& self, size_t d, int64_t base, int indent) -> void {
    if (d == shown.size()) {
      if constexpr (std::is_same_v<T, uint8_t>)
        os << static_cast<int>(v[base]);
      else
        os << v[base];
      return;
    }
    const std::string sep = d + 1 == shown.size() ? ", " : ",\n" + std::string(indent + 1, ' ');
    os << '[';
    const int64_t n = shown[d];
    for (int64_t i = 0; i < n; ++i) {
      if (full[d] > 2 * kPrintEdge && i == kPrintEdge) os << "..." << sep;
      self(self, d + 1, base + i * strides[d], indent + 1);
      if (i + 1 < n) os << sep;
    }
    os << ']';
  };
  rec(rec, 0, 0, 0);
}
}  // namespace

std::string Tensor::str() const {
  std::ostringstream os;
  if (!defined()) return "Tensor(undefined)";
  os << "Tensor(";
  // Only the shown elements are gathered and copied: a stride-0 expansion to [2^20, 2^20] prints its 144
  // corners without materialising 4 TiB.
  Tensor shown = detach();
  for (int64_t d = 0; d < dim(); ++d) {
    const int64_t n = shape()[static_cast<size_t>(d)];
    if (n > 2 * kPrintEdge)
      shown = cat({shown.narrow(d, 0, kPrintEdge), shown.narrow(d, n - kPrintEdge, kPrintEdge)}, d);
  }
  Tensor c = shown.to(Device::cpu()).contiguous();
  os << std::setprecision(6);
  switch (dtype()) {
    case DType::F32:
      print_values(os, c.to_vector<float>(), c.shape(), shape());
      break;
    case DType::F64:
      print_values(os, c.to_vector<double>(), c.shape(), shape());
      break;
    case DType::I64:
      print_values(os, c.to_vector<int64_t>(), c.shape(), shape());
      break;
    case DType::U8:
      print_values(os, c.to_vector<uint8_t>(), c.shape(), shape());
      break;
  }
  os << ", shape=" << shape() << ", dtype=" << dtype();
  if (!device().is_cpu()) os << ", device=" << device();
  if (requires_grad()) os << ", requires_grad";
  os << ')';
  return os.str();
}
std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace oxmera
