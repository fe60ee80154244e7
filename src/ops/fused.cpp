// The fused-op registry and its one dispatch point. Every fused op has a composite fallback written with
// ordinary tensor ops (so it runs on any backend's generic kernels, under NoGradGuard: the callers record the
// autograd nodes), which run_fused takes whenever the backend does not support a call. The fallbacks follow the
// contracts in fused.hpp exactly; they are slower than the kernels (more passes, and a host-built index for
// im2col) but give the same values to rounding, which tests/test_fused.cpp checks against each kernel.
#include "ops/fused.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/backend.hpp"
#include "backend/common/philox.hpp"
#include "backend/common/scan_math.hpp"
#include "backend/common/spd_math.hpp"
#include "ops/graph_capture.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::ops {
namespace {

using detail::OptimizerStep;
using detail::OptimizerUpdate;

// A Tensor handle sharing `p` (one more reference).
Tensor borrow(const TensorImpl* p) {
  auto* q = const_cast<TensorImpl*>(p);
  detail::retain(q);
  return Tensor(q);
}

// ---------------------------------------------------------------- cross entropy
// Rows whose target is -1 are ignored: `safe` reads class 0 there and `keep` (u8) is 0.
struct RowTargets {
  Tensor safe, keep;
};
RowTargets row_targets(const Tensor& target) {
  // 0-d CPU scalars: binary ops take them by value on any device.
  return {maximum(target, scalar(0, DType::I64)), target.ge(scalar(0, DType::I64)).to(DType::U8)};
}

void cross_entropy_fallback(FusedCall& call, Device) {
  auto& c = std::get<CrossEntropyCall>(call);
  NoGradGuard no_grad;
  const Tensor x = borrow(c.x);
  const int64_t C = x.size(1);
  const RowTargets t = row_targets(borrow(c.target));
  const Tensor lse = x.logsumexp(1);
  const Tensor logp = x - lse.unsqueeze(1);
  Tensor loss = logp.gather(1, t.safe.unsqueeze(1)).squeeze(1) * -(1.0 - c.label_smoothing);
  if (c.label_smoothing != 0) loss = loss - logp.sum({1}) * (c.label_smoothing / static_cast<double>(C));
  loss = loss * c.scale;
  borrow(c.loss).copy_(where(t.keep, loss, zeros_like(loss)));
  borrow(c.lse).copy_(lse);
}

void cross_entropy_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<CrossEntropyBackwardCall>(call);
  NoGradGuard no_grad;
  const Tensor x = borrow(c.x);
  const int64_t C = x.size(1);
  const RowTargets t = row_targets(borrow(c.target));
  const Tensor classes = arange(C, DType::I64, x.device()).unsqueeze(0);
  const Tensor on_target = classes.eq(t.safe.unsqueeze(1)).to(x.dtype());
  Tensor gx = (x - borrow(c.lse).unsqueeze(1)).exp() - on_target * (1.0 - c.label_smoothing);
  if (c.label_smoothing != 0) gx = gx - c.label_smoothing / static_cast<double>(C);
  gx = gx * (borrow(c.g) * c.scale).unsqueeze(1);
  borrow(c.grad_x).copy_(where(t.keep.unsqueeze(1), gx, zeros_like(gx)));
}

// ---------------------------------------------------------------- optimizer steps
void check_state(const TensorImpl* t, const TensorImpl& param, const char* what) {
  OXM_CHECK(t != nullptr, InvalidArgument, "optimizer_step: missing state buffer ", what);
  OXM_CHECK(t->contiguous && t->dtype == param.dtype && t->numel == param.numel && t->device() == param.device(),
            InvalidArgument, "optimizer_step: state buffer ", what,
            " must be contiguous with the parameter's shape, dtype and device");
}

// The checks of the kernels, for every update before any is applied (a bad list updates nothing).
void check_update(const OptimizerUpdate& u) {
  const TensorImpl& p = *u.param;
  const TensorImpl& g = *u.grad;
  OXM_CHECK(p.contiguous && g.contiguous && g.dtype == p.dtype && g.numel == p.numel, InvalidArgument,
            "optimizer_step: param and grad must be contiguous with one shape and dtype");
  OXM_CHECK(p.dtype == DType::F32 || p.dtype == DType::F64, UnsupportedDType,
            "optimizer_step: parameters must be f32 or f64, got ", p.dtype);
  const OptimizerStep& s = u.step;
  switch (s.kind) {
    case OptimizerStep::Kind::SGD:
      if (s.momentum != 0) check_state(u.state[0], p, "momentum_buffer");
      break;
    case OptimizerStep::Kind::Adam:
    case OptimizerStep::Kind::AdamW:
      check_state(u.state[0], p, "exp_avg");
      check_state(u.state[1], p, "exp_avg_sq");
      if (s.amsgrad) check_state(u.state[2], p, "max_exp_avg_sq");
      break;
    case OptimizerStep::Kind::RMSprop:
      check_state(u.state[0], p, "square_avg");
      if (s.momentum > 0) check_state(u.state[1], p, "momentum_buffer");
      if (s.centered) check_state(u.state[2], p, "grad_avg");
      break;
  }
}

// The new values of one update's tensors: param and state buffers, each with the tensor it replaces.
using NewValues = std::vector<std::pair<TensorImpl*, Tensor>>;

