// The fused scaled dot-product attention and its backward on the CPU (ops/fused.hpp, AttentionCall and
// AttentionBackwardCall), compiled once per ISA level. Per (batch * head, block of 32 queries) the scores of the
// block against every key it may see ([32, S], never a head's full [L, S] matrix) are one register-tiled product
// into a per-thread buffer, the softmax runs on those rows in place, and the weighted sum is a second product. The
// backward reads the weights the forward kept (small problems) or recomputes the same rows with the same code (so the
// same bits either way), forms dS = P (dP - rowsum(dP P)) and
// accumulates dq, dk, dv head by head in a fixed order (deterministic; threads take whole heads; dk and dv are held
// transposed, keys along the vectors). The products are small (k = E or a block of queries, n = the keys or E): one
// loop nest of GCC vector types (GCC and clang both take them), 4 to 8 rows x up to 4 vectors of accumulators,
// instead of a BLAS call per head whose packing dominates at these sizes; the softmax works in whole vectors with
// shuffle-tree reductions (measured: docs/LIMITATIONS.md, "Fused attention on the CPU").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/parallel.hpp"
#include "backend/cpu/simd.hpp"
#include "backend/cpu/vec_math.hpp"
#include "ops/fused.hpp"
#include "oxmera/error.hpp"

#ifndef OXM_ISA
#define OXM_ISA isa_base
#endif

