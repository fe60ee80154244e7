// The CPU backend: host memory through the caching allocator, kernels from the best ISA table.
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <thread>

#include "backend/backend.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/caching_allocator.hpp"
#include "backend/cpu/cpu_index.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/cpu_linear.hpp"
#include "backend/cpu/parallel.hpp"
#include "oxmera/version.hpp"

namespace oxmera::detail {

namespace {

std::atomic<int> g_threads{0};

const CpuKernels* pick_kernels() {
  __builtin_cpu_init();
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return isa_avx512::kernels();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return isa_avx2::kernels();
#endif
  return isa_base::kernels();
}

// The fused attention kernels take f32 / f64 operands of one dtype: 4-d views with a unit stride along the last dim
// (the mask too, broadcast or not; null: absent), and a contiguous lse.
bool attention_operands(DType d, std::initializer_list<const TensorImpl*> views,
                        std::initializer_list<const TensorImpl*> contiguous) {
  if (d != DType::F32 && d != DType::F64) return false;
  for (const TensorImpl* t : views)
    if (t && (t->dtype != d || t->shape.size() != 4 || (t->strides[3] != 1 && t->shape[3] != 1))) return false;
  for (const TensorImpl* t : contiguous)
    if (t && (t->dtype != d || !t->contiguous)) return false;
  return true;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : k_(pick_kernels()) {}
  DeviceKind kind() const override { return DeviceKind::CPU; }
  const char* name() const override { return k_->isa; }
  void* allocate(size_t nbytes) override { return host_allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) noexcept override { host_deallocate(p, nbytes); }
  MemoryStats memory_stats() const override {
    AllocatorStats s = host_allocator_stats();
    return {s.allocated_bytes, s.reserved_bytes, s.peak_allocated_bytes, s.system_allocations, s.cache_hits};
  }
  void empty_cache() override { host_empty_cache(); }
  void copy_from_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_to_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void unary(ops::UnaryOp op, const TensorImpl& x, TensorImpl& out, const ops::OpParams& p) override {
    k_->unary(op, x, out, p);
  }
  void binary(ops::BinaryOp op, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) override {
    k_->binary(op, a, b, out);
  }
  void binary_scalar(ops::BinaryOp op, const TensorImpl& t, double s, bool left, TensorImpl& out) override {
    k_->binary_scalar(op, t, s, left, out);
  }
  void binary_grad(ops::BinaryOp op, int side, const TensorImpl& g, const TensorImpl& a, const TensorImpl& b,
                   TensorImpl& out) override {
    k_->binary_grad(op, side, g, a, b, out);
  }
  void unary_grad(ops::UnaryOp op, const TensorImpl& g, const TensorImpl& x, const TensorImpl& y, TensorImpl& out,
                  const ops::OpParams& p) override {
    k_->unary_grad(op, g, x, y, out, p);
  }
  void where(const TensorImpl& m, const TensorImpl& a, const TensorImpl& b, TensorImpl& out) override {
    k_->where(m, a, b, out);
  }
  void copy(const TensorImpl& src, TensorImpl& dst) override { k_->copy(src, dst); }
  void fill(TensorImpl& dst, double v) override { k_->fill(dst, v); }
  void reduce(ops::ReduceOp op, const TensorImpl& x, TensorImpl& out, uint64_t mask) override {
    k_->reduce(op, x, out, mask);
  }
  bool arg_reduce(ops::ArgReduceOp op, const TensorImpl& x, TensorImpl& out, int64_t dim) override {
    return k_->arg_reduce(op, x, out, dim);
  }
  void softmax(const TensorImpl& x, TensorImpl& out, int64_t dim, bool log) override { k_->softmax(x, out, dim, log); }
  void matmul(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) override { k_->matmul(a, b, out); }
  void index_select(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) override {
    cpu_index_select(x, dim, idx, out);
  }
  void index_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) override {
    cpu_index_add(out, dim, idx, src);
  }
  void gather(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) override {
    cpu_gather(x, dim, idx, out);
  }
  void scatter_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) override {
    cpu_scatter_add(out, dim, idx, src);
  }
  // Fused ops: cross entropy, the optimizer steps, im2col / col2im, layer norm, the LSTM and GRU cells, attention,
  // linear, max pooling and the tensor-list norm / scale (contiguous tensors) in f32 and f64; no small linalg (linalg's
  // host path is the CPU's own).
  bool supports(const ops::FusedCall& call) const override {
    auto real = [](DType d) { return d == DType::F32 || d == DType::F64; };
    switch (ops::fused_op(call)) {
      case ops::FusedOp::CrossEntropy:
        return real(std::get<ops::CrossEntropyCall>(call).x->dtype);
      case ops::FusedOp::CrossEntropyBackward:
        return real(std::get<ops::CrossEntropyBackwardCall>(call).x->dtype);
      case ops::FusedOp::LayerNorm: {
        const auto& c = std::get<ops::LayerNormCall>(call);
        return real(c.x->dtype) && c.n >= 1;
      }
      case ops::FusedOp::LayerNormBackward: {
        const auto& c = std::get<ops::LayerNormBackwardCall>(call);
        return real(c.x->dtype) && c.n >= 1;
      }
      case ops::FusedOp::SoftmaxBackward: {
        const auto& c = std::get<ops::SoftmaxBackwardCall>(call);
        const int64_t last = static_cast<int64_t>(c.y->shape.size()) - 1;
        return real(c.y->dtype) && c.y->contiguous && c.g->contiguous && c.grad_x->contiguous &&
               (c.dim == last || c.y->shape.empty());
      }
      case ops::FusedOp::Im2col:
        return real(std::get<ops::Im2colCall>(call).x->dtype);
      case ops::FusedOp::LstmCell: {
        const auto& c = std::get<ops::LstmCellCall>(call);
        return real(c.gates->dtype) && c.gates->contiguous && c.c_prev->contiguous &&
               (!c.gates_add || c.gates_add->contiguous);
      }
      case ops::FusedOp::LstmCellBackward: {
        const auto& c = std::get<ops::LstmCellBackwardCall>(call);
        return real(c.acts->dtype) && (!c.gh || c.gh->contiguous) && (!c.gc || c.gc->contiguous);
      }
      case ops::FusedOp::Attention: {
        const auto& c = std::get<ops::AttentionCall>(call);
        return attention_operands(c.q->dtype, {c.q, c.k, c.v, c.out, c.mask}, {c.lse, c.probs});
      }
      case ops::FusedOp::AttentionBackward: {
        const auto& c = std::get<ops::AttentionBackwardCall>(call);
        return attention_operands(c.q->dtype, {c.q, c.k, c.v, c.g, c.grad_q, c.grad_k, c.grad_v, c.mask}, {c.probs});
      }
      case ops::FusedOp::Linear: {
        const auto& c = std::get<ops::LinearCall>(call);
        return real(c.out->dtype) && (!c.gelu_grad || (c.gelu_grad->dtype == c.out->dtype && c.gelu_grad->contiguous &&
                                                       c.out->contiguous && !c.accumulate));
      }
      case ops::FusedOp::GruCell:
        return real(std::get<ops::GruCellCall>(call).gi->dtype);
      case ops::FusedOp::GruCellBackward:
        return real(std::get<ops::GruCellBackwardCall>(call).acts->dtype);
      case ops::FusedOp::RnnCell:
        return real(std::get<ops::RnnCellCall>(call).xt->dtype);
      case ops::FusedOp::Col2im:
        return real(std::get<ops::Col2imCall>(call).cols->dtype);
      case ops::FusedOp::MaxPool2d:
        return real(std::get<ops::MaxPool2dCall>(call).x->dtype);
      case ops::FusedOp::MaxPool2dBackward: {
        const auto& c = std::get<ops::MaxPool2dBackwardCall>(call);
        return real(c.grad_x->dtype) && c.g->contiguous && c.indices->contiguous && c.grad_x->contiguous;
      }
      case ops::FusedOp::OptimizerSteps: {
        const auto& c = std::get<ops::OptimizerStepsCall>(call);
        for (size_t i = 0; i < c.count; ++i)
          if (!real(c.updates[i].param->dtype)) return false;
        return true;
      }
      case ops::FusedOp::TensorListNorm: {
        const auto& c = std::get<ops::TensorListNormCall>(call);
        if (!real(c.out->dtype) || !(c.norm_type > 0)) return false;
        for (size_t i = 0; i < c.count; ++i)
          if (!real(c.tensors[i]->dtype) || !c.tensors[i]->contiguous) return false;
        return true;
      }
      case ops::FusedOp::TensorListScale: {
        const auto& c = std::get<ops::TensorListScaleCall>(call);
        for (size_t i = 0; i < c.count; ++i)
          if (!real(c.tensors[i]->dtype) || !c.tensors[i]->contiguous) return false;
        return true;
      }
      default:
        return false;
    }
  }
  void run(ops::FusedCall& call) override {
    switch (ops::fused_op(call)) {
      case ops::FusedOp::CrossEntropy: {
        auto& c = std::get<ops::CrossEntropyCall>(call);
        return k_->cross_entropy(*c.x, *c.target, c.label_smoothing, c.scale, *c.loss, *c.lse);
      }
      case ops::FusedOp::CrossEntropyBackward: {
        auto& c = std::get<ops::CrossEntropyBackwardCall>(call);
        return k_->cross_entropy_backward(*c.x, *c.target, *c.lse, *c.g, c.label_smoothing, c.scale, *c.grad_x);
      }
      case ops::FusedOp::LayerNorm: {
        auto& c = std::get<ops::LayerNormCall>(call);
        return k_->layer_norm(*c.x, c.weight, c.bias, c.eps, c.n, *c.y, *c.mean, *c.rstd);
      }
      case ops::FusedOp::LayerNormBackward: {
        auto& c = std::get<ops::LayerNormBackwardCall>(call);
        return k_->layer_norm_backward(*c.x, *c.g, c.weight, *c.mean, *c.rstd, c.n, *c.grad_x, c.grad_weight,
                                       c.grad_bias);
      }
      case ops::FusedOp::SoftmaxBackward: {
        auto& c = std::get<ops::SoftmaxBackwardCall>(call);
        return k_->softmax_backward(*c.y, *c.g, *c.grad_x, c.y->shape.empty() ? 1 : c.y->shape.back(), c.log);
      }
      case ops::FusedOp::LstmCell:
        return k_->lstm_cell(std::get<ops::LstmCellCall>(call));
      case ops::FusedOp::LstmCellBackward:
        return k_->lstm_cell_backward(std::get<ops::LstmCellBackwardCall>(call));
      case ops::FusedOp::Attention:
        return k_->attention(std::get<ops::AttentionCall>(call));
      case ops::FusedOp::AttentionBackward:
        return k_->attention_backward(std::get<ops::AttentionBackwardCall>(call));
      case ops::FusedOp::Linear: {
        const auto& c = std::get<ops::LinearCall>(call);
        if (!c.gelu_grad) return cpu_linear(c);
        ops::LinearCall pre = c;  // the product into gelu_grad, then the GELU pass from it
        pre.out = c.gelu_grad;
        pre.gelu_grad = nullptr;
        cpu_linear(pre);
        return k_->gelu_with_grad(*c.gelu_grad, *c.out);
      }
      case ops::FusedOp::GruCell:
        return k_->gru_cell(std::get<ops::GruCellCall>(call));
      case ops::FusedOp::GruCellBackward:
        return k_->gru_cell_backward(std::get<ops::GruCellBackwardCall>(call));
      case ops::FusedOp::RnnCell:
        return k_->rnn_cell(std::get<ops::RnnCellCall>(call));
      case ops::FusedOp::Im2col: {
        auto& c = std::get<ops::Im2colCall>(call);
        return cpu_im2col(*c.x, *c.cols, c.geometry, c.pad_value, c.ones_row);
      }
      case ops::FusedOp::Col2im: {
        auto& c = std::get<ops::Col2imCall>(call);
        return cpu_col2im(*c.cols, *c.x_grad, c.geometry, c.ones_row, c.zero_first);
      }
      case ops::FusedOp::MaxPool2d:
        return k_->max_pool2d(std::get<ops::MaxPool2dCall>(call));
      case ops::FusedOp::MaxPool2dBackward:
        return k_->max_pool2d_backward(std::get<ops::MaxPool2dBackwardCall>(call));
      case ops::FusedOp::OptimizerSteps: {
        auto& c = std::get<ops::OptimizerStepsCall>(call);
        for (size_t i = 0; i < c.count; ++i) {
          const OptimizerUpdate& u = c.updates[i];
          if (u.step_count) {  // a captured Adam step: the count lives in memory (host memory here)
            OptimizerStep s = u.step;
            s.step = *u.step_count->ptr<int64_t>();
            k_->optimizer_step(s, *u.param, *u.grad, u.state[0], u.state[1], u.state[2]);
            continue;
          }
          k_->optimizer_step(u.step, *u.param, *u.grad, u.state[0], u.state[1], u.state[2]);
        }
        return;
      }
      case ops::FusedOp::TensorListNorm:
        return k_->tensor_list_norm(std::get<ops::TensorListNormCall>(call));
      case ops::FusedOp::TensorListScale:
        return k_->tensor_list_scale(std::get<ops::TensorListScaleCall>(call));
      default:
        return Backend::run(call);
    }
  }