// torch 1.13's single-tensor updates (torch/optim/{sgd,adam,adamw,rmsprop}.py), one op per term. Only computes
// (every op allocates its result, and any allocation may fail): nothing is written here.
void compute_update(const OptimizerUpdate& u, NewValues& out) {
  const OptimizerStep& s = u.step;
  const Tensor p = borrow(u.param);
  const Tensor g = borrow(u.grad);
  switch (s.kind) {
    case OptimizerStep::Kind::SGD: {
      Tensor d = s.maximize ? -g : g;
      if (s.weight_decay != 0) d = d + p * s.weight_decay;
      if (s.momentum != 0) {
        const Tensor buf = borrow(u.state[0]);
        const Tensor m = s.first_step ? d : buf * s.momentum + d * (1.0 - s.dampening);
        out.emplace_back(u.state[0], m);
        d = s.nesterov ? d + m * s.momentum : m;
      }
      out.emplace_back(u.param, p - d * s.lr);
      return;
    }
    case OptimizerStep::Kind::Adam:
    case OptimizerStep::Kind::AdamW: {
      const bool decoupled = s.kind == OptimizerStep::Kind::AdamW;
      Tensor grad = s.maximize ? -g : g;
      const Tensor pi = decoupled && s.weight_decay != 0 ? p * (1.0 - s.lr * s.weight_decay) : p;
      if (!decoupled && s.weight_decay != 0) grad = grad + pi * s.weight_decay;
      const Tensor m = borrow(u.state[0]) * s.beta1 + grad * (1.0 - s.beta1);
      const Tensor v = borrow(u.state[1]) * s.beta2 + grad * grad * (1.0 - s.beta2);
      out.emplace_back(u.state[0], m);
      out.emplace_back(u.state[1], v);
      Tensor denom_sq = v;
      if (s.amsgrad) {
        denom_sq = maximum(borrow(u.state[2]), v);
        out.emplace_back(u.state[2], denom_sq);
      }
      if (u.step_count) {  // a captured step: the count is in device memory, so are the bias corrections
        const Tensor step = borrow(u.step_count).to(p.dtype());
        const Tensor bc1 = 1.0 - full(step.shape(), s.beta1, step.dtype(), step.device()).pow(step);
        const Tensor bc2 = 1.0 - full(step.shape(), s.beta2, step.dtype(), step.device()).pow(step);
        const Tensor denom = denom_sq.sqrt() / bc2.sqrt() + s.eps;
        out.emplace_back(u.param, pi - m / denom * (s.lr / bc1));
        return;
      }
      const double step = static_cast<double>(s.step);
      const double bc1 = 1.0 - std::pow(s.beta1, step), bc2 = 1.0 - std::pow(s.beta2, step);
      const Tensor denom = denom_sq.sqrt() / std::sqrt(bc2) + s.eps;
      out.emplace_back(u.param, pi - m / denom * (s.lr / bc1));
      return;
    }
    case OptimizerStep::Kind::RMSprop: {
      Tensor grad = s.maximize ? -g : g;
      if (s.weight_decay != 0) grad = grad + p * s.weight_decay;
      const Tensor sq = borrow(u.state[0]) * s.alpha + grad * grad * (1.0 - s.alpha);
      out.emplace_back(u.state[0], sq);
      Tensor avg;
      if (s.centered) {
        const Tensor ga = borrow(u.state[2]) * s.alpha + grad * (1.0 - s.alpha);
        out.emplace_back(u.state[2], ga);
        avg = (sq - ga * ga).sqrt();
      } else {
        avg = sq.sqrt();
      }
      avg = avg + s.eps;
      if (s.momentum > 0) {
        const Tensor buf = borrow(u.state[1]) * s.momentum + grad / avg;
        out.emplace_back(u.state[1], buf);
        out.emplace_back(u.param, p - buf * s.lr);
      } else {
        out.emplace_back(u.param, p - grad / avg * s.lr);
      }
      return;
    }
  }
}

// All or nothing, like the kernels: every new value of the list is computed first (where an out-of-memory can
// happen; it holds one new copy of the parameters and state at once), then written by device copies that
// allocate nothing. Writing as it went, an allocation failing in
// parameter i's update would leave parameters 0..i-1 (and part of i's state) updated while Optimizer::step rolls
// their step counts back: silently corrupt training state.
void optimizer_steps_fallback(FusedCall& call, Device device) {
  auto& c = std::get<OptimizerStepsCall>(call);
  for (size_t i = 0; i < c.count; ++i) check_update(c.updates[i]);
  NoGradGuard no_grad;
  NewValues values;
  values.reserve(4 * c.count);
  for (size_t i = 0; i < c.count; ++i)
    if (c.updates[i].param->numel > 0) compute_update(c.updates[i], values);
  for (auto& v : values) v.second = v.second.contiguous();  // op results already are: no copy
  detail::Backend& be = detail::backend_for(device, "optimizer_steps");
  for (const auto& [dst, value] : values) be.copy(*value.impl(), *dst);
}

// ---------------------------------------------------------------- im2col / col2im
// Flat positions in the padded [H + 2ph, W + 2pw] plane that im2col reads, in cols' (i, j, y, z) order.
Tensor window_index(const detail::ConvGeometry& g, int64_t padded_w, Device device) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(g.kh * g.kw * g.oh * g.ow));
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j)
      for (int64_t y = 0; y < g.oh; ++y)
        for (int64_t z = 0; z < g.ow; ++z) idx.push_back((y * g.sh + i * g.dh) * padded_w + z * g.sw + j * g.dw);
  const int64_t n = static_cast<int64_t>(idx.size());
  return detail::constant_on_device(from_vector<int64_t>(idx, Shape{n}), device);
}