namespace oxmera::detail::OXM_ISA {
namespace {

using namespace simd;

// How many vectors of a row one micro-tile holds at most (kRowsFor rows x kMaxVecs accumulators plus the row of B
// stay in registers: 32 zmm, 16 ymm / xmm).
constexpr int kMaxVecs = kVecBytes == 64 ? 4 : 2;
constexpr int64_t kQueryBlock = 32;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C[R, NV vectors] (= or +=) sum over p < k of A(r, p) B[p, :], with A(r, p) = a[r * ars + p * acs], B's rows ldb
// apart and C's rows ldc apart.
template <class T, int R, int NV, bool kAdd>
[[gnu::always_inline]] inline void micro_tile(int64_t k, const T* a, int64_t ars, int64_t acs, const T* b, int64_t ldb,
                                              T* c, int64_t ldc) {
  constexpr int64_t W = kLanes<T>;
  Vec<T> acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = kAdd ? vload(c + r * ldc + v * W) : Vec<T>{};
  for (int64_t p = 0; p < k; ++p) {
    Vec<T> bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = vload(b + p * ldb + v * W);
    for (int r = 0; r < R; ++r) {
      const T s = a[r * ars + p * acs];
      for (int v = 0; v < NV; ++v) acc[r][v] += s * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) vstore(c + r * ldc + v * W, acc[r][v]);
}

// Rows per micro-tile for NV vectors of accumulators: enough independent FMA chains to hide their latency (8 with one
// vector), within the register file (32 zmm: 6 x 2, 4 x 4; 16 ymm / xmm: 4 x 2).
template <int NV>
constexpr int kRowsFor = NV == 1 ? 8 : (kVecBytes == 64 && NV == 2 ? 6 : 4);

// The last rem < R rows of a tile_rows call.
template <class T, int NV, bool kAdd, int R>
[[gnu::always_inline]] inline void tail_rows(int64_t rem, int64_t k, const T* a, int64_t ars, int64_t acs, const T* b,
                                             int64_t ldb, T* c, int64_t ldc) {
  if constexpr (R > 0) {
    if (rem == R) return micro_tile<T, R, NV, kAdd>(k, a, ars, acs, b, ldb, c, ldc);
    tail_rows<T, NV, kAdd, R - 1>(rem, k, a, ars, acs, b, ldb, c, ldc);
  }
}

template <class T, int NV, bool kAdd>
void tile_rows(int64_t m, int64_t k, const T* a, int64_t ars, int64_t acs, const T* b, int64_t ldb, T* c, int64_t ldc) {
  constexpr int R = kRowsFor<NV>;
  int64_t i = 0;
  for (; i + R <= m; i += R) micro_tile<T, R, NV, kAdd>(k, a + i * ars, ars, acs, b, ldb, c + i * ldc, ldc);
  tail_rows<T, NV, kAdd, R - 1>(m - i, k, a + i * ars, ars, acs, b, ldb, c + i * ldc, ldc);
}

// C[m, n] (= or +=) A B over k, n a multiple of the vector width (the callers pad B and C).
template <class T, bool kAdd>
void small_gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t ars, int64_t acs, const T* b, int64_t ldb, T* c,
                int64_t ldc) {
  constexpr int64_t W = kLanes<T>;
  int64_t j = 0;
  for (; j + kMaxVecs * W <= n; j += kMaxVecs * W)
    tile_rows<T, kMaxVecs, kAdd>(m, k, a, ars, acs, b + j, ldb, c + j, ldc);
  if constexpr (kMaxVecs > 2) {
    for (; j + 2 * W <= n; j += 2 * W) tile_rows<T, 2, kAdd>(m, k, a, ars, acs, b + j, ldb, c + j, ldc);
  }
  for (; j < n; j += W) tile_rows<T, 1, kAdd>(m, k, a, ars, acs, b + j, ldb, c + j, ldc);
}

// Rows a and b of a block exchange their off-diagonal half-groups of width h: a keeps its lanes l with l & h == 0
// and takes b's lanes l - h for the others; b gets a's lanes l + h and keeps the rest.
template <class T, int h, size_t... I>
[[gnu::always_inline]] inline void exchange_halves(Vec<T>& a, Vec<T>& b, std::index_sequence<I...>) {
  constexpr int W = static_cast<int>(kLanes<T>);
  const Vec<T> x = a, y = b;
  a = __builtin_shufflevector(x, y, ((I & h) == 0 ? static_cast<int>(I) : static_cast<int>(W + I - h))...);
  b = __builtin_shufflevector(x, y, ((I & h) == 0 ? static_cast<int>(I + h) : static_cast<int>(W + I))...);
}
// A W x W block transposed in registers: log2(W) stages, each exchanging the half-groups of width h between rows r
// and r + h (fully unrolled, so the block stays in registers).
template <class T, int h = static_cast<int>(kLanes<T>) / 2>
[[gnu::always_inline]] inline void transpose_block(Vec<T> (&v)[kLanes<T>]) {
  if constexpr (h >= 1) {
#pragma GCC unroll 16
    for (int r = 0; r < kLanes<T>; ++r)
      if ((r & h) == 0)
        exchange_halves<T, h>(v[r], v[r + h], std::make_index_sequence<static_cast<size_t>(kLanes<T>)>{});
    transpose_block<T, h / 2>(v);
  }
}

// dst[c, r] = src[r, c] (src rows `src_row` apart) for r < rows, c < cols; dst rows ld apart, with kZeroPad zero
// past `rows` up to ld. Whole W x W blocks go through registers; the edges are copied one by one.
template <class T, bool kZeroPad = true>
void transpose_padded(const T* src, int64_t src_row, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  constexpr int64_t W = kLanes<T>;
  const int64_t rows_w = rows / W * W, cols_w = cols / W * W;
  for (int64_t r0 = 0; r0 < rows_w; r0 += W)
    for (int64_t c0 = 0; c0 < cols_w; c0 += W) {
      Vec<T> v[W];
#pragma GCC unroll 16
      for (int64_t i = 0; i < W; ++i) v[i] = vload(src + (r0 + i) * src_row + c0);
      transpose_block<T>(v);
#pragma GCC unroll 16
      for (int64_t i = 0; i < W; ++i) vstore(dst + (c0 + i) * ld + r0, v[i]);
    }
  for (int64_t c = 0; c < cols; ++c) {
    T* d = dst + c * ld;
    for (int64_t r = c < cols_w ? rows_w : 0; r < rows; ++r) d[r] = src[r * src_row + c];
    if constexpr (kZeroPad) std::fill(d + rows, d + ld, T(0));
  }
}
// dst rows ld apart (ld >= cols) = src rows of `cols` (src_row apart), zero past them.
template <class T>
void copy_padded(const T* src, int64_t src_row, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * src_row, src + r * src_row + cols, dst + r * ld);
    std::fill(dst + r * ld + cols, dst + (r + 1) * ld, T(0));
  }
}

// A 4-d operand [N, H, rows, cols] with a unit stride along cols: the rows of batch*head b start at
// base + (b / H) sN + (b % H) sH and are `row` apart.
template <class T>
struct View {
  T* base = nullptr;
  int64_t H = 1, sN = 0, sH = 0, row = 0;
  T* rows_of(int64_t b) const { return base + (b / H) * sN + (b % H) * sH; }
};
template <class T>
View<T> view_of(const TensorImpl* t) {
  View<T> v;
  if (!t) return v;
  v.base = const_cast<T*>(t->ptr<T>());
  v.H = t->shape[1];
  v.sN = t->strides[0];
  v.sH = t->strides[1];
  v.row = t->strides[2];
  return v;
}

