// scaled_dot_product_attention: the fused CPU kernel against a direct f64 loop and against its composite
// fallback (values, lse, f32 and f64, masks, causal, several key tiles), its gradients against the composite's,
// gradcheck / gradgradcheck, and the typed errors.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "nn/attention_policy.hpp"
#include "ops/fused.hpp"
#include "test_util.hpp"

using namespace oxt;
namespace F = oxmera::nn::functional;
namespace ops = oxmera::ops;
namespace d = oxmera::detail;

namespace {

// Every scaled_dot_product_attention in this binary takes the fused kernels however small the problem (the default
// already does; src/nn/attention_policy.hpp): a test that sets the knob restores this.
const bool kFusedEverywhere = (d::attention_composite_max_score_bytes = 0, true);

Tensor u64(const Shape& s, uint64_t seed) { return (rand(s, seed, DType::F64) * 2.0 - 1.0).requires_grad_(); }

// softmax(scale q k^T + mask) v by loops over [B, L, E] x [B, S, E] x [B, S, Ev] in f64; mask [B, L, S] additive.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                              double scale) {
  const int64_t B = q.shape()[0], L = q.shape()[1], E = q.shape()[2], S = k.shape()[1], Ev = v.shape()[2];
  const auto qv = values(q), kv = values(k), vv = values(v);
  const auto mv = mask.defined() ? values(mask.expand({B, L, S}).contiguous()) : std::vector<double>();
  std::vector<double> out(static_cast<size_t>(B * L * Ev));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double x = 0;
        for (int64_t e = 0; e < E; ++e) x += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
        x *= scale;
        if (!mv.empty()) x += mv[(b * L + i) * S + j];
        if (causal && j > i) x = -INFINITY;
        s[j] = x;
        m = std::max(m, x);
      }
      double den = 0;
      for (auto& x : s) den += (x = std::exp(x - m));
      for (int64_t c = 0; c < Ev; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += s[j] * vv[(b * S + j) * Ev + c];
        out[(b * L + i) * Ev + c] = acc / den;
      }
    }
  return out;
}

struct Case {
  const char* name;
  int64_t B, L, S, E, Ev;
  int mask;  // 0 none, 1 float [L, S], 2 bool [B, 1, S]-like (per batch), 3 causal
};
// E and Ev: some whole vectors of every ISA level (16, 32: read in place), the rest padded by the kernels.
const Case kCases[] = {{"plain", 3, 5, 7, 4, 6, 0},           {"tiles", 2, 70, 150, 8, 5, 0},
                       {"float_mask", 2, 33, 65, 4, 3, 1},    {"bool_mask", 4, 9, 70, 4, 4, 2},
                       {"causal", 2, 70, 70, 8, 8, 3},        {"causal_rect", 2, 40, 90, 3, 2, 3},
                       {"wide", 2, 37, 45, 16, 32, 0},        {"wide_mask", 2, 33, 40, 32, 16, 1},
                       {"wide_causal", 2, 70, 70, 16, 16, 3}, {"wide_bool", 2, 9, 21, 16, 16, 2}};

Tensor mask_for(const Case& c, DType dt, bool as_bool) {
  if (c.mask == 1) return randn({c.L, c.S}, 11, dt);
  if (c.mask == 2) {
    Tensor keep = rand({c.B, 1, c.S}, 12, DType::F64) > 0.3;
    // keep key 0 so that no row is fully masked
    keep = where(ones({c.B, 1, c.S}, DType::F64).cumsum(2) < 1.5, ones({c.B, 1, c.S}, DType::F64), keep).to(DType::U8);
    return as_bool ? keep : where(keep, zeros({}, dt), full({}, -INFINITY, dt));
  }
  return Tensor();
}

