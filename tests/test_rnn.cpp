// Recurrent layers (nn/rnn.hpp): the fused LSTM and GRU cells against their composite fallbacks (values and gradients,
// f32 and f64), gradcheck / gradgradcheck of the cell and of RNN / LSTM / GRU in f64 (2 layers, bidirectional,
// batch_first, initial states), shapes, parameter names, and the typed errors. torch parity: tests/rnn_torch.
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ops/fused.hpp"
#include "test_util.hpp"

using namespace oxt;
namespace ops = oxmera::ops;

namespace {

double tol(DType t) { return t == DType::F64 ? 1e-12 : 2e-6; }

TEST(RnnFused, LstmCellKernelMatchesTheFallback) {
  ASSERT_STREQ(ops::fused_op_name(ops::FusedOp::LstmCell), "lstm_cell");
  for (DType dt : {DType::F32, DType::F64})
    for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {16, 64}}) {
      const std::string what =
          std::string(dt == DType::F64 ? "f64" : "f32") + " B=" + std::to_string(B) + " H=" + std::to_string(H);
      Tensor gates = randn({B, 4 * H}, 1, dt) * 2.0, cp = randn({B, H}, 2, dt);
      Tensor a1 = empty({B, 4 * H}, dt), h1 = empty({B, H}, dt), c1 = empty({B, H}, dt);
      Tensor a2 = empty({B, 4 * H}, dt), h2 = empty({B, H}, dt), c2 = empty({B, H}, dt);
      ops::FusedCall k = ops::LstmCellCall{gates.impl(), cp.impl(), B, H, a1.impl(), h1.impl(), c1.impl()};
      ops::FusedCall f = ops::LstmCellCall{gates.impl(), cp.impl(), B, H, a2.impl(), h2.impl(), c2.impl()};
      ASSERT_TRUE(ops::fused_supported(k, Device::cpu()));
      ops::run_fused(k, Device::cpu());
      ops::run_fused_fallback(f, Device::cpu());
      expect_close(values(a2), values(a1), tol(dt), tol(dt), "acts " + what);
      expect_close(values(h2), values(h1), tol(dt), tol(dt), "h " + what);
      expect_close(values(c2), values(c1), tol(dt), tol(dt), "c " + what);
      Tensor gh = randn({B, H}, 3, dt), gc = randn({B, H}, 4, dt);
      for (int which = 0; which < 3; ++which) {  // both seeds, only gh, only gc
        const oxmera::detail::TensorImpl* ghp = which == 2 ? nullptr : gh.impl();
        const oxmera::detail::TensorImpl* gcp = which == 1 ? nullptr : gc.impl();
        Tensor d1 = empty({B, 4 * H}, dt), p1 = empty({B, H}, dt), d2 = empty({B, 4 * H}, dt), p2 = empty({B, H}, dt);
        ops::FusedCall kb =
            ops::LstmCellBackwardCall{a1.impl(), cp.impl(), c1.impl(), ghp, gcp, B, H, d1.impl(), p1.impl()};
        ops::FusedCall fb =
            ops::LstmCellBackwardCall{a1.impl(), cp.impl(), c1.impl(), ghp, gcp, B, H, d2.impl(), p2.impl()};
        ops::run_fused(kb, Device::cpu());
        ops::run_fused_fallback(fb, Device::cpu());
        expect_close(values(d2), values(d1), 5 * tol(dt), 5 * tol(dt), "grad gates " + what);
        expect_close(values(p2), values(p1), 5 * tol(dt), 5 * tol(dt), "grad c_prev " + what);
      }
    }
}

TEST(RnnFused, LstmCellGatesGradcheckAndGradgradcheck) {
  Tensor gates = (randn({3, 8}, 5, DType::F64) * 1.5).requires_grad_(true);
  Tensor cp = randn({3, 2}, 6, DType::F64).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& in) {
    auto [h, c] = nn::lstm_cell_gates(in[0], in[1]);
    return cat({h, c * 0.7}, 1);
  };
  GradcheckResult r = gradcheck(f, {gates, cp});
  EXPECT_TRUE(r.ok) << r.message;
  GradcheckResult rr = gradgradcheck(f, {gates, cp});
  EXPECT_TRUE(rr.ok) << rr.message;
  // Only h used: c's gradient seed is absent.
  auto fh = [](const std::vector<Tensor>& in) { return std::get<0>(nn::lstm_cell_gates(in[0], in[1])); };
  GradcheckResult rh = gradcheck(fh, {gates, cp});
  EXPECT_TRUE(rh.ok) << rh.message;
}