// One head's problem: rows of q, k, v (and the mask) for batch*head b, with the padded sizes.
template <class T>
struct Head {
  int64_t L, S, E, Ev, s_pad, e_pad, ev_pad;
  const T* q;
  const T* k;
  const T* v;
  int64_t q_row, k_row, v_row;
  const T* mask;  // this head's [L, S] additive rows (mask_row apart; 0: one row for every query), or null
  int64_t mask_row;
  bool causal;
  T scale;
};

template <class T>
Head<T> head_of(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v, const TensorImpl* mask, bool causal,
                double scale, int64_t b) {
  Head<T> h{};
  h.L = q.shape[2];
  h.E = q.shape[3];
  h.S = k.shape[2];
  h.Ev = v.shape[3];
  h.s_pad = round_up(h.S, kLanes<T>);
  h.e_pad = round_up(h.E, kLanes<T>);
  h.ev_pad = round_up(h.Ev, kLanes<T>);
  const View<T> qv = view_of<T>(&q), kv = view_of<T>(&k), vv = view_of<T>(&v);
  h.q = qv.rows_of(b);
  h.k = kv.rows_of(b);
  h.v = vv.rows_of(b);
  h.q_row = qv.row;
  h.k_row = kv.row;
  h.v_row = vv.row;
  if (mask) {  // a broadcast view: stride 0 over the batches or heads it is shared by
    const View<T> mv = view_of<T>(mask);
    h.mask = mv.rows_of(b);
    h.mask_row = mv.row;
  }
  h.causal = causal;
  h.scale = static_cast<T>(scale);
  return h;
}

// Row r's reduction in lane r of one vector, for kLanes rows at once: the rows' lane vectors are combined pairwise
// by exchanging half-groups (exchange_halves) and applying op, W - 1 steps in all, independent of each other, instead
// of a log2(W)-deep shuffle chain per row that the next step of that row waits for.
template <class T, int h = static_cast<int>(kLanes<T>) / 2, class Op>
[[gnu::always_inline]] inline Vec<T> reduce_rows(Vec<T> (&v)[kLanes<T>], Op op) {
  if constexpr (h >= 1) {
#pragma GCC unroll 16
    for (int r = 0; r < h; ++r) {
      Vec<T> a = v[r], b = v[r + h];
      exchange_halves<T, h>(a, b, std::make_index_sequence<static_cast<size_t>(kLanes<T>)>{});
      v[r] = op(a, b);
    }
    return reduce_rows<T, h / 2>(v, op);
  } else {
    return v[0];
  }
}

