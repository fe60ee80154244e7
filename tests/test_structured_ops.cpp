// Hand-checked values, torch's conventions and the typed errors of the structured ops added for issue #13
// (tril/triu, masked_fill, cumsum/cumprod, sort/argsort/topk, chunk/split/unbind, var/std, norm, repeat/tile,
// flip/roll, any/all, and the int-taking reduction overloads). The conformance suite compares each of them
// in f32 with the f64 CPU and gradchecks them; the parity suite compares them with torch.
#include <cmath>
#include <type_traits>

#include "oxmera/autograd.hpp"
#include "test_util.hpp"

namespace {
using namespace oxt;

Tensor vec(std::vector<double> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector<double>(v, {n});
}
std::vector<int64_t> ivals(const Tensor& t) { return t.to_vector<int64_t>(); }

TEST(StructuredOps, TrilTriuKeepTheirTriangleBatched) {
  Tensor x = arange(0, 18, 1, DType::F64).reshape({2, 3, 3});
  EXPECT_EQ(values(x.tril()), (std::vector<double>{0, 0, 0, 3, 4, 0, 6, 7, 8, 9, 0, 0, 12, 13, 0, 15, 16, 17}));
  EXPECT_EQ(values(x.triu(1).select(0, 0)), (std::vector<double>{0, 1, 2, 0, 0, 5, 0, 0, 0}));
  EXPECT_EQ(values(x.tril(-1).select(0, 1)), (std::vector<double>{0, 0, 0, 12, 0, 0, 15, 16, 0}));
  Tensor xi = arange(6).reshape({2, 3});
  EXPECT_EQ(ivals(xi.triu()), (std::vector<int64_t>{0, 1, 2, 0, 4, 5}));
  EXPECT_OXM_ERROR(vec({1, 2}).tril(), InvalidArgument, "tril");
}

TEST(StructuredOps, MaskedFillBroadcastsTheMaskAndZeroesTheFilledGradient) {
  Tensor x = vec({1, 2, 3, 4, 5, 6}).reshape({2, 3}).requires_grad_();
  Tensor mask = from_vector<uint8_t>({1, 0, 1}, {3});
  Tensor y = x.masked_fill(mask, -1.5);
  EXPECT_EQ(values(y), (std::vector<double>{-1.5, 2, -1.5, -1.5, 5, -1.5}));
  (y * 2.0).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 2, 0, 0, 2, 0}));
  // a 0-d tensor value receives the gradient of the filled positions
  Tensor v = scalar(0.5, DType::F64).requires_grad_();
  x.masked_fill(mask, v).sum().backward();
  EXPECT_EQ(v.grad().item<double>(), 4.0);
  EXPECT_OXM_ERROR(x.masked_fill(from_vector<uint8_t>({1, 0}, {2}), 0.0), BroadcastIncompatible, "masked_fill");
  EXPECT_OXM_ERROR(vec({1}).masked_fill(from_vector<uint8_t>({1, 0}, {2}), 0.0), ShapeMismatch, "self's shape");
  EXPECT_OXM_ERROR(x.masked_fill(ones({3}, DType::F32), 0.0), DTypeMismatch, "masked_fill");
  EXPECT_OXM_ERROR(x.masked_fill(mask, vec({1, 2})), InvalidArgument, "0-d");
}

TEST(StructuredOps, CumsumAndCumprodWithZeros) {
  EXPECT_EQ(values(vec({1, 2, 3}).cumsum(0)), (std::vector<double>{1, 3, 6}));
  EXPECT_EQ(ivals(arange(6).reshape({2, 3}).cumsum(1)), (std::vector<int64_t>{0, 1, 3, 3, 7, 12}));
  EXPECT_EQ(values(vec({1, 2, 0, 3}).cumprod(0)), (std::vector<double>{1, 2, 0, 0}));
  // d/dx of sum(cumprod([2, 0, 3])) = [1 + x1 + x1 x2, x0 + x0 x2, x0 x1] = [1, 8, 0]
  Tensor x = vec({2, 0, 3}).requires_grad_();
  x.cumprod(0).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 8, 0}));
  Tensor z = vec({0, 0, 2}).requires_grad_();
  z.cumprod(0).sum().backward();
  EXPECT_EQ(values(z.grad()), (std::vector<double>{1, 0, 0}));
  Tensor c = vec({1, 2, 3}).requires_grad_();
  (c.cumsum(0) * vec({1, 10, 100})).sum().backward();
  EXPECT_EQ(values(c.grad()), (std::vector<double>{111, 110, 100}));
  EXPECT_OXM_ERROR(vec({1}).cumsum(1), IndexOutOfBounds, "cumsum");
}