 private:
  const CpuKernels* k_;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend* be = new CpuBackend();  // never destroyed: storages may outlive static destruction
  return *be;
}

namespace {
constinit thread_local int t_threads = 0;
}  // namespace

int cpu_threads() noexcept { return t_threads > 0 ? t_threads : process_cpu_threads(); }

void set_thread_cpu_threads(int n) noexcept { t_threads = n > 0 ? n : 0; }

int process_cpu_threads() noexcept {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  int hw = static_cast<int>(std::thread::hardware_concurrency());
#ifdef _OPENMP
  hw = omp_get_max_threads();  // honours OMP_NUM_THREADS
#endif
  n = hw > 0 ? hw : 1;
  g_threads.store(n, std::memory_order_relaxed);
  return n;
}

bool blas_reentrant() {
  // The OpenMP build of OpenBLAS (preferred) and the builtin kernel are safe to call from our threads.
  static const bool ok = std::strstr(oxmera::blas_name(), "pthread") == nullptr;
  return ok;
}

}  // namespace oxmera::detail

namespace oxmera {
void set_num_threads(int n) {
  OXM_CHECK(n >= 1, InvalidArgument, "set_num_threads: need at least 1 thread, got ", n);
  detail::g_threads.store(n, std::memory_order_relaxed);
  detail::blas_set_threads(n);
}
int get_num_threads() { return detail::cpu_threads(); }
const char* cpu_kernel_isa() { return detail::cpu_backend().name(); }
}  // namespace oxmera