void im2col_fallback(FusedCall& call, Device) {
  auto& c = std::get<Im2colCall>(call);
  const detail::ConvGeometry& g = c.geometry;
  NoGradGuard no_grad;
  Tensor x = borrow(c.x);
  const int64_t N = x.size(0), C = x.size(1), Hp = x.size(2) + 2 * g.ph, Wp = x.size(3) + 2 * g.pw;
  if (g.ph) x = pad(x, 2, g.ph, g.ph, c.pad_value);
  if (g.pw) x = pad(x, 3, g.pw, g.pw, c.pad_value);
  const Tensor cols = x.reshape({N, C, Hp * Wp}).index_select(2, window_index(g, Wp, x.device()));
  const int64_t CK = C * g.kh * g.kw;
  Tensor out = borrow(c.cols);
  if (c.ones_row) out.narrow(1, CK, 1).fill_(1.0);
  (c.ones_row ? out.narrow(1, 0, CK) : out).copy_(cols.reshape({N, CK, g.oh * g.ow}));
}

// index_add accumulates in increasing position, which is the CPU kernel's (k, y, z) order per plane.
void col2im_fallback(FusedCall& call, Device) {
  auto& c = std::get<Col2imCall>(call);
  const detail::ConvGeometry& g = c.geometry;
  NoGradGuard no_grad;
  Tensor xg = borrow(c.x_grad);
  const int64_t N = xg.size(0), C = xg.size(1), H = xg.size(2), W = xg.size(3);
  const int64_t Hp = H + 2 * g.ph, Wp = W + 2 * g.pw;
  Tensor all = borrow(c.cols);
  if (c.ones_row) all = all.narrow(1, 0, C * g.kh * g.kw);
  const Tensor cols = all.reshape({N, C, g.kh * g.kw * g.oh * g.ow});
  const Tensor plane =
      zeros(Shape{N, C, Hp * Wp}, xg.dtype(), xg.device()).index_add(2, window_index(g, Wp, xg.device()), cols);
  const Tensor inside = plane.reshape({N, C, Hp, Wp}).narrow(2, g.ph, H).narrow(3, g.pw, W);
  xg.copy_(c.zero_first ? inside : xg + inside);
}

// ---------------------------------------------------------------- max pooling
// The windows' taps as im2col's columns of the -inf-padded input (window_index), then one elementwise pass per
// tap in window order: the held value is replaced where the tap is greater or NaN (padding is -inf, never greater
// and never NaN), its plane position taken from a host table. A window starts at its first in-image tap (or -1).
void max_pool2d_fallback(FusedCall& call, Device) {
  auto& c = std::get<MaxPool2dCall>(call);
  const detail::ConvGeometry& g = c.geometry;
  NoGradGuard no_grad;
  Tensor x = borrow(c.x);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Hp = H + 2 * g.ph, Wp = W + 2 * g.pw, K = g.kh * g.kw, L = g.oh * g.ow;
  const double ninf = -std::numeric_limits<double>::infinity();
  if (g.ph) x = pad(x, 2, g.ph, g.ph, ninf);
  if (g.pw) x = pad(x, 3, g.pw, g.pw, ninf);
  const Tensor cols = x.reshape({N, C, Hp * Wp}).index_select(2, window_index(g, Wp, x.device())).reshape({N, C, K, L});
  std::vector<int64_t> pos(static_cast<size_t>(K * L)), first(static_cast<size_t>(L), -1);
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j)
      for (int64_t y = 0; y < g.oh; ++y)
        for (int64_t z = 0; z < g.ow; ++z) {
          const int64_t h = y * g.sh - g.ph + i * g.dh, w = z * g.sw - g.pw + j * g.dw, l = y * g.ow + z;
          const bool inside = h >= 0 && h < H && w >= 0 && w < W;
          pos[static_cast<size_t>((i * g.kw + j) * L + l)] = inside ? h * W + w : -1;
          if (inside && first[static_cast<size_t>(l)] < 0) first[static_cast<size_t>(l)] = h * W + w;
        }
  const Tensor positions = detail::constant_on_device(from_vector<int64_t>(pos, Shape{K, L}), x.device());
  Tensor best = full({N, C, L}, ninf, x.dtype(), x.device());
  Tensor index = detail::constant_on_device(from_vector<int64_t>(first, Shape{L}), x.device()).expand({N, C, L});
  for (int64_t k = 0; k < K; ++k) {
    const Tensor v = cols.select(2, k);
    const Tensor take = v.gt(best) + v.isnan();  // 0/1 masks of x's dtype, never both 1
    best = where(take, v, best);
    index = where(take.to(DType::U8), positions.select(0, k), index);
  }
  borrow(c.out).copy_(best.reshape(c.out->shape));
  borrow(c.indices).copy_(index.reshape(c.indices->shape));
}

// scatter_add along each plane (increasing output position, the kernel's order); the -1 of an empty window is
// sent to position 0 with a zero gradient.
void max_pool2d_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<MaxPool2dBackwardCall>(call);
  NoGradGuard no_grad;
  Tensor gx = borrow(c.grad_x);
  const int64_t N = gx.size(0), C = gx.size(1), HW = gx.size(2) * gx.size(3);
  const int64_t L = c.indices->shape[2] * c.indices->shape[3];
  const Tensor idx = borrow(c.indices).reshape({N, C, L});
  const Tensor inside = idx.ge(scalar(0, DType::I64)).to(DType::U8);
  const Tensor g = borrow(c.g).reshape({N, C, L});
  const Tensor plane = zeros(Shape{N, C, HW}, gx.dtype(), gx.device())
                           .scatter_add(2, maximum(idx, scalar(0, DType::I64)), where(inside, g, zeros_like(g)));
  gx.copy_(c.zero_first ? plane.reshape(gx.shape()) : gx + plane.reshape(gx.shape()));
}