// The softmax rows of one query block in place: row i of `sc` (ld apart, n_pad columns computed) holds the raw
// products q_i . k_j; on return it holds P_ij = softmax_j(scale q_i . k_j + mask_ij) for j < n_pad, 0 for masked
// keys and the padding, and a fully masked row is all NaN (torch's softmax of all -inf). lse (may be null) gets
// each row's logsumexp (-inf for a fully masked row). Whole vectors throughout; only the one vector holding a
// row's last visible key is assembled lane by lane. Rows go in groups of W: their maxima and sums are reduced
// together (reduce_rows) and the group's reciprocals are one vector division.
template <class T>
void softmax_rows(const Head<T>& h, int64_t i0, int64_t ni, int64_t s_eff, int64_t n_pad, T* sc, int64_t ld, T* lse) {
  constexpr int64_t W = kLanes<T>;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Vec<T> neg_inf = Vec<T>{} + kNegInf;
  const LaneIndex<T> iota = lane_iota<T>();
  for (int64_t g0 = 0; g0 < ni; g0 += W) {
    const int64_t gn = std::min(W, ni - g0);
    Vec<T> part[W];
    for (int64_t i = 0; i < gn; ++i) {
      T* row = sc + (g0 + i) * ld;
      const int64_t qi = i0 + g0 + i;
      const int64_t kept = h.causal ? std::min(s_eff, qi + 1) : s_eff;  // keys [0, kept) may count
      const T* mrow = h.mask ? h.mask + qi * h.mask_row : nullptr;
      const int64_t whole = kept / W * W;
      Vec<T> lane_max = neg_inf;  // a NaN score never wins here; its exp makes the row NaN below
      int64_t j = 0;
      for (; j < whole; j += W) {
        Vec<T> x = vload(row + j) * h.scale;
        if (mrow) x += vload(mrow + j);
        vstore(row + j, x);
        lane_max = x > lane_max ? x : lane_max;
      }
      if (j < kept) {  // the partial vector (inside the buffer's row): lanes past `kept` are masked
        Vec<T> x = vload(row + j) * h.scale;
        if (mrow) {
          if (j + W <= h.S) {
            x += vload(mrow + j);
          } else {
            T m[W] = {};
            std::copy(mrow + j, mrow + h.S, m);
            x += vload(m);
          }
        }
        x = iota < static_cast<LaneInt<T>>(kept - j) ? x : neg_inf;
        vstore(row + j, x);
        lane_max = x > lane_max ? x : lane_max;
        j += W;
      }
      for (; j < n_pad; j += W) vstore(row + j, neg_inf);
      part[i] = lane_max;
    }
    for (int64_t i = gn; i < W; ++i) part[i] = neg_inf;
    const Vec<T> mx = reduce_rows<T>(part, [](Vec<T> a, Vec<T> b) { return a > b ? a : b; });
    for (int64_t i = 0; i < gn; ++i) {
      T* row = sc + (g0 + i) * ld;
      const T m = mx[i];
      if (m == kNegInf) {  // fully masked: NaN, as torch's softmax of all -inf
        std::fill(row, row + n_pad, std::numeric_limits<T>::quiet_NaN());
        part[i] = Vec<T>{} + T(1);
        continue;
      }
      for (int64_t t = 0; t < n_pad; ++t) row[t] = vm::exp(row[t] - m);  // vectorised; masked keys give 0
      Vec<T> lane_sum = Vec<T>{};
      for (int64_t t = 0; t < n_pad; t += W) lane_sum += vload(row + t);
      part[i] = lane_sum;
    }
    for (int64_t i = gn; i < W; ++i) part[i] = Vec<T>{} + T(1);
    const Vec<T> sums = reduce_rows<T>(part, [](Vec<T> a, Vec<T> b) { return a + b; });
    const Vec<T> inv = T(1) / sums;
    if (lse)
      for (int64_t i = 0; i < gn; ++i) lse[g0 + i] = mx[i] == kNegInf ? kNegInf : mx[i] + std::log(sums[i]);
    for (int64_t i = 0; i < gn; ++i) {
      if (mx[i] == kNegInf) continue;
      T* row = sc + (g0 + i) * ld;
      const Vec<T> f = Vec<T>{} + inv[i];
      for (int64_t t = 0; t < n_pad; t += W) vstore(row + t, vload(row + t) * f);
    }
  }
}

// The keys a query block sees: all S, or with the causal mask those up to its last query.
int64_t keys_seen(bool causal, int64_t S, int64_t i0, int64_t ni) { return causal ? std::min(S, i0 + ni) : S; }