TEST(Attention, FusedMatchesDirectLoopF32AndF64) {
  for (DType dt : {DType::F32, DType::F64})
    for (const Case& c : kCases) {
      const Tensor q = randn({c.B, c.L, c.E}, 1, dt), k = randn({c.B, c.S, c.E}, 2, dt),
                   v = randn({c.B, c.S, c.Ev}, 3, dt);
      const Tensor m = mask_for(c, dt, true);
      const Tensor y = F::scaled_dot_product_attention(q, k, v, m, 0.0, c.mask == 3);
      const Tensor madd = c.mask == 2 ? where(m, zeros({}, dt), full({}, -INFINITY, dt)) : m;
      const double sc = 1.0 / std::sqrt(static_cast<double>(c.E));
      const double tl = dt == DType::F64 ? 1e-12 : 2e-5;
      expect_close(values(y), reference(q, k, v, madd, c.mask == 3, sc), tl, tl, std::string(c.name));
      const Tensor yc = F::scaled_dot_product_attention_composite(q, k, v, m, 0.0, c.mask == 3);
      expect_close(values(y), values(yc), tl, tl, std::string(c.name) + " vs composite");
    }
}

// The kernels' 4-d operands [N, H, T, C] for B = N * H problems: contiguous ([B, 1, T, C]), or strided as
// MultiheadAttention passes them (the heads of a wider [N, T, H, C + 3] tensor, read in place; rows not contiguous).
Tensor operand(int64_t B, int64_t T, int64_t C, uint64_t seed, DType dt, bool strided) {
  if (!strided) return randn({B, 1, T, C}, seed, dt);
  return randn({B / 2, T, 2, C + 3}, seed, dt).slice(3, 0, C).permute({0, 2, 1, 3});
}