// The two-summand form (input projection + recurrent product added in the kernel): the CPU kernel against the
// fallback, values and gradients equal to the one-summand form on the sum, and first and second derivatives by
// finite differences.
TEST(RnnFused, LstmCellWithTwoSummandsMatchesTheSum) {
  for (DType dt : {DType::F32, DType::F64}) {
    const int64_t B = 3, H = 5;
    Tensor gx = randn({B, 4 * H}, 11, dt) * 1.5, gh = randn({B, 4 * H}, 12, dt), cp = randn({B, H}, 13, dt);
    Tensor a1 = empty({B, 4 * H}, dt), h1 = empty({B, H}, dt), c1 = empty({B, H}, dt);
    Tensor a2 = empty({B, 4 * H}, dt), h2 = empty({B, H}, dt), c2 = empty({B, H}, dt);
    ops::FusedCall k = ops::LstmCellCall{gx.impl(), cp.impl(), B, H, a1.impl(), h1.impl(), c1.impl(), gh.impl()};
    ops::FusedCall f = ops::LstmCellCall{gx.impl(), cp.impl(), B, H, a2.impl(), h2.impl(), c2.impl(), gh.impl()};
    ASSERT_TRUE(ops::fused_supported(k, Device::cpu()));
    ops::run_fused(k, Device::cpu());
    ops::run_fused_fallback(f, Device::cpu());
    const double t = dt == DType::F64 ? 1e-12 : 2e-6;
    expect_close(values(a2), values(a1), t, t, "acts, two summands");
    expect_close(values(h2), values(h1), t, t, "h, two summands");
    expect_close(values(c2), values(c1), t, t, "c, two summands");
    Tensor x1 = gx.clone().requires_grad_(), y1 = gh.clone().requires_grad_(), p1 = cp.clone().requires_grad_();
    Tensor s2 = (gx + gh).requires_grad_(), p2 = cp.clone().requires_grad_();
    auto [hh1, cc1] = nn::lstm_cell_gates(x1, y1, p1);
    auto [hh2, cc2] = nn::lstm_cell_gates(s2, p2);
    expect_close(values(hh1), values(hh2), t, t, "h against the sum");
    expect_close(values(cc1), values(cc2), t, t, "c against the sum");
    Tensor w = randn({B, H}, 14, dt);
    ((hh1 * w).sum() + cc1.sum()).backward();
    ((hh2 * w).sum() + cc2.sum()).backward();
    expect_close(values(x1.grad()), values(s2.grad()), t, t, "gates_x grad");
    expect_close(values(y1.grad()), values(s2.grad()), t, t, "gates_h grad");
    expect_close(values(p1.grad()), values(p2.grad()), t, t, "c_prev grad");
  }
  Tensor gx = (randn({2, 8}, 15, DType::F64) * 1.5).requires_grad_(true),
         gh = randn({2, 8}, 16, DType::F64).requires_grad_(true);
  Tensor cp = randn({2, 2}, 17, DType::F64).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& in) {
    auto [h, c] = nn::lstm_cell_gates(in[0], in[1], in[2]);
    return cat({h, c * 0.7}, 1);
  };
  GradcheckResult r = gradcheck(f, {gx, gh, cp});
  EXPECT_TRUE(r.ok) << r.message;
  GradcheckResult rr = gradgradcheck(f, {gx, gh, cp});
  EXPECT_TRUE(rr.ok) << rr.message;
  EXPECT_EQ(error_kind_of([&] {
              nn::lstm_cell_gates(randn({2, 8}, 1), randn({2, 4}, 2), randn({2, 2}, 3));
            }),
            ErrorKind::ShapeMismatch);
}