// ---------------------------------------------------------------- small SPD linear algebra
// A host round trip through the per-matrix functions the CUDA kernels run (f64 arithmetic inside, any n).
namespace spd = detail;

// Per-matrix pivots (-1: fine) of the host loops, reported as the call asks: `fail` when its report is empty,
// else the report's device outputs (write_report, below the host-copy helpers).
template <class T>
std::vector<int> logdet_host(const LogdetSpdCall& c, const T* a, T* logdet, T* inv, std::vector<double>& values) {
  std::vector<double> work(static_cast<size_t>(spd::spd_work_size(static_cast<int>(c.n))));
  std::vector<int> pivots(static_cast<size_t>(c.count));
  const int64_t nn = c.n * c.n;
  for (int64_t b = 0; b < c.count; ++b) {
    const spd::SpdPivot p = spd::spd_logdet_inverse(a + b * nn, static_cast<int>(c.n), work.data(), logdet + b,
                                                    inv ? inv + b * nn : nullptr);
    pivots[static_cast<size_t>(b)] = p.pivot;
    values[static_cast<size_t>(b)] = p.value;
  }
  return pivots;
}

template <class T>
std::vector<int> cholesky_host(const CholeskySpdCall& c, const T* a, T* L, std::vector<double>& values) {
  std::vector<double> work(static_cast<size_t>(spd::spd_work_size(static_cast<int>(c.n))));
  std::vector<int> pivots(static_cast<size_t>(c.count));
  const int64_t nn = c.n * c.n;
  for (int64_t b = 0; b < c.count; ++b) {
    const spd::SpdPivot p = spd::spd_cholesky(a + b * nn, static_cast<int>(c.n), work.data(), L + b * nn);
    pivots[static_cast<size_t>(b)] = p.pivot;
    values[static_cast<size_t>(b)] = p.value;
  }
  return pivots;
}

template <class T>
std::vector<int> solve_host(const SolveTriangularSmallCall& c, const T* t, T* x) {
  std::vector<double> work(static_cast<size_t>(c.n));
  std::vector<int> pivots(static_cast<size_t>(c.count), -1);
  for (int64_t b = 0; b < c.count; ++b)
    for (int64_t col = 0; col < c.k; ++col) {
      const int row = spd::tri_solve_column(t + b * c.n * c.n, static_cast<int>(c.n), x + b * c.n * c.k + col, c.k,
                                            c.upper, work.data());
      if (row >= 0) pivots[static_cast<size_t>(b)] = row;
    }
  return pivots;
}

void check_real(DType d, const char* op) {
  OXM_CHECK(d == DType::F32 || d == DType::F64, UnsupportedDType, op, ": dtype ", d, " is not supported (f32, f64)");
}

// A contiguous host copy of a contiguous device tensor (the tensor itself on the CPU).
Tensor host_copy(const TensorImpl* t) { return borrow(t).to(Device::cpu()).contiguous(); }
// Writes a host result back into `dst` (on any device).
void write_back(const TensorImpl* dst, const Tensor& host) {
  Tensor d = borrow(dst);
  d.copy_(host.to(d.device()).reshape(d.shape()));
}

// The host loops' pivots as the call asks: its report's device outputs (info entries; the first word lowered to
// the earliest failure's key) or, with an empty report, `fail`.
void report_pivots(const SpdReport& r, const std::vector<int>& pivots, const std::vector<double>& values,
                   detail::SpdFailure& fail) {
  fail = {};
  if (r.empty()) {
    for (size_t b = 0; b < pivots.size(); ++b)
      if (pivots[b] >= 0) {
        fail = {static_cast<int64_t>(b), pivots[b], values.empty() ? 0.0 : values[b]};
        break;
      }
    return;
  }
  if (r.info) {
    Tensor info = empty({static_cast<int64_t>(pivots.size())}, DType::I64);
    for (size_t b = 0; b < pivots.size(); ++b) info.impl()->ptr<int64_t>()[b] = pivots[b] < 0 ? 0 : pivots[b] + 1;
    write_back(r.info, info);
  }
  if (r.first) {
    Tensor word = host_copy(r.first);
    int64_t& key = word.impl()->ptr<int64_t>()[0];
    for (size_t b = 0; b < pivots.size(); ++b)
      if (pivots[b] >= 0) key = std::min(key, detail::spd_failure_key(r.tag, static_cast<int64_t>(b), pivots[b]));
    write_back(r.first, word);
  }
}

void logdet_fallback(FusedCall& call, Device) {
  auto& c = std::get<LogdetSpdCall>(call);
  check_real(c.a->dtype, "logdet");
  NoGradGuard no_grad;
  const Tensor a = host_copy(c.a);
  Tensor ld = empty({c.count}, a.dtype()), inv = c.inverse ? empty({c.count, c.n, c.n}, a.dtype()) : Tensor();
  std::vector<double> values(static_cast<size_t>(c.count));
  const std::vector<int> pivots = a.dtype() == DType::F32
                                      ? logdet_host<float>(c, a.impl()->ptr<float>(), ld.impl()->ptr<float>(),
                                                           c.inverse ? inv.impl()->ptr<float>() : nullptr, values)
                                      : logdet_host<double>(c, a.impl()->ptr<double>(), ld.impl()->ptr<double>(),
                                                            c.inverse ? inv.impl()->ptr<double>() : nullptr, values);
  write_back(c.logdet, ld);
  if (c.inverse) write_back(c.inverse, inv);
  report_pivots(c.report, pivots, values, c.fail);
}