// The kernels against their composite fallbacks: forward (out, lse) and backward (dq, dk, dv), f32 and f64, every
// case, contiguous and strided operands, an output in [N, L, H, Ev] order.
TEST(Attention, KernelsMatchFallbacksIncludingLseAndBackward) {
  for (DType dt : {DType::F32, DType::F64})
    for (bool strided : {false, true})
      for (const Case& c : kCases) {
        const int64_t B = strided ? 2 * c.B : c.B;  // strided: N = c.B batches of H = 2 heads
        const std::string what = std::string(c.name) + (strided ? " strided " : " ") + dtype_name(dt);
        const Tensor q = operand(B, c.L, c.E, 4, dt, strided), k = operand(B, c.S, c.E, 5, dt, strided),
                     v = operand(B, c.S, c.Ev, 6, dt, strided), g = operand(B, c.L, c.Ev, 7, dt, strided);
        // The mask as the kernels take it: an [N, H, L, S] view, broadcast (stride 0 over the heads, and for the
        // per-batch bool mask over the queries too: MultiheadAttention's key padding) or, with strided operands,
        // materialised.
        Tensor m = mask_for(c, dt, false);
        const int64_t N = strided ? c.B : B, H = strided ? 2 : 1;
        if (m.defined()) {
          m = (m.dim() == 3 ? m.unsqueeze(1) : m).expand({N, H, c.L, c.S});
          if (strided) m = m.contiguous();
        }
        const auto* mi = m.defined() ? m.impl() : nullptr;
        const Shape out_shape = q.shape();
        auto out_like = [&] {  // [N, H, L, Ev] viewed from [N, L, H, Ev]
          return empty({out_shape[0], c.L, out_shape[1], c.Ev}, dt).permute({0, 2, 1, 3});
        };
        Tensor o1 = out_like(), l1 = empty({B, c.L}, dt), o2 = out_like(), l2 = empty({B, c.L}, dt);
        // the kept weights: NaN-filled first, so a position the kernel leaves unwritten shows
        Tensor p1 = full({B, c.L, c.S}, NAN, dt), p2 = full({B, c.L, c.S}, NAN, dt);
        ops::FusedCall kc =
            ops::AttentionCall{q.impl(), k.impl(), v.impl(), mi, c.mask == 3, 0.37, o1.impl(), l1.impl(), p1.impl()};
        ops::FusedCall fc =
            ops::AttentionCall{q.impl(), k.impl(), v.impl(), mi, c.mask == 3, 0.37, o2.impl(), l2.impl(), p2.impl()};
        ASSERT_TRUE(d::cpu_backend().supports(kc)) << what;
        ops::run_fused(kc, Device::cpu());
        ops::run_fused_fallback(fc, Device::cpu());
        const double tl = dt == DType::F64 ? 1e-12 : 5e-6;
        expect_close(values(o1), values(o2), tl, tl, what + " out");
        expect_close(values(l1), values(l2), tl, tl, what + " lse");
        expect_close(values(p1), values(p2), tl, tl, what + " probs");
        {  // the output does not depend on whether the weights are kept
          Tensor o3 = out_like();
          ops::FusedCall plain =
              ops::AttentionCall{q.impl(), k.impl(), v.impl(), mi, c.mask == 3, 0.37, o3.impl(), nullptr};
          ops::run_fused(plain, Device::cpu());
          expect_close(values(o3), values(o1), 0, 0, what + " out without probs");
        }

        std::vector<Tensor> kg, fg;
        for (const Tensor* like : {&q, &k, &v}) {
          kg.push_back(empty(like->shape(), dt));
          fg.push_back(empty(like->shape(), dt));
        }
        ops::FusedCall kb = ops::AttentionBackwardCall{q.impl(), k.impl(), v.impl(),     mi,           c.mask == 3,
                                                       0.37,     g.impl(), kg[0].impl(), kg[1].impl(), kg[2].impl()};
        ops::FusedCall fb = ops::AttentionBackwardCall{q.impl(), k.impl(), v.impl(),     mi,           c.mask == 3,
                                                       0.37,     g.impl(), fg[0].impl(), fg[1].impl(), fg[2].impl()};
        ASSERT_TRUE(d::cpu_backend().supports(kb)) << what;
        ops::run_fused(kb, Device::cpu());
        ops::run_fused_fallback(fb, Device::cpu());
        const double tb = dt == DType::F64 ? 1e-11 : 2e-5;
        for (size_t i = 0; i < 3; ++i)
          expect_close(values(kg[i]), values(fg[i]), tb, tb, what + " grad " + std::to_string(i));
        // Reading the kept weights gives the recomputing kernel's bits (the same code made them), and the fallback
        // reading its own kept weights its values.
        std::vector<Tensor> pg, pf;
        for (const Tensor* like : {&q, &k, &v}) {
          pg.push_back(empty(like->shape(), dt));
          pf.push_back(empty(like->shape(), dt));
        }
        ops::FusedCall kbp =
            ops::AttentionBackwardCall{q.impl(), k.impl(),     v.impl(),     mi,           c.mask == 3, 0.37,
                                       g.impl(), pg[0].impl(), pg[1].impl(), pg[2].impl(), p1.impl()};
        ops::FusedCall fbp =
            ops::AttentionBackwardCall{q.impl(), k.impl(),     v.impl(),     mi,           c.mask == 3, 0.37,
                                       g.impl(), pf[0].impl(), pf[1].impl(), pf[2].impl(), p2.impl()};
        ASSERT_TRUE(d::cpu_backend().supports(kbp)) << what;
        ops::run_fused(kbp, Device::cpu());
        ops::run_fused_fallback(fbp, Device::cpu());
        for (size_t i = 0; i < 3; ++i) {
          expect_close(values(pg[i]), values(kg[i]), 0, 0, what + " grad from probs " + std::to_string(i));
          expect_close(values(pf[i]), values(fg[i]), tb, tb, what + " fallback grad from probs " + std::to_string(i));
        }
      }
}

// Only the wanted gradients are written (null outputs are skipped), and they do not depend on which others are.
TEST(Attention, BackwardKernelWritesOnlyTheWantedGradients) {
  const Tensor q = randn({1, 2, 9, 16}, 1), k = randn({1, 2, 11, 16}, 2), v = randn({1, 2, 11, 16}, 3),
               g = randn({1, 2, 9, 16}, 4);
  Tensor all[3] = {empty(q.shape()), empty(k.shape()), empty(v.shape())};
  ops::FusedCall every = ops::AttentionBackwardCall{q.impl(), k.impl(), v.impl(),      nullptr,       true,
                                                    0.25,     g.impl(), all[0].impl(), all[1].impl(), all[2].impl()};
  ops::run_fused(every, Device::cpu());
  for (int i = 0; i < 3; ++i) {
    Tensor one = full(all[i].shape(), 7.0);
    d::TensorImpl* outs[3] = {nullptr, nullptr, nullptr};
    outs[i] = one.impl();
    ops::FusedCall call = ops::AttentionBackwardCall{q.impl(), k.impl(), v.impl(), nullptr, true,
                                                     0.25,     g.impl(), outs[0],  outs[1], outs[2]};
    ops::run_fused(call, Device::cpu());
    expect_close(values(one), values(all[i]), 0, 0, "grad " + std::to_string(i) + " alone");
  }
}