TEST(RnnFused, GruCellKernelMatchesTheFallback) {
  ASSERT_STREQ(ops::fused_op_name(ops::FusedOp::GruCell), "gru_cell");
  for (DType dt : {DType::F32, DType::F64})
    for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {16, 64}}) {
      const std::string what =
          std::string(dt == DType::F64 ? "f64" : "f32") + " B=" + std::to_string(B) + " H=" + std::to_string(H);
      Tensor gi = randn({B, 3 * H}, 1, dt) * 2.0, gh = randn({B, 3 * H}, 2, dt) * 2.0, hp = randn({B, H}, 3, dt);
      Tensor a1 = empty({B, 4 * H}, dt), h1 = empty({B, H}, dt), a2 = empty({B, 4 * H}, dt), h2 = empty({B, H}, dt);
      ops::FusedCall k = ops::GruCellCall{gi.impl(), gh.impl(), hp.impl(), B, H, a1.impl(), h1.impl()};
      ops::FusedCall f = ops::GruCellCall{gi.impl(), gh.impl(), hp.impl(), B, H, a2.impl(), h2.impl()};
      ASSERT_TRUE(ops::fused_supported(k, Device::cpu()));
      ops::run_fused(k, Device::cpu());
      ops::run_fused_fallback(f, Device::cpu());
      expect_close(values(a2), values(a1), tol(dt), tol(dt), "acts " + what);
      expect_close(values(h2), values(h1), tol(dt), tol(dt), "h " + what);
      Tensor g = randn({B, H}, 4, dt);
      Tensor di1 = empty({B, 3 * H}, dt), dh1 = empty({B, 3 * H}, dt), dp1 = empty({B, H}, dt);
      Tensor di2 = empty({B, 3 * H}, dt), dh2 = empty({B, 3 * H}, dt), dp2 = empty({B, H}, dt);
      ops::FusedCall kb =
          ops::GruCellBackwardCall{a1.impl(), hp.impl(), g.impl(), B, H, di1.impl(), dh1.impl(), dp1.impl()};
      ops::FusedCall fb =
          ops::GruCellBackwardCall{a1.impl(), hp.impl(), g.impl(), B, H, di2.impl(), dh2.impl(), dp2.impl()};
      ASSERT_TRUE(ops::fused_supported(kb, Device::cpu()));
      ops::run_fused(kb, Device::cpu());
      ops::run_fused_fallback(fb, Device::cpu());
      expect_close(values(di2), values(di1), 5 * tol(dt), 5 * tol(dt), "grad gi " + what);
      expect_close(values(dh2), values(dh1), 5 * tol(dt), 5 * tol(dt), "grad gh " + what);
      expect_close(values(dp2), values(dp1), 5 * tol(dt), 5 * tol(dt), "grad h_prev " + what);
    }
}

TEST(RnnFused, GruCellGatesMatchTheCompositeAndGradgradcheck) {
  Tensor gi = (randn({3, 6}, 5, DType::F64) * 1.5).requires_grad_(true);
  Tensor gh = (randn({3, 6}, 7, DType::F64) * 1.5).requires_grad_(true);
  Tensor hp = randn({3, 2}, 6, DType::F64).requires_grad_(true);
  // The composite the fused step replaced, written out with torch's formula.
  const std::vector<Tensor> i = gi.chunk(3, 1), h = gh.chunk(3, 1);
  const Tensor r = (i[0] + h[0]).sigmoid(), z = (i[1] + h[1]).sigmoid(), n = (i[2] + r * h[2]).tanh();
  expect_close(values((1.0 - z) * n + z * hp), values(nn::gru_cell_gates(gi, gh, hp)), 1e-14, 1e-14, "gru h");
  auto f = [](const std::vector<Tensor>& in) { return nn::gru_cell_gates(in[0], in[1], in[2]); };
  GradcheckResult res = gradcheck(f, {gi, gh, hp});
  EXPECT_TRUE(res.ok) << res.message;
  GradcheckResult rr = gradgradcheck(f, {gi, gh, hp});
  EXPECT_TRUE(rr.ok) << rr.message;
  // Only h_prev requires a gradient.
  auto fp = [&](const std::vector<Tensor>& in) { return nn::gru_cell_gates(gi.detach(), gh.detach(), in[0]); };
  GradcheckResult rp = gradcheck(fp, {hp});
  EXPECT_TRUE(rp.ok) << rp.message;
}