void cholesky_fallback(FusedCall& call, Device) {
  auto& c = std::get<CholeskySpdCall>(call);
  check_real(c.a->dtype, "cholesky");
  NoGradGuard no_grad;
  const Tensor a = host_copy(c.a);
  Tensor L = empty({c.count, c.n, c.n}, a.dtype());
  std::vector<double> values(static_cast<size_t>(c.count));
  const std::vector<int> pivots =
      a.dtype() == DType::F32 ? cholesky_host<float>(c, a.impl()->ptr<float>(), L.impl()->ptr<float>(), values)
                              : cholesky_host<double>(c, a.impl()->ptr<double>(), L.impl()->ptr<double>(), values);
  write_back(c.L, L);
  report_pivots(c.report, pivots, values, c.fail);
}

void solve_triangular_fallback(FusedCall& call, Device) {
  auto& c = std::get<SolveTriangularSmallCall>(call);
  check_real(c.t->dtype, "solve_triangular");
  NoGradGuard no_grad;
  const Tensor t = host_copy(c.t);
  Tensor x = host_copy(c.x);
  if (x.shares_storage(borrow(c.x))) x = x.clone();  // solved in place: never through the caller's buffer early
  const std::vector<int> pivots = t.dtype() == DType::F32
                                      ? solve_host<float>(c, t.impl()->ptr<float>(), x.impl()->ptr<float>())
                                      : solve_host<double>(c, t.impl()->ptr<double>(), x.impl()->ptr<double>());
  write_back(c.x, x);
  report_pivots(c.report, pivots, {}, c.fail);
}

// ---------------------------------------------------------------- scans and sorting along a dim
// A host round trip (none on the CPU) through the per-row functions the CUDA kernels run; the sort uses
// std::stable_sort with their comparison (O(n log n) rather than the per-thread insertion sort).
template <class F>
void with_scan_dtype(DType d, const char* op, F f) {
  switch (d) {
    case DType::F32:
      return f(float{});
    case DType::F64:
      return f(double{});
    case DType::I64:
      return f(int64_t{});
    default:
      OXM_FAIL(UnsupportedDType, op, ": dtype ", d, " is not supported (f32, f64, i64)");
  }
}

// Where a host loop writes `dst`: dst itself on the CPU, else a host buffer for write_back.
Tensor host_target(TensorImpl* dst) { return dst->device().is_cpu() ? borrow(dst) : empty(dst->shape, dst->dtype); }
void finish(TensorImpl* dst, const Tensor& host) {
  if (!dst->device().is_cpu()) write_back(dst, host);
}

template <class F>
void each_row(const RowsAlongDim& r, F f) {
  for (int64_t o = 0; o < r.outer; ++o)
    for (int64_t i = 0; i < r.inner; ++i) f(o * r.n * r.inner + i);
}

void scan_fallback(FusedCall& call, Device) {
  auto& c = std::get<ScanCall>(call);
  NoGradGuard no_grad;
  const Tensor x = host_copy(c.x);
  Tensor out = host_target(c.out);
  with_scan_dtype(x.dtype(), c.product ? "cumprod" : "cumsum", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.impl()->ptr<T>();
    T* op = out.impl()->ptr<T>();
    each_row(c.rows, [&](int64_t base) {
      detail::scan_row(xp + base, op + base, c.rows.n, c.rows.inner, c.product, c.reverse);
    });
  });
  finish(c.out, out);
}

void cumprod_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<CumprodBackwardCall>(call);
  check_real(c.x->dtype, "cumprod backward");
  NoGradGuard no_grad;
  const Tensor x = host_copy(c.x), g = host_copy(c.g);
  Tensor gx = host_target(c.grad_x);
  with_scan_dtype(x.dtype(), "cumprod backward", [&](auto zero) {
    using T = decltype(zero);
    const T *xp = x.impl()->ptr<T>(), *gp = g.impl()->ptr<T>();
    T* op = gx.impl()->ptr<T>();
    each_row(c.rows, [&](int64_t base) {
      detail::cumprod_backward_row(xp + base, gp + base, op + base, c.rows.n, c.rows.inner);
    });
  });
  finish(c.grad_x, gx);
}

void sort_indices_fallback(FusedCall& call, Device) {
  auto& c = std::get<SortIndicesCall>(call);
  NoGradGuard no_grad;
  const Tensor x = host_copy(c.x);
  Tensor idx = host_target(c.indices);
  with_scan_dtype(x.dtype(), "sort", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.impl()->ptr<T>();
    int64_t* ip = idx.impl()->ptr<int64_t>();
    const int64_t n = c.rows.n, stride = c.rows.inner;
    std::vector<int64_t> order(static_cast<size_t>(n));
    each_row(c.rows, [&](int64_t base) {
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return detail::sorts_before(xp[base + a * stride], xp[base + b * stride], c.descending);
      });
      for (int64_t k = 0; k < n; ++k) ip[base + k * stride] = order[static_cast<size_t>(k)];
    });
  });
  finish(c.indices, idx);
}

// ---------------------------------------------------------------- softmax backward
void softmax_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<SoftmaxBackwardCall>(call);
  NoGradGuard no_grad;
  const Tensor y = borrow(c.y), g = borrow(c.g);
  if (c.log)
    borrow(c.grad_x).copy_(g - y.exp() * g.sum({c.dim}, true));
  else
    borrow(c.grad_x).copy_(y * (g - (g * y).sum({c.dim}, true)));
}

// ---------------------------------------------------------------- layer norm
// x as [rows, n] (its memory is contiguous).
Tensor as_rows(const TensorImpl* p, int64_t n) { return borrow(p).reshape({p->numel / std::max<int64_t>(n, 1), n}); }