TEST(StructuredOps, SortIsStableAndNanIsTheLargest) {
  auto [v, i] = vec({3, 1, NAN, 2, 1}).sort();
  std::vector<double> got = values(v);
  EXPECT_EQ(std::vector<double>(got.begin(), got.begin() + 4), (std::vector<double>{1, 1, 2, 3}));
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_EQ(ivals(i), (std::vector<int64_t>{1, 4, 3, 0, 2}));
  EXPECT_EQ(ivals(vec({3, 1, NAN, 2, 1}).argsort(0, true)), (std::vector<int64_t>{2, 0, 3, 1, 4}));
  Tensor x = vec({1, 5, 3, 4}).requires_grad_();
  auto [tv, ti] = x.topk(2);
  EXPECT_EQ(values(tv), (std::vector<double>{5, 4}));
  EXPECT_EQ(ivals(ti), (std::vector<int64_t>{1, 3}));
  tv.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 0, 1}));
  EXPECT_EQ(ivals(std::get<1>(vec({1, 5, 3, 4}).topk(3, 0, false))), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_OXM_ERROR(vec({1, 2}).topk(3), InvalidArgument, "topk");
  EXPECT_OXM_ERROR(from_vector<uint8_t>({1}, {1}).sort(), UnsupportedDType, "sort");
}

TEST(StructuredOps, ChunkSplitUnbindAreViewsAsInTorch) {
  Tensor x = arange(0, 10, 1, DType::F64).reshape({5, 2});
  std::vector<Tensor> c = x.chunk(2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(c[1].shape(), (Shape{2, 2}));
  EXPECT_TRUE(c[1].shares_storage(x));
  EXPECT_EQ(x.chunk(4).size(), 3u);  // ceil(5 / 4) = 2 per piece: 3 pieces, as torch
  std::vector<Tensor> s = x.split(2);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2].shape(), (Shape{1, 2}));
  std::vector<Tensor> w = x.split({1, 4});
  EXPECT_EQ(values(w[1].select(0, 0)), (std::vector<double>{2, 3}));
  std::vector<Tensor> u = x.unbind(1);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(values(u[1]), (std::vector<double>{1, 3, 5, 7, 9}));
  EXPECT_OXM_ERROR(x.split({1, 3}), ShapeMismatch, "sum to 4");
  EXPECT_OXM_ERROR(x.split(0), InvalidArgument, "split");
  EXPECT_OXM_ERROR(x.chunk(0), InvalidArgument, "chunk");
}

TEST(StructuredOps, VarStdNorm) {
  Tensor x = vec({1, 2, 3, 4});
  EXPECT_NEAR(x.var().item<double>(), 5.0 / 3.0, 1e-15);
  EXPECT_NEAR(x.var({}, 0).item<double>(), 1.25, 1e-15);
  EXPECT_NEAR(x.std().item<double>(), std::sqrt(5.0 / 3.0), 1e-15);
  EXPECT_TRUE(std::isnan(vec({2}).var().item<double>()));  // count - correction = 0, as torch
  Tensor m = vec({1, 2, 3, 4, 6, 8}).reshape({2, 3});
  EXPECT_EQ(m.var(1, 0.0, true).shape(), (Shape{2, 1}));
  expect_close(values(m.var(1)), {1, 4}, 1e-15, 1e-15, "var dim 1");
  EXPECT_EQ(vec({3, -4}).norm().item<double>(), 5);
  EXPECT_EQ(vec({-7, 2}).norm(INFINITY).item<double>(), 7);
  EXPECT_EQ(vec({-7, 2}).norm(-INFINITY).item<double>(), 2);
  EXPECT_EQ(vec({-7, 2}).norm(1).item<double>(), 9);
  EXPECT_EQ(vec({0, 2, 0}).norm(0).item<double>(), 1);
  // the 2-norm's gradient at 0 is 0 (torch), not NaN
  Tensor z = zeros({3}, DType::F64).requires_grad_();
  z.norm().backward();
  EXPECT_EQ(values(z.grad()), (std::vector<double>{0, 0, 0}));
  EXPECT_OXM_ERROR(arange(3).var(), UnsupportedDType, "var");
  EXPECT_OXM_ERROR(zeros({0}, DType::F64).norm(INFINITY), EmptyReduction, "norm");
}