TEST(RnnFused, RnnCellKernelMatchesTheFallback) {
  ASSERT_STREQ(ops::fused_op_name(ops::FusedOp::RnnCell), "rnn_cell");
  for (DType dt : {DType::F32, DType::F64})
    for (bool relu : {false, true})
      for (int64_t n : {1, 7, 16 * 64, 1000}) {
        const std::string what =
            std::string(dt == DType::F64 ? "f64" : "f32") + (relu ? " relu" : " tanh") + " n=" + std::to_string(n);
        Tensor xt = randn({n}, 1, dt) * 3.0, hh = randn({n}, 2, dt) * 3.0;
        if (n >= 7) {  // the special values: NaN propagates through both activations, +-inf saturates tanh
          xt.index_put_({0}, std::nan(""));
          xt.index_put_({1}, INFINITY);
          xt.index_put_({2}, -INFINITY);
          hh.index_put_({3}, -0.0);
          xt.index_put_({3}, 0.0);
        }
        Tensor h1 = empty({n}, dt), h2 = empty({n}, dt);
        ops::FusedCall k = ops::RnnCellCall{xt.impl(), hh.impl(), n, relu, h1.impl()};
        ops::FusedCall f = ops::RnnCellCall{xt.impl(), hh.impl(), n, relu, h2.impl()};
        ASSERT_TRUE(ops::fused_supported(k, Device::cpu()));
        ops::run_fused(k, Device::cpu());
        ops::run_fused_fallback(f, Device::cpu());
        const std::vector<double> a = values(h1), b = values(h2);
        for (size_t i = 0; i < a.size(); ++i) {
          if (std::isnan(b[i])) {
            EXPECT_TRUE(std::isnan(a[i])) << what << " at " << i;
            continue;
          }
          EXPECT_EQ(a[i], b[i]) << what << " at " << i;  // the same registry activation: bit for bit
        }
      }
}

TEST(RnnFused, RnnCellGatesMatchTheCompositeAndGradgradcheck) {
  for (const char* act : {"tanh", "relu"}) {
    const bool relu = std::string(act) == "relu";
    Tensor xt = (randn({3, 4}, 5, DType::F64) * 1.5).requires_grad_(true);
    Tensor hh = (randn({3, 4}, 7, DType::F64) * 1.5).requires_grad_(true);
    const Tensor ref = relu ? (xt + hh).relu() : (xt + hh).tanh();
    const Tensor h = nn::rnn_cell_gates(xt, hh, act);
    expect_close(values(ref), values(h), 0, 0, std::string("rnn h ") + act);
    // First-order gradients equal the composite's.
    Tensor g = randn({3, 4}, 8, DType::F64);
    const std::vector<Tensor> gf = autograd::grad({h}, {xt, hh}, {g}), gr = autograd::grad({ref}, {xt, hh}, {g});
    expect_close(values(gr[0]), values(gf[0]), 1e-15, 1e-15, std::string("grad xt ") + act);
    expect_close(values(gr[1]), values(gf[1]), 1e-15, 1e-15, std::string("grad hh ") + act);
    auto f = [act](const std::vector<Tensor>& in) { return nn::rnn_cell_gates(in[0], in[1], act); };
    GradcheckResult r = gradcheck(f, {xt, hh});
    EXPECT_TRUE(r.ok) << act << ": " << r.message;
    GradcheckResult rr = gradgradcheck(f, {xt, hh});
    EXPECT_TRUE(rr.ok) << act << ": " << rr.message;
    // Only hh requires a gradient (the recurrent path of the first step of a layer whose input is data).
    auto fh = [&](const std::vector<Tensor>& in) { return nn::rnn_cell_gates(xt.detach(), in[0], act); };
    GradcheckResult rh = gradcheck(fh, {hh});
    EXPECT_TRUE(rh.ok) << act << ": " << rh.message;
  }
}

nn::RNNOptions f64_opts(int64_t layers, bool bidir, bool batch_first) {
  nn::RNNOptions o;
  o.num_layers = layers;
  o.bidirectional = bidir;
  o.batch_first = batch_first;
  o.dtype = DType::F64;
  return o;
}

