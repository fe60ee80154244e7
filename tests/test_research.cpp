// The research workload (src/workloads/research.cpp): determinism, learning, and the k-DPP normaliser.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "oxmera/oxmera.hpp"
#include "research.hpp"

namespace ox = oxmera;
using oxmera_cli::FitResult;
using oxmera_cli::ResearchOptions;

namespace {

ResearchOptions short_run() {
  ResearchOptions o;
  o.epochs = 2;
  o.replicas = 2;
  o.seed = 3;
  return o;
}

TEST(Research, ShortRunIsBitDeterministicAndLearns) {
  const std::vector<FitResult> a = oxmera_cli::research_fits(short_run());
  const std::vector<FitResult> b = oxmera_cli::research_fits(short_run());
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t f = 0; f < a.size(); ++f) {
    SCOPED_TRACE(a[f].name);
    ASSERT_EQ(a[f].train_loss.size(), 2u);
    ASSERT_EQ(a[f].metric.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(a[f].train_loss[r], b[f].train_loss[r]);  // bit-identical
      EXPECT_EQ(a[f].first_epoch_loss[r], b[f].first_epoch_loss[r]);
      EXPECT_EQ(a[f].metric[r], b[f].metric[r]);
      EXPECT_TRUE(std::isfinite(a[f].train_loss[r]));
      EXPECT_TRUE(std::isfinite(a[f].metric[r]));
      EXPECT_LT(a[f].train_loss[r], a[f].first_epoch_loss[r]) << "replica " << r << " did not learn";
    }
    // Replicas are initialised from different seeds, so they are different models.
    EXPECT_NE(a[f].train_loss[0], a[f].train_loss[1]);
  }
  EXPECT_GT(a[0].metric[0], 0.5);  // accuracy after two epochs beats chance
}

TEST(Research, SingleFitSelection) {
  ResearchOptions o = short_run();
  o.replicas = 1;
  o.epochs = 1;
  o.fit = "linear-lag5";
  const auto r = oxmera_cli::research_fits(o);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].name, "linear-lag5");
  EXPECT_EQ(r[0].metric_name, "kdpp_nll");
  o.fit = "nope";
  EXPECT_THROW(oxmera_cli::research_fits(o), std::invalid_argument);
}

// --dtype f32 (what a GPU run trains in) follows the f64 run closely over two epochs, on the CPU, and the
// mlp fit (always f32) is unaffected by the option.
TEST(Research, F32DppFitsTrackTheF64Run) {
  ResearchOptions o = short_run();
  o.dtype = "f64";
  const std::vector<FitResult> d = oxmera_cli::research_fits(o);
  o.dtype = "f32";
  const std::vector<FitResult> f = oxmera_cli::research_fits(o);
  ASSERT_EQ(d.size(), 3u);
  ASSERT_EQ(f.size(), 3u);
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(f[0].train_loss[r], d[0].train_loss[r]);
  for (size_t k = 1; k < 3; ++k) {
    SCOPED_TRACE(f[k].name);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_NEAR(f[k].first_epoch_loss[r], d[k].first_epoch_loss[r], 1e-4 * std::abs(d[k].first_epoch_loss[r]));
      EXPECT_NEAR(f[k].train_loss[r], d[k].train_loss[r], 1e-3 * std::abs(d[k].train_loss[r]));
      EXPECT_NEAR(f[k].metric[r], d[k].metric[r], 1e-3 * std::abs(d[k].metric[r]));
      EXPECT_NE(f[k].train_loss[r], d[k].train_loss[r]);  // really trained in another precision
    }
  }
}

TEST(Research, DtypeOptionIsValidated) {
  ResearchOptions o = short_run();
  o.dtype = "f16";
  EXPECT_THROW(oxmera_cli::research_fits(o), std::invalid_argument);
  o.dtype = "f64";
  o.device = "cuda";  // refused before any device is touched, with or without a GPU
  try {
    oxmera_cli::research_fits(o);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype f32"), std::string::npos) << e.what();
  }
}

TEST(Research, CudaWithoutBackendIsTypedError) {
  ox::init();
  if (ox::device_available(ox::Device::cuda())) GTEST_SKIP() << "a CUDA backend is present";
  ResearchOptions o = short_run();
  o.device = "cuda";
  try {
    oxmera_cli::research_fits(o);
    FAIL() << "expected BackendUnavailable";
  } catch (const ox::Error& e) {
    EXPECT_EQ(e.kind(), ox::ErrorKind::BackendUnavailable);
  }
}

// e_k(eigenvalues of L) equals the sum of det(L_S) over all k-subsets S (the k-DPP normaliser).
TEST(Research, KdppNormaliserMatchesBruteForce) {
  const int n = 7;
  ox::Tensor A = ox::randn(ox::Shape{n, n}, 11, ox::DType::F64);
  ox::Tensor L = ox::matmul(A, A.t()) * 0.3 + ox::eye(n, ox::DType::F64) * 0.05;
  const std::vector<double> lam = ox::linalg::eigh(L).eigenvalues.to_vector<double>();
  for (int k = 1; k <= n; ++k) {
    double brute = 0;
    for (int mask = 0; mask < (1 << n); ++mask) {
      if (__builtin_popcount(static_cast<unsigned>(mask)) != k) continue;
      std::vector<int64_t> S;
      for (int i = 0; i < n; ++i)
        if (mask & (1 << i)) S.push_back(i);
      ox::Tensor idx = ox::from_vector(S, ox::Shape{k});
      brute += ox::linalg::det(L.index_select(0, idx).index_select(1, idx)).item<double>();
    }
    const double ek = oxmera_cli::elementary_symmetric(lam, k);
    EXPECT_NEAR(ek, brute, 1e-10 * std::abs(brute)) << "k = " << k;
  }
  EXPECT_DOUBLE_EQ(oxmera_cli::elementary_symmetric({1.0, 2.0, 3.0}, 2), 11.0);
  EXPECT_DOUBLE_EQ(oxmera_cli::elementary_symmetric({1.0, 2.0, 3.0}, 3), 6.0);
}

}  // namespace
