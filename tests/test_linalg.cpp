// Linear algebra against independent f64 references (Gaussian elimination, residual identities) and
// gradcheck of every differentiable function, including the DPP likelihood's logdet of principal submatrices.
#include <oxmera/linalg.hpp>

#include "test_util.hpp"

using namespace oxt;
namespace la = oxmera::linalg;

namespace {
// Random SPD batch X X^T / n + shift I.
Tensor spd(const Shape& batch, int64_t n, uint64_t seed, double shift = 0.5) {
  Shape s = batch;
  s.push_back(n);
  s.push_back(n);
  Tensor x = randn(s, seed, DType::F64);
  return x.matmul(x.transpose(-2, -1)) / static_cast<double>(n) + eye(n, DType::F64) * shift;
}
// log|det| by Gaussian elimination with partial pivoting (independent of Cholesky).
double ref_logdet(std::vector<double> a, int64_t n) {
  double ld = 0;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::abs(a[r * n + c]) > std::abs(a[p * n + c])) p = r;
    if (p != c)
      for (int64_t k = 0; k < n; ++k) std::swap(a[c * n + k], a[p * n + k]);
    ld += std::log(std::abs(a[c * n + c]));
    for (int64_t r = c + 1; r < n; ++r) {
      double f = a[r * n + c] / a[c * n + c];
      for (int64_t k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
    }
  }
  return ld;
}
void expect_gc(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
               const std::string& what) {
  GradcheckResult r = gradcheck(f, in);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}
Tensor sym(const Tensor& x) { return (x + x.transpose(-2, -1)) * 0.5; }
}  // namespace

TEST(Cholesky, ReconstructsAndHandCases) {
  for (DType dt : {DType::F64, DType::F32}) {
    for (int64_t n : {1, 4, 16}) {
      Tensor a = spd({3, 2}, n, 10 + n).to(dt);
      Tensor L = la::cholesky(a);
      EXPECT_EQ(L.shape(), a.shape());
      EXPECT_EQ(L.dtype(), dt);
      double tol = dt == DType::F64 ? 1e-12 : 1e-5;
      expect_close(values(L.matmul(L.transpose(-2, -1))), values(a), tol, tol, "L L^T");
      // Upper triangle is zero, diagonal positive.
      auto lv = values(L);
      for (int64_t b = 0; b < 6; ++b)
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_GT(lv[b * n * n + i * n + i], 0.0);
          for (int64_t j = i + 1; j < n; ++j) EXPECT_EQ(lv[b * n * n + i * n + j], 0.0);
        }
    }
  }
  EXPECT_EQ(la::cholesky(eye(3, DType::F64)).to_vector<double>(), eye(3, DType::F64).to_vector<double>());
  Tensor d = la::diag_embed(from_vector<double>({4, 9}, {2}));
  EXPECT_EQ(la::cholesky(d).to_vector<double>(), std::vector<double>({2, 0, 0, 3}));
  EXPECT_EQ(la::cholesky(zeros({0, 3, 3}, DType::F64)).shape(), Shape({0, 3, 3}));
  // Reads the lower triangle only.
  Tensor a = spd({}, 3, 5);
  Tensor junk_upper = a + from_vector<double>({0, 7, 7, 0, 0, 7, 0, 0, 0}, {3, 3});
  EXPECT_EQ(la::cholesky(junk_upper).to_vector<double>(), la::cholesky(a).to_vector<double>());
}