void layer_norm_fallback(FusedCall& call, Device) {
  auto& c = std::get<LayerNormCall>(call);
  NoGradGuard no_grad;
  const Tensor x = as_rows(c.x, c.n);
  const Tensor mean = x.mean({1}, true);
  const Tensor xc = x - mean;
  const Tensor rstd = (xc.square().mean({1}, true) + c.eps).rsqrt();
  Tensor y = xc * rstd;
  // weight / bias hold normalized_shape (e.g. [8, 12]): as one row of n.
  if (c.weight) y = y * as_rows(c.weight, c.n);
  if (c.bias) y = y + as_rows(c.bias, c.n);
  as_rows(c.y, c.n).copy_(y);
  borrow(c.mean).copy_(mean.reshape(c.mean->shape));
  borrow(c.rstd).copy_(rstd.reshape(c.rstd->shape));
}

void layer_norm_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<LayerNormBackwardCall>(call);
  NoGradGuard no_grad;
  const Tensor x = as_rows(c.x, c.n), g = as_rows(c.g, c.n);
  const Tensor mean = borrow(c.mean).reshape({-1, 1}), rstd = borrow(c.rstd).reshape({-1, 1});
  const Tensor xhat = (x - mean) * rstd;
  const Tensor gy = c.weight ? g * as_rows(c.weight, c.n) : g;
  as_rows(c.grad_x, c.n).copy_(rstd * (gy - gy.mean({1}, true) - xhat * (gy * xhat).mean({1}, true)));
  if (c.grad_weight) as_rows(c.grad_weight, c.n).copy_((g * xhat).sum({0}, true));
  if (c.grad_bias) as_rows(c.grad_bias, c.n).copy_(g.sum({0}, true));
}

// ---------------------------------------------------------------- LSTM cell
void lstm_cell_fallback(FusedCall& call, Device) {
  auto& c = std::get<LstmCellCall>(call);
  NoGradGuard no_grad;
  const std::vector<Tensor> g = (c.gates_add ? borrow(c.gates) + borrow(c.gates_add) : borrow(c.gates)).chunk(4, 1);
  const Tensor i = g[0].sigmoid(), f = g[1].sigmoid(), gg = g[2].tanh(), o = g[3].sigmoid();
  const Tensor cn = f * borrow(c.c_prev) + i * gg;
  borrow(c.acts).copy_(cat({i, f, gg, o}, 1));
  borrow(c.c).copy_(cn);
  borrow(c.h).copy_(o * cn.tanh());
}

void lstm_cell_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<LstmCellBackwardCall>(call);
  NoGradGuard no_grad;
  const std::vector<Tensor> a = borrow(c.acts).chunk(4, 1);
  const Tensor &i = a[0], &f = a[1], &g = a[2], &o = a[3];
  const Tensor tc = borrow(c.c).tanh();
  const Tensor gh = c.gh ? borrow(c.gh) : zeros_like(tc), gc = c.gc ? borrow(c.gc) : zeros_like(tc);
  const Tensor dc = gc + gh * o * (1.0 - tc * tc);
  borrow(c.grad_gates)
      .copy_(cat({dc * g * i * (1.0 - i), dc * borrow(c.c_prev) * f * (1.0 - f), dc * i * (1.0 - g * g),
                  gh * tc * o * (1.0 - o)},
                 1));
  borrow(c.grad_c_prev).copy_(dc * f);
}

// ---------------------------------------------------------------- GRU cell
void gru_cell_fallback(FusedCall& call, Device) {
  auto& c = std::get<GruCellCall>(call);
  NoGradGuard no_grad;
  const std::vector<Tensor> i = borrow(c.gi).chunk(3, 1), h = borrow(c.gh).chunk(3, 1);
  const Tensor r = (i[0] + h[0]).sigmoid(), z = (i[1] + h[1]).sigmoid();
  const Tensor n = (i[2] + r * h[2]).tanh();
  borrow(c.acts).copy_(cat({r, z, n, h[2]}, 1));
  borrow(c.h).copy_(n + z * (borrow(c.h_prev) - n));
}

void gru_cell_backward_fallback(FusedCall& call, Device) {
  auto& c = std::get<GruCellBackwardCall>(call);
  NoGradGuard no_grad;
  const std::vector<Tensor> a = borrow(c.acts).chunk(4, 1);
  const Tensor &r = a[0], &z = a[1], &n = a[2], &ghn = a[3];
  const Tensor g = borrow(c.g), hp = borrow(c.h_prev);
  const Tensor dn = g * (1.0 - z) * (1.0 - n * n);
  const Tensor dz = g * (hp - n) * z * (1.0 - z);
  const Tensor dr = dn * ghn * r * (1.0 - r);
  borrow(c.grad_gi).copy_(cat({dr, dz, dn}, 1));
  borrow(c.grad_gh).copy_(cat({dr, dz, dn * r}, 1));
  borrow(c.grad_h_prev).copy_(g * z);
}

// ---------------------------------------------------------------- plain RNN cell
void rnn_cell_fallback(FusedCall& call, Device) {
  auto& c = std::get<RnnCellCall>(call);
  NoGradGuard no_grad;
  const Tensor pre = borrow(c.xt) + borrow(c.hh);
  borrow(c.h).copy_(c.relu ? pre.relu() : pre.tanh());
}

