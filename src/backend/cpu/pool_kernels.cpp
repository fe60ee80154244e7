// Max pooling with its indices (torch's return_indices) in one pass over the input, and its backward's scatter.
// Compiled once per ISA level with the other CPU kernels (cpu_kernels.hpp's table): the forward is branch-free
// selects over a run of output columns per kernel tap, which the vectoriser takes; a per-window loop with a
// compare-and-branch per tap mispredicted on half the taps of random data and was slower than the composite.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
// GCC 12 reports its own AVX-512 headers' _mm512_undefined_* operands as maybe-uninitialized once inlined here (a
// known false positive): silenced for this file's intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/parallel.hpp"
#include "ops/fused.hpp"
#include "oxmera/error.hpp"

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

namespace oxmera::detail::OXM_ISA {
namespace {

// One kernel tap over the output columns [z_lo, z_hi) of one output row: the held value and index are replaced
// where the tap's value is greater or NaN (torch's rule). Input column of output z: z * sw + c. SW > 0: that
// stride as a constant and a unit column stride (the vectorised cases); SW = 0: any strides.
template <class T, int SW>
[[gnu::always_inline]] inline void tap_run(const T* __restrict xrow, int64_t s3, int64_t sw, int64_t c, int64_t hw,
                                           int64_t z_lo, int64_t z_hi, T* __restrict best, int64_t* __restrict at) {
  for (int64_t z = z_lo; z < z_hi; ++z) {
    const int64_t w = z * (SW > 0 ? SW : sw) + c;
    const T v = xrow[SW > 0 ? w : w * s3];
    const bool take = (v > best[z]) | (v != v);
    best[z] = take ? v : best[z];
    at[z] = take ? hw + w : at[z];
  }
}

// Without padding every tap of every window is inside the image. Per plane, the taps run one after another, each
// over the whole output plane (l = y * ow + z) with branch-free selects: x's offset and the plane index of window
// l's first tap come from two tables shared by all planes, so the loop is a gather and a select per output, which
// the vectoriser takes over runs of oh * ow. (A loop per window compiled to compare-and-branch per tap, which
// mispredicts on about half the taps of random data, and its select chain is serial; runs over one output row
// are too short to vectorise.)
// One tap over a plane's L outputs (see max_pool2d_unpadded). 32-bit offsets: GCC has no f32 gather with 64-bit
// indices and left the f32 loop scalar.
template <class T>
[[gnu::noinline]] void tap_plane(const T* __restrict plane, const int32_t* __restrict off,
                                 const int32_t* __restrict pos, int32_t toff, int32_t tpos, int64_t L,
                                 T* __restrict best, int64_t* __restrict at) {
  for (int64_t l = 0; l < L; ++l) {
    const T v = plane[off[l] + toff];
    const T b = best[l];
    const bool take = (v > b) | (v != v);
    best[l] = take ? v : b;
    at[l] = take ? static_cast<int64_t>(pos[l] + tpos) : at[l];
  }
}

// A 2 x 2 window in one pass over the plane: the four taps' gathers and selects stay in registers (no rereading
// and rewriting of the held values and indices per tap). d10 / d01: the offsets of tap (1, 0) and (0, 1) in x,
// p10 / p01 the same in the plane's index.
template <class T>
[[gnu::noinline]] void window2x2_plane(const T* __restrict plane, const int32_t* __restrict off,
                                       const int32_t* __restrict pos, int32_t d10, int32_t d01, int32_t p10,
                                       int32_t p01, int64_t L, T* __restrict out, int64_t* __restrict at) {
  for (int64_t l = 0; l < L; ++l) {
    const int32_t o = off[l];
    T best = plane[o];
    int32_t k = pos[l];
    const int32_t taps_off[3] = {d01, d10, d10 + d01}, taps_pos[3] = {p01, p10, p10 + p01};
    for (int t = 0; t < 3; ++t) {
      const T v = plane[o + taps_off[t]];
      const bool take = (v > best) | (v != v);
      best = take ? v : best;
      k = take ? pos[l] + taps_pos[t] : k;
    }
    out[l] = best;
    at[l] = k;
  }
}

#if defined(__AVX512F__)
// The commonest pooling, 2 x 2 windows at stride 2 over f32 rows with unit column stride, written out for
// AVX-512 (the isa_avx512 build): per 16 outputs of a row, two masked loads from each input row, the even and odd
// columns split by permutes (the four taps), three branch-free selects in tap order (greater or NaN: torch's rule,
// so ties keep the first tap) and the taps' plane indices. Against window2x2_plane's four gathers per 16 outputs:
// [64, 8, 28, 28] 312 -> 85 us, [64, 16, 14, 14] 151 -> 56 us (1 thread).
// r0, r1: the window rows; p0: the plane index of r0[0]; W: the plane's row length (indices are h * W + w).
void row2x2_s2_f32(const float* r0, const float* r1, int64_t ow, int32_t p0, int32_t W, float* out, int64_t* at) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t z = 0; z < ow; z += 16) {
    const int64_t n = std::min<int64_t>(ow - z, 16), in = 2 * n;  // outputs, and inputs per row, of this chunk
    const auto m = static_cast<__mmask16>((1u << n) - 1);
    const auto mlo = static_cast<__mmask16>(in >= 16 ? 0xFFFFu : (1u << in) - 1);
    const auto mhi = static_cast<__mmask16>(in <= 16 ? 0u : (1u << (in - 16)) - 1);
    const __m512 a0 = _mm512_maskz_loadu_ps(mlo, r0 + 2 * z), a1 = _mm512_maskz_loadu_ps(mhi, r0 + 2 * z + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(mlo, r1 + 2 * z), b1 = _mm512_maskz_loadu_ps(mhi, r1 + 2 * z + 16);
    __m512 best = _mm512_permutex2var_ps(a0, even, a1);
    __m512i k = _mm512_setzero_si512();
    auto tap = [&](__m512 v, int t) {
      const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      best = _mm512_mask_mov_ps(best, take, v);
      k = _mm512_mask_mov_epi32(k, take, _mm512_set1_epi32(t));
    };
    tap(_mm512_permutex2var_ps(a0, odd, a1), 1);
    tap(_mm512_permutex2var_ps(b0, even, b1), 2);
    tap(_mm512_permutex2var_ps(b0, odd, b1), 3);
    // plane index of tap k of output z + lane: p0 + 2 (z + lane) + (k & 1) + (k >> 1) W
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(p0 + static_cast<int32_t>(2 * z)), even);
    idx = _mm512_add_epi32(idx, _mm512_and_si512(k, _mm512_set1_epi32(1)));
    idx = _mm512_add_epi32(idx, _mm512_mullo_epi32(_mm512_srli_epi32(k, 1), _mm512_set1_epi32(W)));
    _mm512_mask_storeu_ps(out + z, m, best);
    _mm512_mask_storeu_epi64(at + z, static_cast<__mmask8>(m & 0xFFu),
                             _mm512_cvtepi32_epi64(_mm512_castsi512_si256(idx)));
    if (n > 8)
      _mm512_mask_storeu_epi64(at + z + 8, static_cast<__mmask8>(m >> 8),
                               _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(idx, 1)));
  }
}
#endif