TEST(Cholesky, NotPositiveDefiniteNamesBatchAndPivot) {
  Tensor a = spd({2, 3}, 4, 7);
  std::vector<double> v = values(a);
  v[(1 * 3 + 2) * 16 + 2 * 4 + 2] = -5.0;  // batch [1, 2], pivot 2
  Tensor bad = from_vector(v, {2, 3, 4, 4});
  EXPECT_OXM_ERROR(la::cholesky(bad), NotPositiveDefinite, "batch index 5 [1, 2]");
  EXPECT_OXM_ERROR(la::cholesky(bad), NotPositiveDefinite, "pivot 2");
  Tensor rank_def = from_vector<double>({1, 1, 1, 1}, {2, 2});  // singular PSD
  EXPECT_OXM_ERROR(la::cholesky(rank_def), NotPositiveDefinite, "pivot 1");
  EXPECT_OXM_ERROR(la::cholesky(zeros({2, 2}, DType::F64)), NotPositiveDefinite, "pivot 0");
  EXPECT_OXM_ERROR(la::cholesky(from_vector<double>({NAN}, {1, 1})), NotPositiveDefinite, "pivot 0");
  EXPECT_OXM_ERROR(la::logdet(rank_def), NotPositiveDefinite, "logdet");
  EXPECT_OXM_ERROR(la::cholesky(ones({2, 3})), ShapeMismatch, "square");
  EXPECT_OXM_ERROR(la::cholesky(ones({3})), InvalidArgument, "matrix");
  EXPECT_OXM_ERROR(la::cholesky(ones({2, 2}, DType::I64)), UnsupportedDType, "i64");
}

TEST(Linalg, LogdetDetSolveInverseAgainstReferences) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-10 : 2e-4;
    Tensor a = spd({4}, 5, 21).to(dt);
    auto av = values(a);
    auto ld = values(la::logdet(a)), dv = values(la::det(a));
    for (int64_t b = 0; b < 4; ++b) {
      double want = ref_logdet(std::vector<double>(av.begin() + b * 25, av.begin() + (b + 1) * 25), 5);
      EXPECT_NEAR(ld[b], want, tol * std::max(1.0, std::abs(want)));
      EXPECT_NEAR(dv[b], std::exp(want), tol * std::exp(want));
    }
    Tensor bm = randn({4, 5, 2}, 22, DType::F64).to(dt);
    Tensor x = la::solve(a, bm);
    expect_close(values(a.matmul(x)), values(bm), tol, tol, "A x = b");
    Tensor bv = randn({4, 5}, 23, DType::F64).to(dt);
    Tensor xv = la::solve(a, bv);
    EXPECT_EQ(xv.shape(), Shape({4, 5}));
    expect_close(values(a.matmul(xv.unsqueeze(-1)).squeeze(-1)), values(bv), tol, tol, "A x = b (vector)");
    Tensor xb = la::solve(a, randn({5, 3}, 24, DType::F64).to(dt));  // broadcast batch of b
    EXPECT_EQ(xb.shape(), Shape({4, 5, 3}));
    Tensor inv = la::inverse(a);
    expect_close(values(a.matmul(inv)), values(eye(5, DType::F64).broadcast_to({4, 5, 5})), tol, tol, "A A^-1");
  }
  EXPECT_NEAR(la::logdet(eye(4, DType::F64)).item<double>(), 0.0, 1e-15);
  EXPECT_NEAR(la::det(from_vector<double>({2.5}, {1, 1})).item<double>(), 2.5, 1e-15);
  EXPECT_EQ(la::logdet(zeros({0, 2, 2}, DType::F64)).shape(), Shape({0}));
  Tensor L = from_vector<double>({2, 0, 1, 3}, {2, 2});
  EXPECT_OXM_ERROR(la::solve_triangular(from_vector<double>({0, 0, 1, 1}, {2, 2}), ones({2, 1}, DType::F64), false),
                   InvalidArgument, "zero on its diagonal at row 0");
  Tensor xl = la::solve_triangular(L, from_vector<double>({4, 11}, {2, 1}), false);
  EXPECT_EQ(xl.to_vector<double>(), std::vector<double>({2, 3}));
  Tensor xu = la::solve_triangular(L.t(), from_vector<double>({7, 9}, {2, 1}), true);
  EXPECT_EQ(xu.to_vector<double>(), std::vector<double>({2, 3}));
}