template <class T>
void attention_t(const ops::AttentionCall& c) {
  const int64_t B = c.q->shape[0] * c.q->shape[1], L = c.q->shape[2];
  const int64_t blocks = (L + kQueryBlock - 1) / kQueryBlock;
  const Head<T> h0 = head_of<T>(*c.q, *c.k, *c.v, c.mask, c.causal, c.scale, 0);
  const View<T> out = view_of<T>(c.out);
  const int64_t work = kQueryBlock * h0.S * (h0.E + h0.Ev);
  parallel_for(B * blocks, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work)), [&](int64_t begin, int64_t end) {
    // kt: the head's keys transposed [E][s_pad]; vp: its values padded [S][ev_pad] and ob: the block's output rows
    // padded (when Ev is not a whole number of vectors); sc: one block's score rows.
    const bool pad_v = h0.ev_pad != h0.Ev, pad_out = pad_v;
    std::vector<T> kt(static_cast<size_t>(h0.E * h0.s_pad)), vp(pad_v ? static_cast<size_t>(h0.S * h0.ev_pad) : 0),
        sc(static_cast<size_t>(kQueryBlock * h0.s_pad)), ob(pad_out ? static_cast<size_t>(kQueryBlock * h0.ev_pad) : 0);
    int64_t loaded = -1;
    for (int64_t w = begin; w < end; ++w) {
      const int64_t b = w / blocks, i0 = (w % blocks) * kQueryBlock, ni = std::min(kQueryBlock, L - i0);
      const Head<T> h = head_of<T>(*c.q, *c.k, *c.v, c.mask, c.causal, c.scale, b);
      if (b != loaded) {
        transpose_padded(h.k, h.k_row, h.S, h.E, kt.data(), h.s_pad);
        if (pad_v) copy_padded(h.v, h.v_row, h.S, h.Ev, vp.data(), h.ev_pad);
        loaded = b;
      }
      const int64_t s_eff = keys_seen(h.causal, h.S, i0, ni), n_pad = round_up(s_eff, kLanes<T>);
      // The kept weights' rows take the scores directly where S is whole vectors (no padding to add); otherwise the
      // block's rows are copied out after the softmax.
      T* prows = c.probs ? c.probs->ptr<T>() + (b * L + i0) * h.S : nullptr;
      const bool direct = prows && h.S == h.s_pad;
      T* scr = direct ? prows : sc.data();
      const int64_t sld = direct ? h.S : h.s_pad;
      small_gemm<T, false>(ni, n_pad, h.E, h.q + i0 * h.q_row, h.q_row, 1, kt.data(), h.s_pad, scr, sld);
      softmax_rows(h, i0, ni, s_eff, n_pad, scr, sld, c.lse ? c.lse->ptr<T>() + b * L + i0 : nullptr);
      const T* vrows = pad_v ? vp.data() : h.v;
      const int64_t vld = pad_v ? h.ev_pad : h.v_row;
      T* orows = out.rows_of(b) + i0 * out.row;
      if (!pad_out) {
        small_gemm<T, false>(ni, h.Ev, s_eff, scr, sld, 1, vrows, vld, orows, out.row);
      } else {
        small_gemm<T, false>(ni, h.ev_pad, s_eff, scr, sld, 1, vrows, vld, ob.data(), h.ev_pad);
        for (int64_t i = 0; i < ni; ++i)
          std::copy(ob.data() + i * h.ev_pad, ob.data() + i * h.ev_pad + h.Ev, orows + i * out.row);
      }
      if (prows) {  // the keys past the block's computed columns (a causal block's later keys) weigh 0
        const int64_t done = std::min(n_pad, h.S);
        for (int64_t i = 0; i < ni; ++i) {
          T* row = prows + i * h.S;
          if (!direct) std::copy(sc.data() + i * h.s_pad, sc.data() + i * h.s_pad + done, row);
          std::fill(row + done, row + h.S, T(0));
        }
      }
    }
  });
}

