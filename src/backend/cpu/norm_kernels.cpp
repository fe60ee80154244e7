// layer_norm and its backward on the CPU over contiguous rows of n, and clip_grad_norm_'s list norms and scaling
// (ops/fused.hpp's contracts), compiled once per ISA level. Rows are short in the models that call it (64 to 1024
// features), so the cost is per row: whole vectors throughout, each row's sums taken in f32 lanes (16 vectors at most)
// and flushed widened into f64 lanes, and one butterfly of shuffles across the lanes at the end — a lane-by-lane f64
// sum was a 16-deep dependency chain per row and made the kernel 3x slower (docs/LIMITATIONS.md, "Layer norm"). The
// statistics stay two-pass (the mean, then the mean square of the centred row), as the composite computes them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/parallel.hpp"
#include "backend/cpu/simd.hpp"
#include "ops/fused.hpp"
#include "oxmera/error.hpp"

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

namespace oxmera::detail::OXM_ISA {
namespace {

using namespace simd;

constexpr int64_t kGrain = 32768;  // elements per thread before a row loop goes parallel
constexpr int64_t kFlush = 16;     // vectors summed in T before the partial sum is widened into the f64 lanes
constexpr int64_t kRowBlock = 16;  // rows taken through each step together

// The sum over i < n of f(i) in f64, where fv(i) gives the W elements from i as a vector and fs(i) one element.
template <class T, class FV, class FS>
[[gnu::always_inline]] inline double row_sum(int64_t n, FV fv, FS fs) {
  constexpr int64_t W = kLanes<T>;
  const int64_t whole = n / W * W;
  WideVec<T> acc{};
  int64_t i = 0;
  while (i < whole) {
    const int64_t stop = std::min(whole, i + kFlush * W);
    Vec<T> part{};
    for (; i < stop; i += W) part += fv(i);
    acc += widen<T>(part);
  }
  double s = sum_lanes(acc);
  for (; i < n; ++i) s += static_cast<double>(fs(i));
  return s;
}

template <class T>
void layer_norm_t(const TensorImpl& xt, const TensorImpl* wt, const TensorImpl* bt, double eps, int64_t n,
                  TensorImpl& yt, TensorImpl& mt, TensorImpl& rt) {
  constexpr int64_t W = kLanes<T>;
  const int64_t rows = xt.numel / n, whole = n / W * W, blocks = (rows + kRowBlock - 1) / kRowBlock;
  // Rows go in blocks, each step for every row of the block before the next step: a row alone is one long chain of
  // dependent latencies (sum, reduce, centre, sum, reduce, sqrt, divide) that out-of-order execution cannot overlap
  // with the next row's; a block gives it kRowBlock independent chains per step, and one vector sqrt and divide.
  parallel_for(
      blocks, std::max<int64_t>(kGrain / std::max<int64_t>(n * kRowBlock, 1), 1),
      [&, n, whole, rows](int64_t b, int64_t e) {
        // (the pointers as locals of the task: the loops keep them in registers)
        const T* const xp = xt.ptr<T>();
        const T* const w = wt ? wt->ptr<T>() : nullptr;
        const T* const bb = bt ? bt->ptr<T>() : nullptr;
        T* const yp = yt.ptr<T>();
        for (int64_t blk = b; blk < e; ++blk) {
          const int64_t r0 = blk * kRowBlock, nr = std::min(kRowBlock, rows - r0);
          T mean[kRowBlock], rstd[kRowBlock] = {};
          for (int64_t r = 0; r < nr; ++r) {
            const T* x = xp + (r0 + r) * n;
            mean[r] = static_cast<T>(row_sum<T>(
                                         n, [&](int64_t i) { return vload(x + i); }, [&](int64_t i) { return x[i]; }) /
                                     static_cast<double>(n));
          }
          for (int64_t r = 0; r < nr; ++r) {
            const T* x = xp + (r0 + r) * n;
            const T m = mean[r];
            const Vec<T> mv = splat(m);
            rstd[r] = static_cast<T>(row_sum<T>(
                                         n,
                                         [&](int64_t i) {
                                           const Vec<T> d = vload(x + i) - mv;
                                           return d * d;
                                         },
                                         [&](int64_t i) { return (x[i] - m) * (x[i] - m); }) /
                                     static_cast<double>(n));
          }
          for (int64_t r = 0; r < kRowBlock; ++r)
            rstd[r] = T(1) / std::sqrt(rstd[r] + static_cast<T>(eps));  // vectorised
          std::copy(mean, mean + nr, mt.ptr<T>() + r0);
          std::copy(rstd, rstd + nr, rt.ptr<T>() + r0);
          for (int64_t r = 0; r < nr; ++r) {
            const T* x = xp + (r0 + r) * n;
            T* y = yp + (r0 + r) * n;
            const Vec<T> mv = splat(mean[r]), rv = splat(rstd[r]);
            int64_t i = 0;
            for (; i < whole; i += W) {
              Vec<T> o = (vload(x + i) - mv) * rv;
              if (w) o *= vload(w + i);
              if (bb) o += vload(bb + i);
              vstore(y + i, o);
            }
            for (; i < n; ++i) {
              T o = (x[i] - mean[r]) * rstd[r];
              if (w) o *= w[i];
              if (bb) o += bb[i];
              y[i] = o;
            }
          }
        }
      });
}

template <class T>
void layer_norm_backward_t(const TensorImpl& xt, const TensorImpl& gt, const TensorImpl* wt, const TensorImpl& mt,
                           const TensorImpl& rt, int64_t n, TensorImpl& gxt, TensorImpl* gwt, TensorImpl* gbt) {
  constexpr int64_t W = kLanes<T>;
  const int64_t rows = xt.numel / n, whole = n / W * W, blocks = (rows + kRowBlock - 1) / kRowBlock;
  // dx = rstd (g w - mean(g w) - x^ mean(g w x^)), x^ = (x - mean) rstd; rows in blocks, as the forward
  parallel_for(blocks, std::max<int64_t>(kGrain / std::max<int64_t>(n * kRowBlock, 1), 1),
               [&, n, whole, rows](int64_t b, int64_t e) {
                 const T* const xp = xt.ptr<T>();
                 const T* const gp = gt.ptr<T>();
                 const T* const w = wt ? wt->ptr<T>() : nullptr;
                 const T* const mp = mt.ptr<T>();
                 const T* const rp = rt.ptr<T>();
                 T* const gxp = gxt.ptr<T>();
                 const Vec<T> one = splat(T(1));
                 for (int64_t blk = b; blk < e; ++blk) {
                   const int64_t r0 = blk * kRowBlock, nr = std::min(kRowBlock, rows - r0);
                   T ma[kRowBlock], mc[kRowBlock];
                   for (int64_t r = 0; r < nr; ++r) {
                     const T* x = xp + (r0 + r) * n;
                     const T* g = gp + (r0 + r) * n;
                     const T mean = mp[r0 + r], rstd = rp[r0 + r];
                     const Vec<T> mv = splat(mean), rv = splat(rstd);
                     auto gyv = [&](int64_t i) { return vload(g + i) * (w ? vload(w + i) : one); };
                     auto gys = [&](int64_t i) { return w ? g[i] * w[i] : g[i]; };
                     ma[r] = static_cast<T>(row_sum<T>(n, gyv, gys) / static_cast<double>(n));
                     mc[r] = static_cast<T>(row_sum<T>(
                                                n, [&](int64_t i) { return gyv(i) * ((vload(x + i) - mv) * rv); },
                                                [&](int64_t i) { return gys(i) * ((x[i] - mean) * rstd); }) /
                                            static_cast<double>(n));
                   }
                   for (int64_t r = 0; r < nr; ++r) {
                     const T* x = xp + (r0 + r) * n;
                     const T* g = gp + (r0 + r) * n;
                     T* gx = gxp + (r0 + r) * n;
                     const T mean = mp[r0 + r], rstd = rp[r0 + r], a = ma[r], c = mc[r];
                     const Vec<T> mv = splat(mean), rv = splat(rstd), av = splat(a), cv = splat(c);
                     int64_t i = 0;
                     for (; i < whole; i += W)
                       vstore(gx + i,
                              rv * (vload(g + i) * (w ? vload(w + i) : one) - av - (vload(x + i) - mv) * rv * cv));
                     for (; i < n; ++i) gx[i] = rstd * ((w ? g[i] * w[i] : g[i]) - a - (x[i] - mean) * rstd * c);
                   }
                 }
               });
  if (!gwt && !gbt) return;
  const T* xp = xt.ptr<T>();
  const T* gp = gt.ptr<T>();
  const T* mp = mt.ptr<T>();
  const T* rp = rt.ptr<T>();
  // Column sums over the rows in f64 lanes, in blocks of columns (parallel over the blocks: each column's order is
  // fixed, whatever the threads).
  T* gw = gwt ? gwt->ptr<T>() : nullptr;
  T* gb = gbt ? gbt->ptr<T>() : nullptr;
  constexpr int64_t kCols = 256;
  constexpr int64_t kVecs = kCols / W;
  parallel_for((n + kCols - 1) / kCols, std::max<int64_t>(1, kGrain / std::max<int64_t>(rows * kCols, 1)),
               [&](int64_t b, int64_t e) {
                 WideVec<T> sw[kVecs], sb[kVecs];
                 double tw[kCols], tb[kCols];
                 for (int64_t blk = b; blk < e; ++blk) {
                   const int64_t j0 = blk * kCols, cnt = std::min(kCols, n - j0), vecs = cnt / W;
                   for (int64_t v = 0; v < vecs; ++v) sw[v] = sb[v] = WideVec<T>{};
                   for (int64_t j = vecs * W; j < cnt; ++j) tw[j] = tb[j] = 0;
                   for (int64_t r = 0; r < rows; ++r) {
                     const T* x = xp + r * n + j0;
                     const T* g = gp + r * n + j0;
                     const T mean = mp[r], rstd = rp[r];
                     const Vec<T> mv = splat(mean), rv = splat(rstd);
                     for (int64_t v = 0; v < vecs; ++v) {
                       const Vec<T> gv = vload(g + v * W);
                       sw[v] += widen<T>(gv * ((vload(x + v * W) - mv) * rv));
                       sb[v] += widen<T>(gv);
                     }
                     for (int64_t j = vecs * W; j < cnt; ++j) {
                       tw[j] += static_cast<double>(g[j] * ((x[j] - mean) * rstd));
                       tb[j] += static_cast<double>(g[j]);
                     }
                   }
                   for (int64_t v = 0; v < vecs; ++v)
                     for (int64_t l = 0; l < W; ++l) {
                       if (gw) gw[j0 + v * W + l] = static_cast<T>(sw[v][l]);
                       if (gb) gb[j0 + v * W + l] = static_cast<T>(sb[v][l]);
                     }
                   for (int64_t j = vecs * W; j < cnt; ++j) {
                     if (gw) gw[j0 + j] = static_cast<T>(tw[j]);
                     if (gb) gb[j0 + j] = static_cast<T>(tb[j]);
                   }
                 }
               });
}

// The sum over a contiguous run of |x|^p (p finite; the terms formed in T, summed in f64: lanes of T flushed into f64
// lanes as row_sum does), or the max of |x| (p infinite; NaN if any element is NaN).
template <class T>
double run_norm_term(const T* x, int64_t n, double p) {
  constexpr int64_t W = kLanes<T>;
  if (std::isinf(p)) {
    Vec<T> m{}, nan{};
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      const Vec<T> v = vload(x + i), a = v < 0 ? -v : v;
      m = a > m ? a : m;
      nan = v != v ? splat(T(1)) : nan;
    }
    T best = reduce_lanes<T>(m, [](Vec<T> a, Vec<T> b) { return a > b ? a : b; });
    bool any_nan = reduce_lanes<T>(nan, [](Vec<T> a, Vec<T> b) { return a + b; }) != 0;
    for (; i < n; ++i) {
      const T a = std::abs(x[i]);
      any_nan = any_nan || x[i] != x[i];
      best = a > best ? a : best;
    }
    return any_nan ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(best);
  }
  if (p == 2)
    return row_sum<T>(
        n,
        [&](int64_t i) {
          const Vec<T> v = vload(x + i);
          return v * v;
        },
        [&](int64_t i) { return x[i] * x[i]; });
  if (p == 1)
    return row_sum<T>(
        n,
        [&](int64_t i) {
          const Vec<T> v = vload(x + i);
          return v < 0 ? -v : v;
        },
        [&](int64_t i) { return std::abs(x[i]); });
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(static_cast<T>(std::pow(std::abs(x[i]), static_cast<T>(p))));
  return s;
}

// A tensor's term: fixed blocks of kNormBlock elements (parallel when there are several), combined in order, so the
// value does not depend on the number of threads.
constexpr int64_t kNormBlock = 32768;
template <class T>
double tensor_norm_term(const T* x, int64_t n, double p) {
  if (n <= kNormBlock) return run_norm_term(x, n, p);
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> part(static_cast<size_t>(blocks));
  parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      part[static_cast<size_t>(i)] = run_norm_term(x + i * kNormBlock, std::min(kNormBlock, n - i * kNormBlock), p);
  });
  double acc = 0;
  for (double v : part)
    acc =
        std::isinf(p) ? (v != v || acc != acc ? std::numeric_limits<double>::quiet_NaN() : std::max(acc, v)) : acc + v;
  return acc;
}