// The rule the device cholesky backward evaluates with tensor ops (P = Phi(L^T gL), S = L^{-T} P L^{-1},
// gA = (S + S^T) / 2, through two upper triangular solves) equals the CPU backward.
TEST(Linalg, CholeskyBackwardAsTensorOpsMatchesTheCpuRule) {
  const int64_t n = 6;
  Tensor B = randn({2, 3, n, n}, 71, DType::F64);
  Tensor A = (matmul(B, B.transpose(-1, -2)) + eye(n, DType::F64) * 0.5).detach().requires_grad_();
  Tensor W = randn({2, 3, n, n}, 72, DType::F64);
  Tensor L = la::cholesky(A);
  (L * W).sum().backward();
  NoGradGuard ng;
  std::vector<double> phi(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) phi[static_cast<size_t>(i * n + j)] = j < i ? 1.0 : (j == i ? 0.5 : 0.0);
  Tensor Lt = L.detach().transpose(-2, -1);
  Tensor P = Lt.matmul(W) * from_vector(phi, {n, n});
  Tensor X = la::solve_triangular(Lt, P, true);
  Tensor S = la::solve_triangular(Lt, X.transpose(-2, -1), true).transpose(-2, -1);
  expect_close(values((S + S.transpose(-2, -1)) * 0.5), values(A.grad()), 1e-12, 1e-12, "cholesky backward");
}

TEST(Linalg, DiagDiagEmbedTrace) {
  Tensor a = arange(0.0, 18.0, 1.0, DType::F64).reshape({2, 3, 3});
  EXPECT_EQ(la::diag(a).to_vector<double>(), std::vector<double>({0, 4, 8, 9, 13, 17}));
  EXPECT_EQ(la::trace(a).to_vector<double>(), std::vector<double>({12, 39}));
  Tensor e = la::diag_embed(from_vector<double>({1, 2}, {2}));
  EXPECT_EQ(e.to_vector<double>(), std::vector<double>({1, 0, 0, 2}));
  EXPECT_EQ(la::diag(from_vector<double>({1, 2}, {2})).to_vector<double>(), e.to_vector<double>());
  Tensor x = (rand({2, 3, 3}, 3, DType::F64)).requires_grad_();
  expect_gc([](const std::vector<Tensor>& v) { return la::trace(v[0]) + la::diag(v[0]).sum({-1}); }, {x}, "trace/diag");
  Tensor y = rand({2, 3}, 4, DType::F64).requires_grad_();
  expect_gc([](const std::vector<Tensor>& v) { return la::diag_embed(v[0]).exp(); }, {y}, "diag_embed");
}

TEST(Eigh, DecomposesAndOrdersAndHandCases) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-10 : 2e-5;
    Tensor a = sym(randn({3, 6, 6}, 31, DType::F64)).to(dt);
    auto [w, V] = la::eigh(a);
    EXPECT_EQ(w.shape(), Shape({3, 6}));
    EXPECT_EQ(V.shape(), Shape({3, 6, 6}));
    expect_close(values(a.matmul(V)), values(V * w.unsqueeze(-2)), tol, tol, "A V = V diag(w)");
    expect_close(values(V.transpose(-2, -1).matmul(V)), values(eye(6, DType::F64).broadcast_to({3, 6, 6})), tol, tol,
                 "V^T V = I");
    auto wv = values(w);
    for (int b = 0; b < 3; ++b)
      for (int i = 0; i + 1 < 6; ++i) EXPECT_LE(wv[b * 6 + i], wv[b * 6 + i + 1]);
    // Trace and log-det agree with the eigenvalues.
    expect_close(values(w.sum({-1})), values(la::trace(a)), tol, tol, "sum of eigenvalues");
  }
  auto [wi, Vi] = la::eigh(eye(3, DType::F64) * 2.0);  // repeated eigenvalues
  EXPECT_EQ(wi.to_vector<double>(), std::vector<double>({2, 2, 2}));
  expect_close(values(Vi.t().matmul(Vi)), values(eye(3, DType::F64)), 1e-14, 1e-14, "identity eigenvectors");
  auto [wz, Vz] = la::eigh(zeros({2, 2}, DType::F64));
  EXPECT_EQ(wz.to_vector<double>(), std::vector<double>({0, 0}));
  auto [w1, V1] = la::eigh(from_vector<double>({-3}, {1, 1}));
  EXPECT_EQ(w1.item<double>(), -3.0);
  EXPECT_EQ(V1.item<double>(), 1.0);
  auto [wd, Vd] = la::eigh(la::diag_embed(from_vector<double>({3, -1, 2}, {3})));
  EXPECT_EQ(wd.to_vector<double>(), std::vector<double>({-1, 2, 3}));
  auto [we, Ve] = la::eigh(zeros({0, 4, 4}));
  EXPECT_EQ(we.shape(), Shape({0, 4}));
}