// Heads read in place from a packed projection (strided 4-d q, k, v) give the composite's values and gradients.
TEST(Attention, StridedHeadsMatchTheComposite) {
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor qkv = randn({3, 13, 3 * 4 * 16}, 1, dt).requires_grad_();
    auto head = [&](int i) { return qkv.slice(2, i * 64, (i + 1) * 64).reshape({3, 13, 4, 16}).transpose(1, 2); };
    const Tensor g = randn({3, 4, 13, 16}, 2, dt);
    const double tl = dt == DType::F64 ? 1e-11 : 2e-5;
    for (bool causal : {false, true}) {
      const Tensor y1 = F::scaled_dot_product_attention(head(0), head(1), head(2), {}, 0.0, causal);
      const Tensor y2 = F::scaled_dot_product_attention_composite(head(0), head(1), head(2), {}, 0.0, causal);
      expect_close(values(y1), values(y2), tl, tl, "values");
      const auto g1 = autograd::grad({(y1 * g).sum()}, {qkv});
      const auto g2 = autograd::grad({(y2 * g).sum()}, {qkv});
      expect_close(values(g1[0]), values(g2[0]), tl, tl, "grad of the packed qkv");
    }
  }
}

TEST(Attention, FullyMaskedRowIsNaNAsTorch) {
  const Tensor q = randn({1, 2, 3}, 1, DType::F64), k = randn({1, 4, 3}, 2, DType::F64),
               v = randn({1, 4, 2}, 3, DType::F64);
  const Tensor keep = from_vector<uint8_t>({0, 0, 0, 0, 0, 1, 0, 1}, {2, 4});
  const auto y = values(F::scaled_dot_product_attention(q, k, v, keep));  // row 0 keeps nothing
  const auto yc = values(F::scaled_dot_product_attention_composite(q, k, v, keep));
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  expect_close(y, yc, 1e-12, 1e-12, "fully masked");
}

TEST(Attention, GradientsMatchCompositeAndGradcheck) {
  for (const Case& c : kCases) {
    auto make = [&](uint64_t s, const Shape& sh) { return randn(sh, s, DType::F64).requires_grad_(); };
    const Tensor q = make(7, {c.B, c.L, c.E}), k = make(8, {c.B, c.S, c.E}), v = make(9, {c.B, c.S, c.Ev});
    const Tensor m = mask_for(c, DType::F64, false);
    const Tensor g = randn({c.B, c.L, c.Ev}, 10, DType::F64);
    const auto g1 =
        autograd::grad({(F::scaled_dot_product_attention(q, k, v, m, 0.0, c.mask == 3) * g).sum()}, {q, k, v});
    const auto g2 = autograd::grad(
        {(F::scaled_dot_product_attention_composite(q, k, v, m, 0.0, c.mask == 3) * g).sum()}, {q, k, v});
    for (size_t i = 0; i < 3; ++i) expect_close(values(g1[i]), values(g2[i]), 1e-10, 1e-10, c.name);
  }
  // gradcheck and gradgradcheck on small problems (4-d, heads), each mask kind
  for (int kind = 0; kind < 4; ++kind) {
    const Tensor q = u64({2, 2, 3, 4}, 21), k = u64({2, 2, 5, 4}, 22), v = u64({2, 2, 5, 3}, 23);
    Tensor m;
    if (kind == 1) m = rand({3, 5}, 24, DType::F64);
    if (kind == 2)
      m = where(ones({1, 5}, DType::F64).cumsum(1) < 1.5, ones({1, 5}, DType::F64),
                rand({2, 1, 1, 5}, 25, DType::F64) > 0.2)
              .to(DType::U8);
    const bool causal = kind == 3;
    auto f = [&](const std::vector<Tensor>& in) {
      return F::scaled_dot_product_attention(in[0], in[1], in[2], m, 0.0, causal, 0.8);
    };
    const std::vector<Tensor> in{q, k, v};
    GradcheckResult r = gradcheck(f, in);
    EXPECT_TRUE(r.ok) << kind << ": " << r.message;
    GradcheckResult r2 = gradgradcheck(f, in);
    EXPECT_TRUE(r2.ok) << kind << ": " << r2.message;
  }
}