template <class T>
void scale_run(T* x, int64_t n, T s) {
  constexpr int64_t W = kLanes<T>;
  const Vec<T> sv = splat(s);
  int64_t i = 0;
  for (; i + W <= n; i += W) vstore(x + i, vload(x + i) * sv);
  for (; i < n; ++i) x[i] *= s;
}

}  // namespace

void tensor_list_norm(const ops::TensorListNormCall& c) {
  for (size_t i = 0; i < c.count; ++i) {
    const TensorImpl& t = *c.tensors[i];
    const double v = t.numel == 0            ? 0.0
                     : t.dtype == DType::F32 ? tensor_norm_term(t.ptr<float>(), t.numel, c.norm_type)
                                             : tensor_norm_term(t.ptr<double>(), t.numel, c.norm_type);
    if (c.out->dtype == DType::F64)
      c.out->ptr<double>()[i * c.out->strides[0]] = v;
    else
      c.out->ptr<float>()[i * c.out->strides[0]] = static_cast<float>(v);
  }
}
void tensor_list_scale(const ops::TensorListScaleCall& c) {
  for (size_t i = 0; i < c.count; ++i) {
    TensorImpl& t = *c.tensors[i];
    const int64_t n = t.numel, blocks = (n + kNormBlock - 1) / kNormBlock;
    parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
      const int64_t lo = b * kNormBlock, hi = std::min(n, e * kNormBlock);
      if (t.dtype == DType::F32)
        scale_run(t.ptr<float>() + lo, hi - lo, static_cast<float>(c.scale));
      else
        scale_run(t.ptr<double>() + lo, hi - lo, c.scale);
    });
  }
}