TEST(Eigh, SymmetryCheck) {
  Tensor a = sym(randn({2, 4, 4}, 41, DType::F64));
  std::vector<double> v = values(a);
  v[16 + 1 * 4 + 3] += 0.5;  // batch 1, pair (1, 3)
  EXPECT_OXM_ERROR(la::eigh(from_vector(v, {2, 4, 4})), NotSymmetric, "batch index 1");
  EXPECT_OXM_ERROR(la::eigh(from_vector(v, {2, 4, 4})), NotSymmetric, "a[1][3]");
  EXPECT_OXM_ERROR(la::eigh(from_vector(v, {2, 4, 4})), NotSymmetric, "EIGH_SYMMETRY_TOL");
  EXPECT_EQ(la::EIGH_SYMMETRY_TOL, 1e-5);
  // f32 Gram matrices X^T X / n are symmetric in intent, not in the last bits: they pass.
  Tensor x = randn({200, 16}, 42);
  Tensor gram = x.t().matmul(x) / 200.0;
  EXPECT_NO_THROW(la::eigh(gram));
  Tensor xt = randn({3, 64, 16}, 43);
  EXPECT_NO_THROW(la::eigh(xt.transpose(-2, -1).matmul(xt) / 64.0));
}

TEST(LinalgGradcheck, EveryDifferentiableFunction) {
  Tensor x = randn({2, 4, 4}, 51, DType::F64).requires_grad_();
  auto make_spd = [](const Tensor& t) { return t.matmul(t.transpose(-2, -1)) * 0.25 + eye(4, DType::F64); };
  expect_gc([&](const std::vector<Tensor>& v) { return la::cholesky(make_spd(v[0])); }, {x}, "cholesky");
  expect_gc([&](const std::vector<Tensor>& v) { return la::logdet(make_spd(v[0])); }, {x}, "logdet");
  expect_gc([&](const std::vector<Tensor>& v) { return la::det(make_spd(v[0])); }, {x}, "det");
  expect_gc([&](const std::vector<Tensor>& v) { return la::inverse(make_spd(v[0])); }, {x}, "inverse");
  Tensor b = randn({2, 4, 3}, 52, DType::F64).requires_grad_();
  expect_gc([&](const std::vector<Tensor>& v) { return la::solve(make_spd(v[0]), v[1]); }, {x, b}, "solve");
  Tensor bv = randn({4}, 53, DType::F64).requires_grad_();
  expect_gc([&](const std::vector<Tensor>& v) { return la::solve(make_spd(v[0]), v[1]); }, {x, bv},
            "solve vector/bcast");
  Tensor Lraw = (randn({4, 4}, 54, DType::F64) * 0.3 + eye(4, DType::F64) * 2.0).requires_grad_();
  Tensor rhs = randn({4, 2}, 55, DType::F64).requires_grad_();
  expect_gc([](const std::vector<Tensor>& v) { return la::solve_triangular(v[0], v[1], false); }, {Lraw, rhs},
            "solve_triangular lower");
  expect_gc([](const std::vector<Tensor>& v) { return la::solve_triangular(v[0], v[1], true); }, {Lraw, rhs},
            "solve_triangular upper");
  Tensor s = randn({2, 5, 5}, 56, DType::F64).requires_grad_();
  expect_gc([](const std::vector<Tensor>& v) { return la::eigh(sym(v[0])).eigenvalues; }, {s}, "eigh eigenvalues");
  Tensor weights = rand({5, 5}, 57, DType::F64);
  expect_gc(
      [&](const std::vector<Tensor>& v) {
        auto [w, V] = la::eigh(sym(v[0]));
        return (V.square() * weights).sum() + w.sum();  // invariant to each eigenvector's sign
      },
      {s}, "eigh eigenvectors");
  // The research workload's DPP likelihood: logdet of principal submatrices picked by index_select.
  Tensor k = randn({6, 6}, 58, DType::F64).requires_grad_();
  Tensor items = from_vector<int64_t>({4, 1, 2}, {3});
  expect_gc(
      [&](const std::vector<Tensor>& v) {
        Tensor K = v[0].matmul(v[0].t()) / 6.0 + eye(6, DType::F64) * 0.1;
        Tensor sub = K.index_select(0, items).index_select(1, items);
        return la::logdet(sub) - la::logdet(K + eye(6, DType::F64));
      },
      {k}, "DPP log-likelihood");
}