TEST(Attention, FloatMaskGradientThroughComposite) {
  const Tensor q = u64({1, 3, 2}, 1), k = u64({1, 4, 2}, 2), v = u64({1, 4, 2}, 3), m = u64({3, 4}, 4);
  auto f = [&](const std::vector<Tensor>& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], in[3]); };
  GradcheckResult r = gradcheck(f, {q, k, v, m});
  EXPECT_TRUE(r.ok) << r.message;
}

// A mask shared by every (batch, head) but with leading 1s, [1, 1, 1, S] (what MultiheadAttention makes of a
// batch-of-one key padding mask), used to fail expanding to [L, S] in the fused path.
TEST(Attention, SharedMaskWithLeadingOnes) {
  const Tensor q = u64({1, 2, 3, 4}, 1), k = u64({1, 2, 5, 4}, 2), v = u64({1, 2, 5, 4}, 3);
  const Tensor m = (rand({1, 1, 1, 5}, 4, DType::F64) - 0.5).detach();
  expect_close(values(F::scaled_dot_product_attention(q, k, v, m)),
               values(F::scaled_dot_product_attention_composite(q, k, v, m)), 1e-12, 1e-12, "fused vs composite");
}

// Masks the kernels read as broadcast views (no [N, H, L, S] copy): per batch over the keys (a key padding mask),
// per head, per key only, plus the forms copied at their own size first (broadcast over the keys; transposed): the
// fused path's values and q, k, v gradients equal the composite's.
TEST(Attention, BroadcastMasksMatchTheComposite) {
  const int64_t N = 2, H = 3, L = 5, S = 7, E = 4;
  const Tensor q = u64({N, H, L, E}, 1), k = u64({N, H, S, E}, 2), v = u64({N, H, S, E}, 3);
  const Tensor masks[] = {(rand({N, 1, 1, S}, 4, DType::F64) - 0.5).detach(),
                          (rand({H, L, S}, 5, DType::F64) - 0.5).detach(), (rand({S}, 6, DType::F64) - 0.5).detach(),
                          (rand({N, 1, L, 1}, 7, DType::F64) - 0.5).detach(),
                          (rand({S, L}, 8, DType::F64) - 0.5).detach().t()};
  for (size_t i = 0; i < std::size(masks); ++i) {
    const std::string what = "mask " + std::to_string(i);
    const Tensor y = F::scaled_dot_product_attention(q, k, v, masks[i]);
    const Tensor yc = F::scaled_dot_product_attention_composite(q, k, v, masks[i]);
    expect_close(values(y), values(yc), 1e-12, 1e-12, what);
    const Tensor up = rand(y.shape(), 9, DType::F64);
    const std::vector<Tensor> g = autograd::grad({(y * up).sum()}, {q, k, v});
    const std::vector<Tensor> gc = autograd::grad({(yc * up).sum()}, {q, k, v});
    for (size_t j = 0; j < 3; ++j) expect_close(values(g[j]), values(gc[j]), 1e-11, 1e-11, what + " grad");
  }
}