void layer_norm(const TensorImpl& x, const TensorImpl* w, const TensorImpl* b, double eps, int64_t n, TensorImpl& y,
                TensorImpl& mean, TensorImpl& rstd) {
  if (x.dtype == DType::F32) return layer_norm_t<float>(x, w, b, eps, n, y, mean, rstd);
  if (x.dtype == DType::F64) return layer_norm_t<double>(x, w, b, eps, n, y, mean, rstd);
  OXM_FAIL(UnsupportedDType, "layer_norm: dtype ", x.dtype, " is not supported (f32, f64)");
}
void layer_norm_backward(const TensorImpl& x, const TensorImpl& g, const TensorImpl* w, const TensorImpl& mean,
                         const TensorImpl& rstd, int64_t n, TensorImpl& gx, TensorImpl* gw, TensorImpl* gb) {
  if (x.dtype == DType::F32) return layer_norm_backward_t<float>(x, g, w, mean, rstd, n, gx, gw, gb);
  if (x.dtype == DType::F64) return layer_norm_backward_t<double>(x, g, w, mean, rstd, n, gx, gw, gb);
  OXM_FAIL(UnsupportedDType, "layer_norm backward: dtype ", x.dtype, " is not supported (f32, f64)");
}

}  // namespace oxmera::detail::OXM_ISA