template <class T>
void max_pool2d_unpadded(const ops::MaxPool2dCall& call) {
  const TensorImpl& x = *call.x;
  const ConvGeometry& g = call.geometry;
  const int64_t C = x.shape[1], W = x.shape[3];
  const int64_t s0 = x.strides[0], s1 = x.strides[1], s2 = x.strides[2], s3 = x.strides[3];
  const int64_t L = g.oh * g.ow;
  const T* xp = x.ptr<T>();
  T* op = call.out->ptr<T>();
  int64_t* ip = call.indices->ptr<int64_t>();
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1 && s3 == 1) {
      parallel_for(
          x.shape[0] * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(4 * L, 1)), [&](int64_t b, int64_t e) {
            for (int64_t nc = b; nc < e; ++nc) {
              const float* plane = xp + (nc / C) * s0 + (nc % C) * s1;
              for (int64_t y = 0; y < g.oh; ++y)
                row2x2_s2_f32(plane + 2 * y * s2, plane + (2 * y + 1) * s2, g.ow, static_cast<int32_t>(2 * y * W),
                              static_cast<int32_t>(W), op + nc * L + y * g.ow, ip + nc * L + y * g.ow);
            }
          });
      return;
    }
  }
#endif
  std::vector<int32_t> off(static_cast<size_t>(L)), pos(static_cast<size_t>(L));
  for (int64_t y = 0; y < g.oh; ++y)
    for (int64_t z = 0; z < g.ow; ++z) {
      off[static_cast<size_t>(y * g.ow + z)] = static_cast<int32_t>(y * g.sh * s2 + z * g.sw * s3);
      pos[static_cast<size_t>(y * g.ow + z)] = static_cast<int32_t>(y * g.sh * W + z * g.sw);
    }
  const int32_t* __restrict offp = off.data();
  const int32_t* __restrict posp = pos.data();
  parallel_for(
      x.shape[0] * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(L * g.kh * g.kw, 1)), [&](int64_t b, int64_t e) {
        for (int64_t nc = b; nc < e; ++nc) {
          const T* __restrict plane = xp + (nc / C) * s0 + (nc % C) * s1;
          T* __restrict best = op + nc * L;
          int64_t* __restrict at = ip + nc * L;
          if (g.kh == 2 && g.kw == 2) {
            window2x2_plane(plane, offp, posp, static_cast<int32_t>(g.dh * s2), static_cast<int32_t>(g.dw * s3),
                            static_cast<int32_t>(g.dh * W), static_cast<int32_t>(g.dw), L, best, at);
            continue;
          }
          for (int64_t l = 0; l < L; ++l) {
            best[l] = plane[offp[l]];
            at[l] = posp[l];
          }
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = (i == 0 ? 1 : 0); j < g.kw; ++j) {
              const auto toff = static_cast<int32_t>(i * g.dh * s2 + j * g.dw * s3),
                         tpos = static_cast<int32_t>(i * g.dh * W + j * g.dw);
              tap_plane(plane, offp, posp, toff, tpos, L, best, at);
            }
        }
      });
}