// ---------------------------------------------------------------- linear
// The product into out, then the bias added in place: the two passes the fused kernel makes one. With gelu_grad the
// product goes there first and the GELU and its derivative are taken from it.
void linear_fallback(FusedCall& call, Device device) {
  auto& c = std::get<LinearCall>(call);
  NoGradGuard no_grad;
  if (c.out->numel == 0) return;
  if (c.gelu_grad) {
    LinearCall pre = c;
    pre.out = c.gelu_grad;
    pre.gelu_grad = nullptr;
    FusedCall pre_call = pre;
    linear_fallback(pre_call, device);
    const Tensor u = borrow(c.gelu_grad).clone();
    borrow(c.out).copy_(u.gelu());
    borrow(c.gelu_grad)
        .copy_(0.5 * (1.0 + (u * 0.70710678118654752440).erf()) + u * (u * u * -0.5).exp() * 0.39894228040143267794);
    return;
  }
  const Tensor wt = borrow(c.weight).transpose(-1, -2);
  // A stacked bias [R, N] is added to every row of its replica's [M, N].
  const Tensor bias = !c.bias ? Tensor() : c.out->shape.size() == 3 ? borrow(c.bias).unsqueeze(1) : borrow(c.bias);
  const bool empty_k = c.x->shape.back() == 0;
  if (c.accumulate) {
    if (!empty_k) borrow(c.out).add_(borrow(c.x).matmul(wt));
    if (bias.defined()) borrow(c.out).add_(bias);
    return;
  }
  auto& be = detail::backend_for(device, "linear");
  if (empty_k)
    be.fill(*c.out, 0.0);
  else
    be.matmul(*c.x, *wt.impl(), *c.out);
  if (bias.defined()) borrow(c.out).add_(bias);
}

// ---------------------------------------------------------------- dropout mask (Philox)
// A host loop over philox.hpp (the CUDA kernel's code): a round trip for a device's tensors, refused inside a
// capture, where the device's kernel must take it.
void dropout_mask_fallback(FusedCall& call, Device) {
  auto& c = std::get<DropoutMaskCall>(call);
  check_real(c.mask->dtype, "dropout");
  NoGradGuard no_grad;
  const Tensor state = host_copy(c.state);
  const auto seed = static_cast<uint64_t>(state.impl()->ptr<int64_t>()[0]);
  const auto offset = static_cast<uint64_t>(state.impl()->ptr<int64_t>()[1]);
  Tensor mask = empty(borrow(c.mask).shape(), c.mask->dtype);
  if (c.mask->dtype == DType::F32)
    detail::dropout_mask_host(seed, offset, c.mask->numel, c.p, c.scale, mask.impl()->ptr<float>());
  else
    detail::dropout_mask_host(seed, offset, c.mask->numel, c.p, c.scale, mask.impl()->ptr<double>());
  write_back(c.mask, mask);
}

// The index check as a host loop (a round trip: the backends that defer checks have the kernel).
void index_check_fallback(FusedCall& call, Device) {
  auto& c = std::get<IndexCheckCall>(call);
  OXM_CHECK(c.index->dtype == DType::I64 && c.size >= 1, InvalidArgument,
            "index check: needs an i64 index and a dim of size >= 1");
  NoGradGuard no_grad;
  const Tensor index = host_copy(c.index);
  Tensor safe = empty(index.shape(), DType::I64);
  int64_t first = detail::kSpdNoFailure, kept = 0;
  const int64_t* in = index.impl()->ptr<int64_t>();
  int64_t* out = safe.impl()->ptr<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i) {
    int64_t key;
    bool counts;
    out[i] = detail::index_check_at(in[i], c.size, c.report.tag, i, c.ignore, &key, &counts);
    first = std::min(first, key);
    kept += counts ? 1 : 0;
  }
  write_back(c.safe, safe);
  if (c.kept) {
    Tensor k = host_copy(c.kept);
    k.impl()->ptr<int64_t>()[0] += kept;
    write_back(c.kept, k);
  }
  if (c.report.first && first != detail::kSpdNoFailure) {
    Tensor word = host_copy(c.report.first);
    word.impl()->ptr<int64_t>()[0] = std::min(word.impl()->ptr<int64_t>()[0], first);
    write_back(c.report.first, word);
  }
}

// The list norms and scaling with ordinary ops, one tensor at a time.
void tensor_list_norm_fallback(FusedCall& call, Device) {
  auto& c = std::get<TensorListNormCall>(call);
  NoGradGuard no_grad;
  Tensor out = borrow(c.out);
  const bool inf = std::isinf(c.norm_type);
  for (size_t i = 0; i < c.count; ++i) {
    const Tensor t = borrow(c.tensors[i]);
    out.select(0, static_cast<int64_t>(i))
        .copy_(t.numel() == 0       ? zeros({}, out.dtype(), out.device())
               : inf                ? t.abs().max()
               : c.norm_type == 1.0 ? t.abs().sum()
               : c.norm_type == 2.0 ? (t * t).sum()
                                    : t.abs().pow(c.norm_type).sum());
  }
}
void tensor_list_scale_fallback(FusedCall& call, Device) {
  auto& c = std::get<TensorListScaleCall>(call);
  NoGradGuard no_grad;
  for (size_t i = 0; i < c.count; ++i) borrow(c.tensors[i]).mul_(c.scale);
}