TEST(RnnLayers, GradcheckF64OfInputsAndInitialStates) {
  const int64_t T = 3, B = 2, I = 3, H = 2;
  for (int kind = 0; kind < 4; ++kind)
    for (auto [L, bidir, bf] : {std::tuple<int64_t, bool, bool>{1, false, false}, {2, true, true}}) {
      Generator g(7);
      nn::RNNOptions o = f64_opts(L, bidir, bf);
      if (kind == 3) o.nonlinearity = "relu";
      const int64_t D = bidir ? 2 : 1;
      Tensor x = randn(bf ? Shape{B, T, I} : Shape{T, B, I}, 11, DType::F64).requires_grad_(true);
      Tensor h0 = randn({L * D, B, H}, 12, DType::F64).requires_grad_(true);
      Tensor c0 = randn({L * D, B, H}, 13, DType::F64).requires_grad_(true);
      std::function<Tensor(const std::vector<Tensor>&)> f;
      std::vector<Tensor> in{x, h0};
      if (kind == 0) {
        auto m = std::make_shared<nn::LSTM>(I, H, o, g);
        in.push_back(c0);
        f = [m](const std::vector<Tensor>& v) {
          auto [out, hc] = m->forward(v[0], {v[1], v[2]});
          return cat({out.reshape({-1}), std::get<0>(hc).reshape({-1}), std::get<1>(hc).reshape({-1})}, 0);
        };
      } else {
        std::shared_ptr<nn::Module> keep;
        if (kind == 1) {
          auto m = std::make_shared<nn::GRU>(I, H, o, g);
          f = [m](const std::vector<Tensor>& v) {
            auto [out, h] = m->forward(v[0], v[1]);
            return cat({out.reshape({-1}), h.reshape({-1})}, 0);
          };
        } else {
          auto m = std::make_shared<nn::RNN>(I, H, o, g);
          f = [m](const std::vector<Tensor>& v) {
            auto [out, h] = m->forward(v[0], v[1]);
            return cat({out.reshape({-1}), h.reshape({-1})}, 0);
          };
        }
      }
      GradcheckResult r = gradcheck(f, in);
      EXPECT_TRUE(r.ok) << "kind " << kind << " L " << L << ": " << r.message;
    }
  // Second order through the LSTM (create_graph runs the cell's composite backward).
  Generator g(3);
  auto m = std::make_shared<nn::LSTM>(2, 2, f64_opts(1, false, false), g);
  Tensor x = randn({2, 1, 2}, 21, DType::F64).requires_grad_(true);
  GradcheckResult rr = gradgradcheck([m](const std::vector<Tensor>& v) { return std::get<0>(m->forward(v[0])); }, {x});
  EXPECT_TRUE(rr.ok) << rr.message;
}