TEST(LinalgGradcheck, EigenvectorGradientAtRepeatedEigenvaluesIsAnError) {
  Tensor a = (eye(3, DType::F64) * 2.0).requires_grad_();
  auto [w, V] = la::eigh(a);
  EXPECT_OXM_ERROR(V.sum().backward(), InvalidArgument, "repeated eigenvalues");
  Tensor b = (eye(3, DType::F64) * 2.0).requires_grad_();
  la::eigh(b).eigenvalues.sum().backward();  // eigenvalues alone are fine
  EXPECT_EQ(b.grad().to_vector<double>(), eye(3, DType::F64).to_vector<double>());
}

namespace {
void expect_ggc(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                const std::string& what) {
  try {
    GradcheckResult r = gradgradcheck(f, in);
    EXPECT_TRUE(r.ok) << what << ": " << r.message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
}
}  // namespace

// Second derivatives (create_graph = true) of every public function, against finite differences of the first.
TEST(LinalgGradgradcheck, EveryDifferentiableFunction) {
  Tensor x = randn({2, 3, 3}, 61, DType::F64).requires_grad_();
  auto make_spd = [](const Tensor& t) { return t.matmul(t.transpose(-2, -1)) * 0.25 + eye(3, DType::F64); };
  expect_ggc([&](const std::vector<Tensor>& v) { return la::cholesky(make_spd(v[0])); }, {x}, "cholesky");
  expect_ggc([&](const std::vector<Tensor>& v) { return la::logdet(make_spd(v[0])); }, {x}, "logdet");
  expect_ggc([&](const std::vector<Tensor>& v) { return la::det(make_spd(v[0])); }, {x}, "det");
  expect_ggc([&](const std::vector<Tensor>& v) { return la::inverse(make_spd(v[0])); }, {x}, "inverse");
  // SPD leaves read through sym(): the gradients are symmetric (torch's convention), so is every perturbation.
  Tensor a = spd({2}, 3, 62).requires_grad_();
  expect_ggc([](const std::vector<Tensor>& v) { return la::logdet(sym(v[0])); }, {a}, "logdet of a leaf");
  expect_ggc([](const std::vector<Tensor>& v) { return la::cholesky(sym(v[0])); }, {a}, "cholesky of a leaf");
  Tensor b = randn({2, 3, 2}, 63, DType::F64).requires_grad_();
  expect_ggc([&](const std::vector<Tensor>& v) { return la::solve(make_spd(v[0]), v[1]); }, {x, b}, "solve");
  Tensor bv = randn({3}, 64, DType::F64).requires_grad_();
  expect_ggc([&](const std::vector<Tensor>& v) { return la::solve(make_spd(v[0]), v[1]); }, {x, bv},
             "solve vector/bcast");
  expect_ggc([&](const std::vector<Tensor>& v) { return la::cholesky_solve(v[1], la::cholesky(make_spd(v[0]))); },
             {x, b}, "cholesky_solve");
  Tensor Lraw = (randn({3, 3}, 65, DType::F64) * 0.3 + eye(3, DType::F64) * 2.0).requires_grad_();
  Tensor rhs = randn({3, 2}, 66, DType::F64).requires_grad_();
  for (bool upper : {false, true})
    expect_ggc([upper](const std::vector<Tensor>& v) { return la::solve_triangular(v[0], v[1], upper); }, {Lraw, rhs},
               upper ? "solve_triangular upper" : "solve_triangular lower");
  Tensor s = randn({2, 4, 4}, 67, DType::F64).requires_grad_();
  expect_ggc([](const std::vector<Tensor>& v) { return la::eigh(sym(v[0])).eigenvalues; }, {s}, "eigh eigenvalues");
  // Distinct eigenvalues (1, 2, 4, 7 plus a small symmetric perturbation).
  Tensor d = (la::diag_embed(from_vector<double>({1, 2, 4, 7}, {4})) + sym(randn({4, 4}, 68, DType::F64)) * 0.2)
                 .requires_grad_();
  expect_ggc([](const std::vector<Tensor>& v) { return la::eigh(sym(v[0])).eigenvectors; }, {d}, "eigh eigenvectors");
  expect_ggc(
      [](const std::vector<Tensor>& v) {
        auto [w, V] = la::eigh(sym(v[0]));
        return V.matmul(la::diag_embed(w.exp())).matmul(V.t());  // the matrix exponential
      },
      {d}, "eigh both outputs");
  expect_ggc([](const std::vector<Tensor>& v) { return la::trace(v[0]).square(); }, {s}, "trace");
  expect_ggc([](const std::vector<Tensor>& v) { return la::diag(v[0]).exp(); }, {s}, "diag");
  Tensor w = randn({2, 3}, 69, DType::F64).requires_grad_();
  expect_ggc([](const std::vector<Tensor>& v) { return la::diag_embed(v[0]).exp(); }, {w}, "diag_embed");
  Tensor k = randn({5, 5}, 70, DType::F64).requires_grad_();
  Tensor items = from_vector<int64_t>({4, 1, 2}, {3});
  expect_ggc(
      [&](const std::vector<Tensor>& v) {
        Tensor K = v[0].matmul(v[0].t()) / 5.0 + eye(5, DType::F64) * 0.1;
        Tensor sub = K.index_select(0, items).index_select(1, items);
        return la::logdet(sub) - la::logdet(K + eye(5, DType::F64));
      },
      {k}, "DPP log-likelihood");
}

// The create_graph rules give the fast rules' first derivatives, and the Hessian of logdet is -A^{-1} V A^{-1}.
TEST(LinalgHigherOrder, CreateGraphRulesMatchTheFastRulesAndTheClosedForm) {
  Tensor a = spd({2}, 4, 71).requires_grad_();
  Tensor W = randn({2, 4, 4}, 72, DType::F64), V = sym(randn({2, 4, 4}, 73, DType::F64));
  Tensor L = la::cholesky(a);
  Tensor fast = autograd::grad({(L * W).sum()}, {a}, {}, true)[0];
  Tensor slow = autograd::grad({(L * W).sum()}, {a}, {}, false, true)[0];
  ASSERT_TRUE(slow.requires_grad());
  expect_close(values(slow), values(fast), 1e-12, 1e-12, "cholesky first derivative");
  Tensor ld = la::logdet(a).sum();
  Tensor gfast = autograd::grad({ld}, {a}, {}, true)[0];
  Tensor g = autograd::grad({ld}, {a}, {}, false, true)[0];
  expect_close(values(g), values(gfast), 1e-12, 1e-12, "logdet first derivative");
  Tensor hv = autograd::grad({(g * V).sum()}, {a})[0];
  Tensor ainv = la::inverse(a.detach());
  expect_close(values(hv), values(-ainv.matmul(V).matmul(ainv)), 1e-10, 1e-12, "logdet Hessian-vector product");
}

// d^k/dt^k logdet(A + tB) at t = 0, with M = A^{-1} B: tr M, -tr M^2, 2 tr M^3.
TEST(LinalgHigherOrder, ThirdDerivativeOfLogdetMatchesTheClosedForm) {
  Tensor A = spd({}, 4, 74), B = sym(randn({4, 4}, 75, DType::F64));
  Tensor t = from_vector<double>({0.0}, Shape{}).requires_grad_();
  Tensor d1 = autograd::grad({la::logdet(A + t * B)}, {t}, {}, false, true)[0];
  Tensor d2 = autograd::grad({d1}, {t}, {}, false, true)[0];
  Tensor d3 = autograd::grad({d2}, {t})[0];
  Tensor M = la::solve(A, B);
  auto tr = [](const Tensor& m) { return la::trace(m).item<double>(); };
  EXPECT_NEAR(d1.item<double>(), tr(M), 1e-10);
  EXPECT_NEAR(d2.item<double>(), -tr(M.matmul(M)), 1e-10);
  EXPECT_NEAR(d3.item<double>(), 2.0 * tr(M.matmul(M).matmul(M)), 1e-9);
  EXPECT_GT(std::abs(d3.item<double>()), 1e-3) << "a test that can fail: the closed form is not ~0";
}