template <class T>
void attention_backward_t(const ops::AttentionBackwardCall& c) {
  const int64_t B = c.q->shape[0] * c.q->shape[1], L = c.q->shape[2];
  const Head<T> h0 = head_of<T>(*c.q, *c.k, *c.v, c.mask, c.causal, c.scale, 0);
  const View<T> gv = view_of<T>(c.g), gq = view_of<T>(c.grad_q), gk = view_of<T>(c.grad_k), gvv = view_of<T>(c.grad_v);
  const int64_t work = L * h0.S * (h0.E + h0.Ev);
  parallel_for(B, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, work)), [&](int64_t begin, int64_t end) {
    const int64_t S = h0.S, E = h0.E, Ev = h0.Ev, s_pad = h0.s_pad, e_pad = h0.e_pad;
    // kt [E][s_pad] and vt [Ev][s_pad]: keys and values transposed (the products q k^T and g v^T); kp [S][e_pad]:
    // keys padded (dS k, when E is not whole vectors); dkt [E][s_pad], dvt [Ev][s_pad]: the head's key and value
    // gradients transposed, accumulated over its query blocks with the keys along the vectors (the wide dim); sc: P,
    // ds: dP then dS; dq: a block's query gradient.
    std::vector<T> kt(c.probs ? 0 : static_cast<size_t>(E * s_pad)), vt(static_cast<size_t>(Ev * s_pad)),
        kp(e_pad != E ? static_cast<size_t>(S * e_pad) : 0), dkt(static_cast<size_t>(E * s_pad)),
        dvt(static_cast<size_t>(Ev * s_pad)), sc(static_cast<size_t>(kQueryBlock * s_pad)),
        ds(static_cast<size_t>(kQueryBlock * s_pad)), dq(static_cast<size_t>(kQueryBlock * e_pad));
    for (int64_t b = begin; b < end; ++b) {
      const Head<T> h = head_of<T>(*c.q, *c.k, *c.v, c.mask, c.causal, c.scale, b);
      const T* g = gv.rows_of(b);
      if (!c.probs) transpose_padded(h.k, h.k_row, S, E, kt.data(), s_pad);
      transpose_padded(h.v, h.v_row, S, Ev, vt.data(), s_pad);
      // key rows used in place where they are whole vectors; copied into a padded buffer otherwise
      const bool pad_e = e_pad != E;
      if (pad_e) copy_padded(h.k, h.k_row, S, E, kp.data(), e_pad);
      const T* krows = pad_e ? kp.data() : h.k;
      const int64_t kld = pad_e ? e_pad : h.k_row;
      std::fill(dkt.begin(), dkt.end(), T(0));
      std::fill(dvt.begin(), dvt.end(), T(0));
      for (int64_t i0 = 0; i0 < L; i0 += kQueryBlock) {
        const int64_t ni = std::min(kQueryBlock, L - i0);
        const int64_t s_eff = keys_seen(h.causal, S, i0, ni), n_pad = round_up(s_eff, kLanes<T>);
        const T* qrows = h.q + i0 * h.q_row;
        const T* grows = g + i0 * gv.row;
        // P: the forward's kept rows (read in place where S is whole vectors), or recomputed as the forward computed
        // it (the same code on the same operands: the same bits)
        const T* p_rows = sc.data();
        int64_t pld = s_pad;
        if (c.probs) {
          const T* kept = c.probs->ptr<T>() + (b * L + i0) * S;
          if (S == s_pad) {
            p_rows = kept;
            pld = S;
          } else {
            copy_padded(kept, S, ni, S, sc.data(), s_pad);
          }
        } else {
          small_gemm<T, false>(ni, n_pad, E, qrows, h.q_row, 1, kt.data(), s_pad, sc.data(), s_pad);
          softmax_rows<T>(h, i0, ni, s_eff, n_pad, sc.data(), s_pad, nullptr);
        }
        // dP = g v^T, then dS = P (dP - rowsum(dP P)) in place
        small_gemm<T, false>(ni, n_pad, Ev, grows, gv.row, 1, vt.data(), s_pad, ds.data(), s_pad);
        for (int64_t i = 0; i < ni; ++i) {
          const T* p = p_rows + i * pld;
          T* d = ds.data() + i * s_pad;
          Vec<T> lanes = Vec<T>{};
          for (int64_t j = 0; j < n_pad; j += kLanes<T>) lanes += vload(p + j) * vload(d + j);
          const T dot = reduce_lanes<T>(lanes, [](Vec<T> a, Vec<T> b) { return a + b; });
          for (int64_t j = 0; j < n_pad; j += kLanes<T>) vstore(d + j, vload(p + j) * (vload(d + j) - dot));
        }
        // dv^T += g^T P and dk^T += q^T dS (A: the block's g / q rows read transposed in place; the columns past
        // the visible keys add zeros)
        small_gemm<T, true>(Ev, n_pad, ni, grows, 1, gv.row, p_rows, pld, dvt.data(), s_pad);
        small_gemm<T, true>(E, n_pad, ni, qrows, 1, h.q_row, ds.data(), s_pad, dkt.data(), s_pad);
        if (c.grad_q) {
          small_gemm<T, false>(ni, e_pad, s_eff, ds.data(), s_pad, 1, krows, kld, dq.data(), e_pad);
          T* rows = gq.rows_of(b) + i0 * gq.row;
          for (int64_t i = 0; i < ni; ++i)
            for (int64_t e = 0; e < E; ++e) rows[i * gq.row + e] = dq[static_cast<size_t>(i * e_pad + e)] * h.scale;
        }
      }
      if (c.grad_k) {
        const Vec<T> sv = Vec<T>{} + h.scale;
        for (size_t t = 0; t < dkt.size(); t += kLanes<T>) vstore(dkt.data() + t, vload(dkt.data() + t) * sv);
        transpose_padded<T, false>(dkt.data(), s_pad, E, S, gk.rows_of(b), gk.row);
      }
      if (c.grad_v) transpose_padded<T, false>(dvt.data(), s_pad, Ev, S, gvv.rows_of(b), gvv.row);
    }
  });
}

}  // namespace

void attention(const ops::AttentionCall& c) {
  switch (c.q->dtype) {
    case DType::F32:
      return attention_t<float>(c);
    case DType::F64:
      return attention_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "scaled_dot_product_attention: dtype ", c.q->dtype, " is not supported (f32, f64)");
  }
}

void attention_backward(const ops::AttentionBackwardCall& c) {
  switch (c.q->dtype) {
    case DType::F32:
      return attention_backward_t<float>(c);
    case DType::F64:
      return attention_backward_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "scaled_dot_product_attention backward: dtype ", c.q->dtype,
               " is not supported (f32, f64)");
  }
}

}  // namespace oxmera::detail::OXM_ISA