template <class T>
__attribute__((flatten)) void max_pool2d_t(const ops::MaxPool2dCall& call) {
  const ConvGeometry& g0 = call.geometry;
  // The unpadded path's 32-bit tables: every offset within a plane (taps included) must fit.
  const TensorImpl& x0 = *call.x;
  const int64_t H0 = x0.shape[2], W0 = x0.shape[3];
  const bool small_plane = x0.strides[2] >= 0 && x0.strides[3] >= 0 && H0 <= INT32_MAX / std::max<int64_t>(W0, 1) &&
                           (H0 - 1) <= (INT32_MAX / 2) / std::max<int64_t>(x0.strides[2], 1) &&
                           (W0 - 1) <= (INT32_MAX / 2) / std::max<int64_t>(x0.strides[3], 1);
  if (g0.ph == 0 && g0.pw == 0 && small_plane) return max_pool2d_unpadded<T>(call);
  const TensorImpl& x = *call.x;
  const ConvGeometry& g = call.geometry;
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t s0 = x.strides[0], s1 = x.strides[1], s2 = x.strides[2], s3 = x.strides[3];
  const int64_t L = g.oh * g.ow;
  const T* xp = x.ptr<T>();
  T* op = call.out->ptr<T>();
  int64_t* ip = call.indices->ptr<int64_t>();
  // Per output row and column, the taps inside the image; per column tap j, the output columns it reaches inside.
  std::vector<TapRange> rows(static_cast<size_t>(g.oh)), cols(static_cast<size_t>(g.ow)),
      reach(static_cast<size_t>(g.kw));
  for (int64_t y = 0; y < g.oh; ++y) rows[static_cast<size_t>(y)] = taps_inside(y * g.sh - g.ph, H, g.kh, g.dh);
  for (int64_t z = 0; z < g.ow; ++z) cols[static_cast<size_t>(z)] = taps_inside(z * g.sw - g.pw, W, g.kw, g.dw);
  for (int64_t j = 0; j < g.kw; ++j) {
    // Output columns z with 0 <= z * sw + j * dw - pw < W: taps_inside with the roles of tap and column swapped.
    const TapRange r = taps_inside(j * g.dw - g.pw, W, g.ow, g.sw);
    reach[static_cast<size_t>(j)] = r;
  }
  const int sw_case = s3 == 1 && g.sw == 1 ? 1 : s3 == 1 && g.sw == 2 ? 2 : 0;
  const T ninf = -std::numeric_limits<T>::infinity();
  parallel_for(N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(L * g.kh * g.kw, 1)), [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      const T* plane = xp + (nc / C) * s0 + (nc % C) * s1;
      for (int64_t y = 0; y < g.oh; ++y) {
        T* best = op + nc * L + y * g.ow;
        int64_t* at = ip + nc * L + y * g.ow;
        const TapRange r = rows[static_cast<size_t>(y)];
        const int64_t h0 = y * g.sh - g.ph;
        // Each window starts at its first in-image tap with -inf held (an all -inf window keeps that index).
        for (int64_t z = 0; z < g.ow; ++z) {
          const TapRange q = cols[static_cast<size_t>(z)];
          best[z] = ninf;
          at[z] = r.lo < r.hi && q.lo < q.hi ? (h0 + r.lo * g.dh) * W + z * g.sw - g.pw + q.lo * g.dw : -1;
        }
        // Taps in window order (row i, then column j), each over every output column it reaches.
        for (int64_t i = r.lo; i < r.hi; ++i) {
          const int64_t h = h0 + i * g.dh;
          const T* xrow = plane + h * s2;
          for (int64_t j = 0; j < g.kw; ++j) {
            const TapRange zr = reach[static_cast<size_t>(j)];
            const int64_t c = j * g.dw - g.pw;
            if (sw_case == 1)
              tap_run<T, 1>(xrow, s3, g.sw, c, h * W, zr.lo, zr.hi, best, at);
            else if (sw_case == 2)
              tap_run<T, 2>(xrow, s3, g.sw, c, h * W, zr.lo, zr.hi, best, at);
            else
              tap_run<T, 0>(xrow, s3, g.sw, c, h * W, zr.lo, zr.hi, best, at);
          }
        }
      }
    }
  });
}

