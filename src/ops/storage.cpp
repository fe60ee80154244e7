// The tensor layer's definitions that dispatch to a backend or need the complete autograd node: allocating and
// freeing storage, the filled constructors, and creating and destroying a TensorImpl (its grad_fn is a
// Ref<Node>, and a retained gradient unregisters itself from the node). They are declared in
// tensor/tensor_impl.hpp and include/oxmera/tensor.hpp; defining them here keeps src/tensor free of
// backend/backend.hpp and autograd/node.hpp (the layering of cmake/oxmera_layers.cmake).
#include "autograd/node.hpp"
#include "backend/backend.hpp"
#include "ops/graph_capture.hpp"
#include "ops/ops_internal.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera {
namespace detail {

Ref<Storage> allocate_storage(size_t nbytes, Device device) {
  Backend& be = backend_for(device, "allocate");
  auto* s = new Storage();
  s->device = device;
  s->nbytes = nbytes;
  try {
    s->data = nbytes ? be.allocate(nbytes) : nullptr;
  } catch (...) {
    delete s;
    throw;
  }
  return Ref<Storage>::adopt(s);
}

Ref<Storage> allocate_pinned_storage(size_t nbytes, const char* op) {
  Backend* be = pinning_backend();
  if (be == nullptr) {
    std::string why;
    try {
      (void)backend_for(Device::cuda(), op);
      why = "the CUDA backend cannot pin host memory";
    } catch (const Error& e) {
      why = e.message();
    }
    OXM_FAIL(BackendUnavailable, op, ": no backend can allocate page-locked (pinned) host memory; pinning needs an ",
             "accelerator's driver (", why, ")");
  }
  auto* s = new Storage();
  s->device = Device::cpu();
  s->nbytes = nbytes;
  s->pinned_by = be->kind();
  try {
    s->data = nbytes ? be->allocate_pinned_host(nbytes) : nullptr;
  } catch (...) {
    delete s;
    throw;
  }
  return Ref<Storage>::adopt(s);
}

void destroy(Storage* s) noexcept {
  if (s->data && s->pinned_by != DeviceKind::CPU) {
    backend_for(Device(s->pinned_by, 0), "free").deallocate_pinned_host(s->data, s->nbytes);
  } else if (s->data) {
    // Backends outlive every tensor (they are never unregistered).
    backend_for(s->device, "free").deallocate(s->data, s->nbytes);
  }
  delete s;
}

TensorImpl* new_impl() { return new TensorImpl(); }

void destroy(TensorImpl* t) noexcept {
  if (t->retains_grad && t->grad_fn) {  // unregister from the node that would write its gradient
    auto& r = t->grad_fn->retained;
    for (size_t i = 0; i < r.size(); ++i)
      if (r[i].tensor == t) {
        r.erase(r.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  }
  delete t;
}

}  // namespace detail

Tensor full(const Shape& shape, double value, DType dtype) {
  ops::check_scalar_fits(value, dtype, "full");
  Tensor out = detail::make_empty(shape, dtype, Device::cpu(), "full");
  if (out.numel()) detail::cpu_backend().fill(*out.impl(), value);
  return out;
}
Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  if (device.is_cpu()) return full(shape, value, dtype);
  ops::check_scalar_fits(value, dtype, "full");
  Tensor out = detail::make_empty(shape, dtype, device, "full");
  if (out.numel()) detail::backend_for(device, "full").fill(*out.impl(), value);
  return out;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor eye(int64_t n, DType dtype, Device device) {
  if (device.is_cpu()) return eye(n, dtype);
  OXM_CHECK(n >= 0, InvalidArgument, "eye: n must be >= 0, got ", n);
  Tensor out = zeros({n, n}, dtype, device);
  if (n) out.diagonal(0, 0, 1).fill_(1.0);
  return out;
}
Tensor arange(int64_t n, DType dtype, Device device) {
  // Values that depend on n alone: one upload, or inside a CUDA graph capture a constant the graph keeps.
  return detail::constant_on_device(arange(n, dtype), device);
}
Tensor zeros_like(const Tensor& t) {
  detail::check_defined(t, "zeros_like");
  Tensor out = detail::make_empty(t.shape(), t.dtype(), t.device(), "zeros_like");
  if (out.numel()) detail::backend_for(t.device(), "zeros_like").fill(*out.impl(), 0.0);
  return out;
}
Tensor ones_like(const Tensor& t) {
  detail::check_defined(t, "ones_like");
  Tensor out = detail::make_empty(t.shape(), t.dtype(), t.device(), "ones_like");
  if (out.numel()) detail::backend_for(t.device(), "ones_like").fill(*out.impl(), 1.0);
  return out;
}

}  // namespace oxmera