// MultiheadAttention's key padding mask reaches the kernels as a broadcast view: a forward with a [N, S] mask
// allocates far less than the [N * H, L, S] mask it used to expand to (8 MiB here).
TEST(Attention, KeyPaddingMaskIsNotExpandedPerHead) {
  const int64_t N = 2, H = 4, L = 512, E = 32;
  nn::MultiheadAttention mha(E, H, {.batch_first = true});
  const Tensor x = randn({N, L, E}, 1);
  const Tensor pad = (rand({N, L}, 2, DType::F64) > 0.8).to(DType::U8);
  NoGradGuard ng;
  const int64_t before = memory_stats().allocated_bytes;
  // The peak is the process's: where earlier tests in the same process (a whole-binary run, as under TSan) already
  // went higher than this test would reach with the expanded mask, it cannot see the rise.
  if (memory_stats().peak_allocated_bytes >= before + (3 << 20))
    GTEST_SKIP() << "the process's allocation peak is already above what this forward could reach";
  const Tensor y = std::get<0>(mha.forward(x, x, x, pad, false));
  const int64_t rise = memory_stats().peak_allocated_bytes - before;
  EXPECT_LT(rise, 3 << 20) << "the forward allocated " << rise << " bytes";
  const Tensor yc = [&] {  // the same through the composite (which materialises the scores, 8 MiB)
    d::attention_composite_max_score_bytes.store(int64_t(1) << 40);
    Tensor r = std::get<0>(mha.forward(x, x, x, pad, false));
    d::attention_composite_max_score_bytes.store(-1);
    return r;
  }();
  expect_close(values(y), values(yc), 2e-5, 2e-5, "fused vs composite");
}

TEST(Attention, DropoutUsesTheGenerator) {
  const Tensor q = randn({2, 6, 4}, 1), k = randn({2, 6, 4}, 2), v = randn({2, 6, 4}, 3);
  Generator g1(5), g2(5);
  const auto a = values(F::scaled_dot_product_attention(q, k, v, {}, 0.5, false, std::nullopt, &g1));
  const auto b = values(F::scaled_dot_product_attention(q, k, v, {}, 0.5, false, std::nullopt, &g2));
  expect_close(a, b, 0, 0, "same seed, same mask");
  const auto plain = values(F::scaled_dot_product_attention(q, k, v));
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs = differs || std::abs(a[i] - plain[i]) > 1e-6;
  EXPECT_TRUE(differs);
}

TEST(Attention, TypedErrorsNameTheShapes) {
  const Tensor q = randn({2, 3, 4}, 1), k = randn({2, 5, 4}, 2), v = randn({2, 5, 6}, 3);
  EXPECT_OXM_ERROR(F::scaled_dot_product_attention(q, randn({2, 5, 3}, 1), v), ShapeMismatch, "[2, 5, 3]");
  EXPECT_OXM_ERROR(F::scaled_dot_product_attention(q, k, randn({2, 4, 6}, 1)), ShapeMismatch, "need one S");
  EXPECT_OXM_ERROR(F::scaled_dot_product_attention(q, randn({3, 5, 4}, 1), v), ShapeMismatch, "leading");
  EXPECT_OXM_ERROR(F::scaled_dot_product_attention(q, k, v, randn({4, 5}, 1)), ShapeMismatch, "attn_mask [4, 5]");
  EXPECT_OXM_ERROR(F::scaled_dot_product_attention(q, k, v, randn({3, 5}, 1, DType::F64)), DTypeMismatch, "attn_mask");
  EXPECT_OXM_ERROR(F::scaled_dot_product_attention(q, k.to(DType::F64), v), DTypeMismatch, "one float dtype");
  EXPECT_OXM_ERROR(F::scaled_dot_product_attention(q, k, v, randn({3, 5}, 1), 0.0, true), InvalidArgument, "is_causal");
  EXPECT_OXM_ERROR(F::scaled_dot_product_attention(q, k, v, {}, 1.0), InvalidArgument, "dropout_p");
}

}  // namespace