template <class T>
void max_pool2d_backward_t(const ops::MaxPool2dBackwardCall& call) {
  const TensorImpl& xg = *call.grad_x;
  const int64_t N = xg.shape[0], C = xg.shape[1], HW = xg.shape[2] * xg.shape[3];
  const int64_t L = call.indices->shape[2] * call.indices->shape[3];
  const T* gp = call.g->ptr<T>();
  const int64_t* ip = call.indices->ptr<int64_t>();
  T* xp = xg.ptr<T>();
  // One plane per task: its writes come from its own outputs, in increasing position.
  parallel_for(N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(L, 1)), [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      T* plane = xp + nc * HW;
      if (call.zero_first) std::fill(plane, plane + HW, T(0));
      const T* gr = gp + nc * L;
      const int64_t* ix = ip + nc * L;
      for (int64_t l = 0; l < L; ++l)
        if (static_cast<uint64_t>(ix[l]) < static_cast<uint64_t>(HW)) plane[ix[l]] += gr[l];
    }
  });
}

}  // namespace

void max_pool2d(const ops::MaxPool2dCall& c) {
  switch (c.x->dtype) {
    case DType::F32:
      return max_pool2d_t<float>(c);
    case DType::F64:
      return max_pool2d_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "max_pool2d: dtype ", c.x->dtype, " is not supported (f32, f64)");
  }
}
void max_pool2d_backward(const ops::MaxPool2dBackwardCall& c) {
  switch (c.grad_x->dtype) {
    case DType::F32:
      return max_pool2d_backward_t<float>(c);
    case DType::F64:
      return max_pool2d_backward_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "max_pool2d backward: dtype ", c.grad_x->dtype, " is not supported (f32, f64)");
  }
}

}  // namespace oxmera::detail::OXM_ISA