TEST(StructuredOps, RepeatTileFlipRoll) {
  Tensor x = vec({1, 2});
  EXPECT_EQ(values(x.repeat({2, 2})), (std::vector<double>{1, 2, 1, 2, 1, 2, 1, 2}));
  EXPECT_EQ(x.repeat({2, 2}).shape(), (Shape{2, 4}));
  EXPECT_EQ(x.tile({2}).shape(), (Shape{4}));
  EXPECT_OXM_ERROR(arange(4).reshape({2, 2}).repeat({2}), InvalidArgument, "repeat");
  Tensor y = arange(0, 6, 1, DType::F64).reshape({2, 3});
  EXPECT_EQ(values(y.flip({1})), (std::vector<double>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(values(y.flip({0, 1})), (std::vector<double>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(values(vec({1, 2, 3, 4, 5}).roll({2})), (std::vector<double>{4, 5, 1, 2, 3}));
  EXPECT_EQ(values(y.roll({1})), (std::vector<double>{5, 0, 1, 2, 3, 4}));  // no dims: the flattened tensor
  EXPECT_EQ(values(y.roll({-1}, {1})), (std::vector<double>{1, 2, 0, 4, 5, 3}));
  EXPECT_OXM_ERROR(y.roll({1, 2}, {0}), InvalidArgument, "roll");
}

TEST(StructuredOps, AnyAllAreMasksOfTheInputDtype) {
  Tensor x = vec({0, 0, 1, NAN, 2, 3}).reshape({2, 3});
  Tensor a = x.any({1});
  EXPECT_EQ(a.dtype(), DType::F64);
  EXPECT_EQ(values(a), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(x.all({1})), (std::vector<double>{0, 1}));  // NaN is nonzero, as torch
  EXPECT_EQ(values(x.all()), (std::vector<double>{0}));
  EXPECT_EQ(values(zeros({0}, DType::F64).all()), (std::vector<double>{1}));
  EXPECT_EQ(values(zeros({0}, DType::F64).any()), (std::vector<double>{0}));
  EXPECT_EQ(ivals(arange(3).any()), (std::vector<int64_t>{1}));
}

TEST(StructuredOps, IntOverloadsMeanWhatTorchMeans) {
  Tensor x = arange(0, 6, 1, DType::F64).reshape({2, 3});
  EXPECT_EQ(values(x.sum(1)), values(x.sum({1})));
  EXPECT_EQ(values(x.mean(-1)), (std::vector<double>{1, 4}));
  EXPECT_EQ(x.sum(0, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(x.sum().item<double>(), 15);
  EXPECT_EQ(x.sum({0, 1}).item<double>(), 15);
  EXPECT_EQ(x.sum({}).item<double>(), 15);  // a braced list is still Dims: {} means all dims
  static_assert(std::is_same_v<decltype(x.max({1})), Tensor>);
  static_assert(std::is_same_v<decltype(x.max(1)), std::tuple<Tensor, Tensor>>);
  auto [v, i] = x.max(1);
  EXPECT_EQ(values(v), (std::vector<double>{2, 5}));
  EXPECT_EQ(ivals(i), (std::vector<int64_t>{2, 2}));
  auto [mv, mi] = x.min(0, true);
  EXPECT_EQ(mv.shape(), (Shape{1, 3}));
  EXPECT_EQ(ivals(mi), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_NEAR(x.var(1).select(0, 0).item<double>(), 1.0, 1e-15);
  // max(dim)'s gradient reaches the selected element only (ties: the first), as torch's
  Tensor t = vec({1, 3, 3}).requires_grad_();
  std::get<0>(t.max(0)).backward();
  EXPECT_EQ(values(t.grad()), (std::vector<double>{0, 1, 0}));
}

}  // namespace