// The policy: by default every problem takes the CPU's fused kernels; a problem whose scores take at most
// attention_composite_max_score_bytes takes the composite. Both give the same values and gradients.
// A recorded fused forward keeps the weights P for its backward when they are small (attention_keep_probs_max_bytes):
// they are held by the graph (the live bytes grow by them), the gradients are the recomputing backward's bits, plain
// and packed (MultiheadAttention's self-attention), and an in-place change of an input still fails the backward.
TEST(Attention, KeptWeightsGiveTheRecomputingBackwardsBits) {
  ASSERT_TRUE(kFusedEverywhere);
  const int64_t saved = d::attention_keep_probs_max_bytes;
  for (DType dt : {DType::F32, DType::F64})
    for (bool causal : {false, true}) {
      const Tensor q = randn({2, 3, 37, 16}, 1, dt).requires_grad_(), k = randn({2, 3, 37, 16}, 2, dt).requires_grad_(),
                   v = randn({2, 3, 37, 8}, 3, dt).requires_grad_(), g = randn({2, 3, 37, 8}, 4, dt);
      std::vector<Tensor> grads[2];
      int64_t live[2];
      for (int keep = 0; keep < 2; ++keep) {
        d::attention_keep_probs_max_bytes = keep ? saved : 0;
        const int64_t before = memory_stats().allocated_bytes;
        const Tensor y = F::scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
        live[keep] = memory_stats().allocated_bytes - before;
        grads[keep] = autograd::grad({(y * g).sum()}, {q, k, v});
      }
      d::attention_keep_probs_max_bytes = saved;
      EXPECT_GE(live[1] - live[0], 2 * 3 * 37 * 37 * static_cast<int64_t>(itemsize(dt))) << "the weights were kept";
      for (size_t i = 0; i < 3; ++i)
        expect_close(values(grads[1][i]), values(grads[0][i]), 0, 0, "kept vs recomputed " + std::to_string(i));
    }
  // packed self-attention through MultiheadAttention: the same gradients with and without kept weights
  nn::MultiheadAttention mha(32, 4, {.batch_first = true});
  const Tensor x = randn({3, 21, 32}, 5).requires_grad_();
  const Tensor kpm = rand({3, 21}, 6, DType::F64) > 0.7;  // true: ignore that key
  std::vector<Tensor> grads[2];
  for (int keep = 0; keep < 2; ++keep) {
    d::attention_keep_probs_max_bytes = keep ? saved : 0;
    const Tensor y = std::get<0>(mha.forward(x, x, x, kpm.to(DType::U8), false));
    grads[keep] = autograd::grad({(y * y).sum()}, {x, mha.in_proj_weight});
  }
  d::attention_keep_probs_max_bytes = saved;
  for (size_t i = 0; i < 2; ++i) expect_close(values(grads[1][i]), values(grads[0][i]), 0, 0, "packed, kept");
  // an input changed in place after the forward: the backward fails, kept weights or not
  const Tensor q = randn({1, 2, 5, 16}, 6).requires_grad_(), k = randn({1, 2, 5, 16}, 7), v = randn({1, 2, 5, 16}, 8);
  Tensor kk = k.clone().requires_grad_();
  Tensor kd = kk * 1.0;
  const Tensor y = F::scaled_dot_product_attention(q, kd, v);
  {
    NoGradGuard ng;
    kd.add_(1.0);
  }
  EXPECT_THROW(y.sum().backward(), Error);
}

TEST(Attention, ThePolicyPicksTheCompositeOrTheFusedKernels) {
  ASSERT_TRUE(kFusedEverywhere);
  const int64_t saved = d::attention_composite_max_score_bytes;
  Tensor q = u64({2, 3, 5, 4}, 1), k = u64({2, 3, 7, 4}, 2), v = u64({2, 3, 7, 4}, 3);
  d::attention_composite_max_score_bytes = 2 * 3 * 5 * 7 * 8;  // exactly the scores' bytes: the composite
  Tensor small = F::scaled_dot_product_attention(q, k, v);
  d::attention_composite_max_score_bytes = -1;  // the default
  Tensor fused = F::scaled_dot_product_attention(q, k, v);
  d::attention_composite_max_score_bytes = saved;
  EXPECT_EQ(small.grad_fn_name(), "matmul");  // the composite ends with weights @ v
  EXPECT_EQ(fused.grad_fn_name(), "permute") << "the fused output is written as [N, L, H, Ev] and viewed back";
  expect_close(values(small), values(fused), 1e-12, 1e-12, "composite vs fused");
  const auto g1 = autograd::grad({small.sum()}, {q, k, v}), g2 = autograd::grad({fused.sum()}, {q, k, v});
  for (size_t i = 0; i < 3; ++i) expect_close(values(g1[i]), values(g2[i]), 1e-12, 1e-12, "gradients");
}