// ---------------------------------------------------------------- the registry
// "offered_by" documents the built-in backends' supports(); the tests check the CPU's and the test device's.
constexpr FusedOpInfo kFusedOps[] = {
    {FusedOp::CrossEntropy, "cross_entropy", cross_entropy_fallback, "cpu (f32, f64), cuda (f32)"},
    {FusedOp::CrossEntropyBackward, "cross_entropy backward", cross_entropy_backward_fallback,
     "cpu (f32, f64), cuda (f32)"},
    {FusedOp::OptimizerSteps, "optimizer_steps", optimizer_steps_fallback,
     "cpu (f32, f64; one pass per parameter), cuda (f32; one launch per 24 parameters)"},
    {FusedOp::Im2col, "im2col", im2col_fallback, "cpu (f32, f64), cuda (f32)"},
    {FusedOp::Col2im, "col2im", col2im_fallback, "cpu (f32, f64), cuda (f32)"},
    {FusedOp::LogdetSpd, "logdet", logdet_fallback, "cuda (f32, n <= 32); elsewhere linalg's host kernels"},
    {FusedOp::CholeskySpd, "cholesky", cholesky_fallback, "cuda (f32, n <= 32); elsewhere linalg's host kernels"},
    {FusedOp::SolveTriangularSmall, "solve_triangular", solve_triangular_fallback,
     "cuda (f32, n <= 32); elsewhere linalg's host kernels"},
    {FusedOp::Scan, "cumsum / cumprod", scan_fallback,
     "cuda (f32, i64; one thread per row); elsewhere the host loop (no round trip on the cpu)"},
    {FusedOp::CumprodBackward, "cumprod backward", cumprod_backward_fallback,
     "cuda (f32; one thread per row); elsewhere the host loop"},
    {FusedOp::SortIndices, "sort", sort_indices_fallback,
     "cuda (f32, i64; one thread per row, insertion sort); elsewhere std::stable_sort on the host"},
    {FusedOp::SoftmaxBackward, "softmax backward", softmax_backward_fallback,
     "cpu (f32, f64; contiguous rows along the last dim); cuda (f32, the same rows; a warp per row)"},
    {FusedOp::LayerNorm, "layer_norm", layer_norm_fallback, "cpu (f32, f64); cuda (f32; a warp per row)"},
    {FusedOp::LayerNormBackward, "layer_norm backward", layer_norm_backward_fallback,
     "cpu (f32, f64); cuda (f32; a warp per row, the parameter sums by chunks of 32 rows)"},
    {FusedOp::LstmCell, "lstm_cell", lstm_cell_fallback, "cpu (f32, f64); cuda (f32)"},
    {FusedOp::LstmCellBackward, "lstm_cell backward", lstm_cell_backward_fallback, "cpu (f32, f64); cuda (f32)"},
    {FusedOp::Attention, "scaled_dot_product_attention", attention_fallback,
     "cpu (f32, f64; a block of 32 queries' score rows at a time, register-tiled products)"},
    {FusedOp::AttentionBackward, "scaled_dot_product_attention backward", attention_backward_fallback,
     "cpu (f32, f64; the forward's rows recomputed, a head per thread)"},
    {FusedOp::Linear, "linear", linear_fallback, "cpu (f32, f64; the bias rows, then GEMM with beta = 1)"},
    {FusedOp::GruCell, "gru_cell", gru_cell_fallback, "cpu (f32, f64); cuda (f32)"},
    {FusedOp::GruCellBackward, "gru_cell backward", gru_cell_backward_fallback, "cpu (f32, f64); cuda (f32)"},
    {FusedOp::MaxPool2d, "max_pool2d", max_pool2d_fallback,
     "cpu (f32, f64; one pass, no unfold buffer); cuda (f32; a thread per output)"},
    {FusedOp::MaxPool2dBackward, "max_pool2d backward", max_pool2d_backward_fallback,
     "cpu (f32, f64; a scatter by the saved indices); cuda (f32; a gather per input over the windows reaching it)"},
    {FusedOp::RnnCell, "rnn_cell", rnn_cell_fallback, "cpu (f32, f64); cuda (f32)"},
    {FusedOp::DropoutMask, "dropout", dropout_mask_fallback,
     "cuda (f32; four elements per Philox block and thread); elsewhere the host loop"},
    {FusedOp::IndexCheck, "index check", index_check_fallback,
     "cuda (a thread per position, an atomic min into the deferred-check word); elsewhere the host loop"},
    {FusedOp::TensorListNorm, "tensor list norm", tensor_list_norm_fallback,
     "cuda (f32; two launches per 24 tensors, chunk sums in f64 combined in order), cpu (f32, f64, contiguous; one "
     "pass per tensor, f64 lanes); elsewhere ops per tensor"},
    {FusedOp::TensorListScale, "tensor list scale", tensor_list_scale_fallback,
     "cuda (f32; one launch per 24 tensors), cpu (f32, f64, contiguous); elsewhere a mul_ per tensor"},
};
static_assert(sizeof(kFusedOps) / sizeof(kFusedOps[0]) == static_cast<size_t>(kNumFusedOps));
constexpr bool rows_in_order() {
  for (int i = 0; i < kNumFusedOps; ++i)
    if (static_cast<int>(kFusedOps[i].op) != i) return false;
  return true;
}
static_assert(rows_in_order(), "kFusedOps must list the fused ops in FusedOp order");

}  // namespace

const FusedOpInfo& fused_op_info(FusedOp op) { return kFusedOps[static_cast<int>(op)]; }
const char* fused_op_name(FusedOp op) { return kFusedOps[static_cast<int>(op)].name; }

bool fused_supported(const FusedCall& call, Device device) {
  return detail::backend_for(device, fused_op_name(fused_op(call))).supports(call);
}

void run_fused(FusedCall& call, Device device) {
  const FusedOp op = fused_op(call);
  detail::Backend& be = detail::backend_for(device, fused_op_name(op));
  if (be.supports(call)) [[likely]] {
    be.run(call);
    return;
  }
  kFusedOps[static_cast<int>(op)].fallback(call, device);
}

void run_fused_fallback(FusedCall& call, Device device) {
  kFusedOps[static_cast<int>(fused_op(call))].fallback(call, device);
}

}  // namespace oxmera::ops
