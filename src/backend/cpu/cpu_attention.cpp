// The fused scaled dot-product attention (ops/fused.hpp, AttentionCall): per (batch * head, block of queries),
// keys in tiles with an online softmax, so only one block x tile of scores exists at a time (never a head's
// full L x S matrix). Accumulates in the input's precision, as torch's CPU flash kernel does.
#include "backend/cpu/cpu_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/parallel.hpp"
#include "oxmera/error.hpp"

namespace oxmera::detail {
namespace {

constexpr int64_t kQueryBlock = 32, kKeyTile = 64;

template <class T>
void attention_t(const ops::AttentionCall& c) {
  const int64_t B = c.q->shape[0], L = c.q->shape[1], E = c.q->shape[2];
  const int64_t S = c.k->shape[1], Ev = c.v->shape[2];
  const T* qp = c.q->ptr<T>();
  const T* kp = c.k->ptr<T>();
  const T* vp = c.v->ptr<T>();
  const T* mp = c.mask ? c.mask->ptr<T>() : nullptr;
  const bool mask_per_batch = c.mask && c.mask->shape[0] == B;
  T* op = c.out->ptr<T>();
  T* lp = c.lse->ptr<T>();
  const T scale = static_cast<T>(c.scale);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t blocks = (L + kQueryBlock - 1) / kQueryBlock;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kQueryBlock * S * (E + Ev)));
  parallel_for(B * blocks, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> kt(static_cast<size_t>(E * kKeyTile));  // the key tile transposed: [E][tile]
    std::vector<T> s(static_cast<size_t>(kQueryBlock * kKeyTile));
    std::vector<T> acc(static_cast<size_t>(kQueryBlock * Ev));
    std::vector<T> mx(kQueryBlock), den(kQueryBlock);
    for (int64_t w = begin; w < end; ++w) {
      const int64_t b = w / blocks, i0 = (w % blocks) * kQueryBlock, ni = std::min(kQueryBlock, L - i0);
      const T* qb = qp + (b * L + i0) * E;
      const T* mb = mp ? mp + (mask_per_batch ? b : 0) * L * S + i0 * S : nullptr;
      std::fill(acc.begin(), acc.begin() + ni * Ev, T(0));
      std::fill(mx.begin(), mx.end(), neg_inf);
      std::fill(den.begin(), den.end(), T(0));
      // Causal: keys past the block's last query are masked for every row of it.
      const int64_t s_end = c.causal ? std::min(S, i0 + ni) : S;
      for (int64_t j0 = 0; j0 < s_end; j0 += kKeyTile) {
        const int64_t nj = std::min(kKeyTile, s_end - j0);
        const T* kb = kp + (b * S + j0) * E;
        for (int64_t j = 0; j < nj; ++j)
          for (int64_t e = 0; e < E; ++e) kt[static_cast<size_t>(e * kKeyTile + j)] = kb[j * E + e];
        for (int64_t i = 0; i < ni; ++i) {
          T* si = s.data() + i * kKeyTile;
          std::fill(si, si + nj, T(0));
          const T* qi = qb + i * E;
          for (int64_t e = 0; e < E; ++e) {
            const T qe = qi[e];
            const T* ke = kt.data() + e * kKeyTile;
            for (int64_t j = 0; j < nj; ++j) si[j] += qe * ke[j];
          }
          T tile_max = neg_inf;
          for (int64_t j = 0; j < nj; ++j) {
            T x = si[j] * scale;
            if (mb) x += mb[i * S + j0 + j];
            if (c.causal && j0 + j > i0 + i) x = neg_inf;
            si[j] = x;
            tile_max = std::max(tile_max, x);
          }
          if (tile_max == neg_inf) continue;  // nothing kept in this tile for row i
          T* ai = acc.data() + i * Ev;
          const T m_new = std::max(mx[i], tile_max);
          if (m_new > mx[i] && mx[i] != neg_inf) {
            const T r = std::exp(mx[i] - m_new);
            den[i] *= r;
            for (int64_t d = 0; d < Ev; ++d) ai[d] *= r;
          }
          mx[i] = m_new;
          T sum = 0;
          for (int64_t j = 0; j < nj; ++j) {
            const T p = std::exp(si[j] - m_new);
            sum += p;
            if (p == T(0)) continue;
            const T* vj = vp + (b * S + j0 + j) * Ev;
            for (int64_t d = 0; d < Ev; ++d) ai[d] += p * vj[d];
          }
          den[i] += sum;
        }
      }
      for (int64_t i = 0; i < ni; ++i) {
        T* oi = op + (b * L + i0 + i) * Ev;
        const T* ai = acc.data() + i * Ev;
        if (mx[i] == neg_inf) {  // every key masked: softmax of all -inf is NaN (torch)
          for (int64_t d = 0; d < Ev; ++d) oi[d] = std::numeric_limits<T>::quiet_NaN();
          lp[b * L + i0 + i] = neg_inf;
          continue;
        }
        const T inv = T(1) / den[i];
        for (int64_t d = 0; d < Ev; ++d) oi[d] = ai[d] * inv;
        lp[b * L + i0 + i] = mx[i] + std::log(den[i]);
      }
    }
  });
}

}  // namespace

bool cpu_attention_supported(const ops::AttentionCall& c) {
  const DType d = c.q->dtype;
  if (d != DType::F32 && d != DType::F64) return false;
  for (const TensorImpl* t :
       {c.q, c.k, c.v, c.mask, static_cast<const TensorImpl*>(c.out), static_cast<const TensorImpl*>(c.lse)})
    if (t && (t->dtype != d || !t->contiguous)) return false;
  return true;
}

void cpu_attention(const ops::AttentionCall& c) {
  switch (c.q->dtype) {
    case DType::F32:
      return attention_t<float>(c);
    case DType::F64:
      return attention_t<double>(c);
    default:
      OXM_FAIL(UnsupportedDType, "scaled_dot_product_attention: dtype ", c.q->dtype, " is not supported (f32, f64)");
  }
}

}  // namespace oxmera::detail