TEST(RnnLayers, ShapesNamesAndInit) {
  Generator g(1);
  nn::LSTM lstm(4, 6, {.num_layers = 2, .bidirectional = true}, g);
  std::vector<std::string> names;
  for (const auto& [k, t] : lstm.named_parameters()) names.push_back(k);
  const std::vector<std::string> want = {
      "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",         "bias_hh_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_ih_l1",         "weight_hh_l1",         "bias_ih_l1",         "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(lstm.named_parameters()[8].second.shape(), Shape({24, 12}));
  const double k = 1.0 / std::sqrt(6.0);
  for (const Tensor& p : lstm.parameters()) EXPECT_LE(p.abs().max().item<float>(), k);
  auto [out, hc] = lstm.forward(randn({5, 3, 4}, 1));
  EXPECT_EQ(out.shape(), Shape({5, 3, 12}));
  EXPECT_EQ(std::get<0>(hc).shape(), Shape({4, 3, 6}));
  EXPECT_EQ(std::get<1>(hc).shape(), Shape({4, 3, 6}));
  nn::GRU gru(4, 6, {.batch_first = true}, g);
  auto [go, gh] = gru.forward(randn({3, 5, 4}, 2));
  EXPECT_EQ(go.shape(), Shape({3, 5, 6}));
  EXPECT_EQ(gh.shape(), Shape({1, 3, 6}));
  nn::RNN rnn(4, 6, {.bias = false}, g);
  EXPECT_EQ(rnn.parameters().size(), 2u);
  auto [ro, rh] = rnn.forward(randn({5, 4}, 3));  // unbatched
  EXPECT_EQ(ro.shape(), Shape({5, 6}));
  EXPECT_EQ(rh.shape(), Shape({1, 6}));
  EXPECT_EQ(lstm.repr(), "LSTM(4, 6, num_layers=2, bidirectional=true)");
}

TEST(RnnLayers, TypedErrors) {
  nn::LSTM lstm(4, 6);
  auto kind_of = [](const std::function<void()>& fn) -> std::optional<ErrorKind> {
    try {
      fn();
    } catch (const Error& e) {
      return e.kind();
    }
    return std::nullopt;
  };
  EXPECT_EQ(kind_of([&] { lstm.forward(randn({5, 3, 5}, 1)); }), ErrorKind::ShapeMismatch);
  EXPECT_EQ(kind_of([&] { lstm.forward(randn({5, 3, 4}, 1, DType::F64)); }), ErrorKind::DTypeMismatch);
  EXPECT_EQ(kind_of([&] {
              lstm.forward(randn({5, 3, 4}, 1), {randn({1, 2, 6}, 2), randn({1, 2, 6}, 3)});
            }),
            ErrorKind::ShapeMismatch);
  EXPECT_EQ(kind_of([&] {
              lstm.forward(randn({5, 3, 4}, 1), {randn({1, 3, 6}, 2), Tensor()});
            }),
            ErrorKind::InvalidArgument);
  EXPECT_EQ(kind_of([&] { nn::RNN(4, 6, {.nonlinearity = "gelu"}); }), ErrorKind::InvalidArgument);
  EXPECT_EQ(kind_of([&] { nn::GRU(4, 0); }), ErrorKind::InvalidArgument);
  EXPECT_EQ(kind_of([&] { nn::lstm_cell_gates(randn({2, 7}, 1), randn({2, 1}, 2)); }), ErrorKind::ShapeMismatch);
  EXPECT_EQ(kind_of([&] {
              nn::gru_cell_gates(randn({2, 7}, 1), randn({2, 7}, 2), randn({2, 2}, 3));
            }),
            ErrorKind::ShapeMismatch);
  EXPECT_EQ(kind_of([&] {
              nn::gru_cell_gates(randn({2, 6}, 1), randn({2, 6}, 2), randn({2, 3}, 3));
            }),
            ErrorKind::ShapeMismatch);
  EXPECT_EQ(kind_of([&] {
              nn::gru_cell_gates(randn({2, 6}, 1), randn({2, 6}, 2, DType::F64), randn({2, 2}, 3));
            }),
            ErrorKind::DTypeMismatch);
  EXPECT_EQ(kind_of([&] { nn::rnn_cell_gates(randn({2, 6}, 1), randn({2, 5}, 2)); }), ErrorKind::ShapeMismatch);
  EXPECT_EQ(kind_of([&] { nn::rnn_cell_gates(randn({6}, 1), randn({6}, 2)); }), ErrorKind::ShapeMismatch);
  EXPECT_EQ(kind_of([&] {
              nn::rnn_cell_gates(randn({2, 6}, 1), randn({2, 6}, 2, DType::F64));
            }),
            ErrorKind::DTypeMismatch);
  EXPECT_EQ(kind_of([&] {
              nn::rnn_cell_gates(arange(6).reshape({2, 3}), arange(6).reshape({2, 3}));
            }),
            ErrorKind::DTypeMismatch);
  EXPECT_EQ(kind_of([&] {
              nn::rnn_cell_gates(randn({2, 6}, 1), randn({2, 6}, 2), "gelu");
            }),
            ErrorKind::InvalidArgument);
  EXPECT_EQ(kind_of([&] { nn::rnn_cell_gates(Tensor(), randn({2, 6}, 2)); }), ErrorKind::InvalidArgument);
}

TEST(RnnLayers, DropoutBetweenLayersOnlyInTraining) {
  Generator g(5);
  nn::GRU gru(3, 4, {.num_layers = 2, .dropout = 0.5}, g);
  Tensor x = randn({4, 2, 3}, 9);
  gru.eval();
  auto [a, ha] = gru.forward(x);
  auto [b, hb] = gru.forward(x);
  EXPECT_EQ(values(a), values(b));
}

}  // namespace
