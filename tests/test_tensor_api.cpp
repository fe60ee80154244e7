// The tensor API a PyTorch user reaches for: scalar comparisons and where, in-place ops with tensors, torch's
// arange dtype rule, from_vector for every integer type, random factories and libtorch-style indexing.
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "test_util.hpp"

using namespace oxmera;
using namespace oxmera::indexing;
using oxt::values;

namespace {
Tensor seq(const Shape& shape, DType dtype = DType::F64) {
  const int64_t n = shape.product();
  return arange(0.0, static_cast<double>(n), 1.0, dtype).reshape(shape);
}
template <class T>
concept from_vector_accepts = requires(const std::vector<T>& v) {
  from_vector(v, Shape{0});
};
Tensor idx(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector(v, {n});
}
}  // namespace

// ---------------------------------------------------------------- comparisons and where with scalars
TEST(TensorApi, ScalarComparisonsAreMasksOfTheTensorsDtype) {
  Tensor x = from_vector<double>({-1, 0, 0.5, 2}, {4});
  EXPECT_EQ(values(x > 0.0), (std::vector<double>{0, 0, 1, 1}));
  EXPECT_EQ(values(x >= 0.0), (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(values(x < 0.5), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(values(x <= 0.5), (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(values(x == 0.0), (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(values(x != 0.0), (std::vector<double>{1, 0, 1, 1}));
  EXPECT_EQ(values(0.0 < x), values(x > 0.0));
  EXPECT_EQ(values(0.5 >= x), values(x <= 0.5));
  EXPECT_EQ(values(2.0 == x), values(x.eq(2.0)));
  EXPECT_EQ((x > 0.0).dtype(), DType::F64);
  Tensor xi = from_vector<int64_t>({-3, 0, 7}, {3});
  EXPECT_EQ((xi > 0).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ((xi == xi).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ((xi != xi.neg()).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
}

TEST(TensorApi, ScalarFormsOfEveryPublicBinaryOpMatchTheTensorForms) {
  Tensor x = from_vector<double>({-1.5, 0.25, 2}, {3});
  Tensor s = full({}, 0.75, DType::F64);
  EXPECT_EQ(values(x.add(0.75)), values(x.add(s)));
  EXPECT_EQ(values(x.sub(0.75)), values(x.sub(s)));
  EXPECT_EQ(values(x.mul(0.75)), values(x.mul(s)));
  EXPECT_EQ(values(x.div(0.75)), values(x.div(s)));
  EXPECT_EQ(values(x.maximum(0.75)), values(x.maximum(s)));
  EXPECT_EQ(values(x.minimum(0.75)), values(x.minimum(s)));
  Tensor p = from_vector<double>({0.5, 1.5, 2}, {3});
  EXPECT_EQ(values(p.pow(3.0)), values(p.pow(full({}, 3.0, DType::F64))));
  EXPECT_EQ(values(p.pow(2.0)), values(p.square()));
}

TEST(TensorApi, WhereTakesScalarBranches) {
  Tensor x = from_vector<double>({-1, 2, -3, 4}, {4}).requires_grad_();
  Tensor y = where(x > 0.0, x, 0.0);
  EXPECT_EQ(values(y), (std::vector<double>{0, 2, 0, 4}));
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 0, 1}));
  EXPECT_EQ(values(where(x > 0.0, -1.0, x.detach())), (std::vector<double>{-1, -1, -3, -1}));
  Tensor both = where(x.detach() > 0.0, 1.0, -1.0);
  EXPECT_EQ(both.dtype(), DType::F64);
  EXPECT_EQ(values(both), (std::vector<double>{-1, 1, -1, 1}));
  Tensor u8 = from_vector<uint8_t>({1, 0}, {2});
  EXPECT_EQ(where(u8, 1.0, 0.0).dtype(), DType::F32);
  EXPECT_EQ(values(where(from_vector<int64_t>({0, 5}, {2}), 1.0, 2.0)), (std::vector<double>{2, 1}));
  EXPECT_OXM_ERROR(where(Tensor(), 1.0, 2.0), InvalidArgument, "where");
}

// ---------------------------------------------------------------- in place
TEST(TensorApi, InPlaceOpsWithTensorsBroadcastTheOperand) {
  Tensor x = seq({2, 3});
  Tensor row = from_vector<double>({1, 2, 4}, {3});
  Tensor want = x * row;
  x.mul_(row);
  EXPECT_EQ(values(x), values(want));
  want = x / row;
  x.div_(row);
  EXPECT_EQ(values(x), values(want));
  want = x - row * 2.0;
  x.sub_(row, 2.0);
  EXPECT_EQ(values(x), values(want));
  x.add_(1.0).sub_(0.5).mul_(2.0).div_(4.0);
  EXPECT_EQ(values(x), values((want + 0.5) * 2.0 / 4.0));
  // A transposed (non-contiguous) view is updated in place, and the base sees it.
  Tensor base = seq({3, 3});
  Tensor bt = base.t();
  bt.mul_(from_vector<double>({1, 10, 100}, {3}));
  EXPECT_EQ(values(base), (std::vector<double>{0, 1, 2, 30, 40, 50, 600, 700, 800}));
  // An operand that aliases self is read before it is written.
  Tensor m = seq({3, 3});
  Tensor expect = m * m.t();
  m.mul_(m.t());
  EXPECT_EQ(values(m), values(expect));
}

TEST(TensorApi, InPlaceOpsRejectWhatTheyCannotDo) {
  Tensor x = seq({3});
  EXPECT_OXM_ERROR(x.mul_(seq({2, 3})), ShapeMismatch, "mul_");
  EXPECT_OXM_ERROR(x.sub_(seq({3}, DType::F32)), DTypeMismatch, "sub_");
  EXPECT_OXM_ERROR(from_vector<int64_t>({1, 2}, {2}).div_(2.0), UnsupportedDType, "div_");
  Tensor w = seq({3}).requires_grad_();
  EXPECT_OXM_ERROR(w.mul_(seq({3})), InvalidArgument, "requires grad");
  {
    NoGradGuard ng;
    w.mul_(seq({3}));
  }
  EXPECT_EQ(values(w.detach()), (std::vector<double>{0, 1, 4}));
}

// ---------------------------------------------------------------- factories
TEST(TensorApi, ArangeFollowsTorchsDtypeRule) {
  Tensor a = arange(0, 10);
  EXPECT_EQ(a.dtype(), DType::I64);
  EXPECT_EQ(a.numel(), 10);
  Tensor b = arange(2, 11, 3);
  EXPECT_EQ(b.dtype(), DType::I64);
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(arange(int64_t{-4}, int64_t{0}).to_vector<int64_t>(), (std::vector<int64_t>{-4, -3, -2, -1}));
  Tensor c = arange(0, 1, 0.25);
  EXPECT_EQ(c.dtype(), DType::F32);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(arange(0.0, 3.0).dtype(), DType::F32);
  EXPECT_EQ(arange(0, 3, 1, DType::F64).dtype(), DType::F64);
  EXPECT_EQ(arange(10).dtype(), DType::I64);
}

TEST(TensorApi, FromVectorTakesEveryIntegerType) {
  EXPECT_EQ(from_vector(std::vector<int>{1, -2, 3}, {3}).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(from_vector(std::vector<int>{1, -2, 3}, {3}).dtype(), DType::I64);
  EXPECT_EQ(from_vector(std::vector<int16_t>{-7}, {1}).to_vector<int64_t>(), (std::vector<int64_t>{-7}));
  EXPECT_EQ(from_vector(std::vector<uint32_t>{4000000000u}, {1}).to_vector<int64_t>(),
            (std::vector<int64_t>{4000000000ll}));
  EXPECT_EQ(from_vector(std::vector<int8_t>{-1, 1}, {2, 1}).shape(), (Shape{2, 1}));
  Tensor b = from_vector(std::vector<bool>{true, false, true}, {3});
  EXPECT_EQ(b.dtype(), DType::U8);
  EXPECT_EQ(b.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_OXM_ERROR(from_vector(std::vector<uint64_t>{~0ull}, {1}), InvalidArgument, "does not fit");
  EXPECT_OXM_ERROR(from_vector(std::vector<int>{1, 2}, {3}), ShapeMismatch, "from_vector");
  // Element types oxmera cannot hold do not compile (rather than failing at link time).
  static_assert(!from_vector_accepts<std::string>);
  static_assert(!from_vector_accepts<long double>);
  static_assert(from_vector_accepts<unsigned char> && from_vector_accepts<short> && from_vector_accepts<float>);
}

TEST(TensorApi, RandintIsUniformInItsRangeAndSeeded) {
  Tensor a = randint(-3, 4, {20000}, 11);
  EXPECT_EQ(a.dtype(), DType::I64);
  std::map<int64_t, int> counts;
  for (int64_t v : a.to_vector<int64_t>()) ++counts[v];
  ASSERT_EQ(counts.size(), 7u);
  EXPECT_EQ(counts.begin()->first, -3);
  EXPECT_EQ(counts.rbegin()->first, 3);
  // Each of the 7 values is drawn 20000/7 = 2857 times, sd ~ 49: a 6 sd band.
  for (auto [v, c] : counts) EXPECT_NEAR(c, 20000.0 / 7, 300) << "value " << v;
  EXPECT_EQ(randint(-3, 4, {50}, 11).to_vector<int64_t>(), randint(-3, 4, {50}, 11).to_vector<int64_t>());
  EXPECT_NE(randint(-3, 4, {50}, 11).to_vector<int64_t>(), randint(-3, 4, {50}, 12).to_vector<int64_t>());
  Generator g(5);
  Tensor f = randint(0, 2, {4, 5}, g, DType::F32);
  EXPECT_EQ(f.dtype(), DType::F32);
  for (float v : f.to_vector<float>()) EXPECT_TRUE(v == 0.f || v == 1.f);
  // The full i64 range does not overflow.
  for (int64_t v : randint(INT64_MIN, INT64_MAX, {100}, 3).to_vector<int64_t>()) EXPECT_LT(v, INT64_MAX);
  EXPECT_OXM_ERROR(randint(3, 3, {2}, 1), InvalidArgument, "low < high");
  EXPECT_OXM_ERROR(randint(0, 300, {2}, 1, DType::U8), InvalidArgument, "u8");
}

TEST(TensorApi, RandpermIsAPermutation) {
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    std::vector<int64_t> p = randperm(n, 42).to_vector<int64_t>();
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> want(static_cast<size_t>(n));
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted, want) << n;
  }
  EXPECT_EQ(randperm(100, 1).to_vector<int64_t>(), randperm(100, 1).to_vector<int64_t>());
  EXPECT_NE(randperm(100, 1).to_vector<int64_t>(), randperm(100, 2).to_vector<int64_t>());
  // Every position is equally likely to hold 0: 3000 permutations of 3, each of the 3 positions ~1000 times.
  Generator g(9);
  int first[3] = {0, 0, 0};
  for (int r = 0; r < 3000; ++r) {
    auto p = randperm(3, g).to_vector<int64_t>();
    ++first[std::find(p.begin(), p.end(), 0) - p.begin()];
  }
  for (int c : first) EXPECT_NEAR(c, 1000, 160);
  EXPECT_OXM_ERROR(randperm(-1, 1), InvalidArgument, "randperm");
}

TEST(TensorApi, MultinomialDrawsByWeight) {
  Tensor w = from_vector<double>({1, 0, 3}, {3});  // unnormalised, category 1 never drawn
  std::vector<int64_t> d = multinomial(w, 40000, true, 3).to_vector<int64_t>();
  int c[3] = {0, 0, 0};
  for (int64_t v : d) ++c[v];
  EXPECT_EQ(c[1], 0);
  EXPECT_NEAR(c[0], 10000, 600);  // sd ~ 87
  EXPECT_NEAR(c[2], 30000, 600);
  // Without replacement: distinct categories; 2-d rows are independent.
  Tensor rows = from_vector<float>({1, 1, 1, 1, 0, 0, 5, 1}, {2, 4});
  Tensor s = multinomial(rows, 2, false, 8);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  auto sv = s.to_vector<int64_t>();
  EXPECT_NE(sv[0], sv[1]);
  EXPECT_EQ(std::set<int64_t>({sv[2], sv[3]}), (std::set<int64_t>{2, 3}));
  EXPECT_EQ(multinomial(w, 5, true, 4).to_vector<int64_t>(), multinomial(w, 5, true, 4).to_vector<int64_t>());
  EXPECT_OXM_ERROR(multinomial(w, 3, false, 1), InvalidArgument, "positive weight");
  EXPECT_OXM_ERROR(multinomial(w, 4, false, 1), InvalidArgument, "without replacement");
  EXPECT_OXM_ERROR(multinomial(from_vector<double>({1, -1}, {2}), 1, true, 1), InvalidArgument, "non-negative");
  EXPECT_OXM_ERROR(multinomial(from_vector<int64_t>({1, 1}, {2}), 1, true, 1), UnsupportedDType, "multinomial");
  EXPECT_OXM_ERROR(multinomial(seq({1, 2, 2}), 1, true, 1), InvalidArgument, "1-d or 2-d");
}

TEST(TensorApi, BernoulliDrawsOnesWithProbabilityP) {
  Tensor p = full({10000}, 0.3, DType::F64);
  Tensor b = bernoulli(p, 5);
  EXPECT_EQ(b.dtype(), DType::F64);
  EXPECT_NEAR(b.mean().item<double>(), 0.3, 0.03);  // sd ~ 0.0046
  EXPECT_EQ(values(bernoulli(from_vector<float>({0, 1, 0, 1}, {2, 2}), 1)), (std::vector<double>{0, 1, 0, 1}));
  EXPECT_OXM_ERROR(bernoulli(from_vector<double>({0.5, 1.5}, {2}), 1), InvalidArgument, "outside [0, 1]");
}

// ---------------------------------------------------------------- indexing
TEST(TensorApi, BasicIndexingIsAViewWithTorchsShapes) {
  Tensor x = seq({2, 3, 4, 5});
  Tensor v = x.index({1, Slice(), Slice(1, None, 2), -1});
  EXPECT_EQ(v.shape(), (Shape{3, 2}));
  EXPECT_TRUE(v.shares_storage(x));
  EXPECT_EQ(values(v), values(x.select(0, 1).slice(1, 1, 4, 2).select(2, 4)));
  EXPECT_EQ(x.index({None, 1}).shape(), (Shape{1, 3, 4, 5}));
  EXPECT_EQ(x.index({Ellipsis, 0}).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.index({0, Ellipsis, None}).shape(), (Shape{3, 4, 5, 1}));
  EXPECT_EQ(x.index({Slice(-2, None)}).shape(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(x.index({Slice(None, -1)}).shape(), (Shape{1, 3, 4, 5}));
  EXPECT_EQ(x.index({Slice(5, 9)}).shape(), (Shape{0, 3, 4, 5}));  // ends clamp, as in Python
  EXPECT_EQ(x.index({}).shape(), x.shape());
}

TEST(TensorApi, AdvancedIndexingPlacesDimsAsTorchDoes) {
  Tensor x = seq({2, 3, 4, 5});
  Tensor i = idx({0, 1, 1});
  // Shapes checked against torch 1.13: x[0,:,i], x[:,i,0], x[i,:,0], x[:,i,:,i], x[...,i], x[:,i,None,i], x[1,i,:,2]
  EXPECT_EQ(x.index({0, Slice(), i}).shape(), (Shape{3, 3, 5}));
  EXPECT_EQ(x.index({Slice(), i, 0}).shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(x.index({i, Slice(), 0}).shape(), (Shape{3, 3, 5}));
  EXPECT_EQ(x.index({Slice(), i, Slice(), i}).shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(x.index({Ellipsis, i}).shape(), (Shape{2, 3, 4, 3}));
  EXPECT_EQ(x.index({Slice(), i, None, i}).shape(), (Shape{3, 2, 1, 5}));
  EXPECT_EQ(x.index({1, i, Slice(), 2}).shape(), (Shape{3, 4}));
  // Values against select / index_select.
  EXPECT_EQ(values(x.index({0, Slice(), i})), values(x.select(0, 0).index_select(1, i)));
  // Two index tensors pick pairs (out[j] = x[a[j], b[j]]), broadcasting together; negatives count from the back.
  Tensor m = seq({3, 4});
  Tensor a = from_vector<int64_t>({0, 2, -1}, {3, 1}), b = from_vector<int64_t>({1, 3}, {2});
  Tensor pairs = m.index({a, b});
  EXPECT_EQ(pairs.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(pairs), (std::vector<double>{1, 3, 9, 11, 9, 11}));
  // logits[arange(n), target]: the picked log-probabilities.
  Tensor logits = seq({3, 4});
  EXPECT_EQ(values(logits.index({arange(3), idx({3, 0, 2})})), (std::vector<double>{3, 4, 10}));
}

TEST(TensorApi, MasksSelectWhereNonZero) {
  Tensor x = from_vector<double>({-1, 2, -3, 4, 5, -6}, {2, 3});
  EXPECT_EQ(values(x.index({x > 0.0})), (std::vector<double>{2, 4, 5}));
  Tensor rows = from_vector<uint8_t>({0, 1}, {2});
  EXPECT_EQ(values(x.index({rows})), (std::vector<double>{4, 5, -6}));
  EXPECT_EQ(x.index({rows}).shape(), (Shape{1, 3}));
  EXPECT_EQ(values(x.index({Slice(), from_vector<uint8_t>({1, 0, 1}, {3})})), (std::vector<double>{-1, -3, 4, -6}));
  EXPECT_OXM_ERROR(x.index({from_vector<uint8_t>({1, 0, 1}, {3})}), ShapeMismatch, "mask");
  EXPECT_OXM_ERROR(x.index({from_vector<double>({0, 2}, {2})}), DTypeMismatch, "I64");
}

TEST(TensorApi, IndexingIsDifferentiable) {
  Tensor i = from_vector<int64_t>({2, 0, 2}, {3});  // a duplicate: its gradient accumulates
  auto r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return in[0].index({Slice(), i, None, Slice(1, None)}).square().sum() + in[0].index({1, Ellipsis}).sum();
      },
      {randn({2, 3, 3}, 4, DType::F64).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor x = seq({2, 3}).requires_grad_();
  x.index({Slice(), i}).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 0, 2, 1, 0, 2}));
}

TEST(TensorApi, IndexingRejectsBadIndices) {
  Tensor x = seq({2, 3});
  EXPECT_OXM_ERROR(x.index({2}), IndexOutOfBounds, "index 2");
  EXPECT_OXM_ERROR(x.index({0, 0, 0}), IndexOutOfBounds, "3 dims indexed");
  EXPECT_OXM_ERROR(x.index({Slice(), idx({3})}), IndexOutOfBounds, "index 3");
  EXPECT_OXM_ERROR(x.index({Ellipsis, Ellipsis}), InvalidArgument, "Ellipsis");
  EXPECT_OXM_ERROR(x.index({Slice(0, 2, 0)}), InvalidArgument, "step");
  EXPECT_OXM_ERROR(x.index({idx({0, 1}), idx({0, 1, 2})}), BroadcastIncompatible, "index");
}

TEST(TensorApi, IndexPutWritesAndAccumulates) {
  Tensor x = zeros({3, 4}, DType::F64);
  x.index_put_({Slice(), 0}, 7.0);
  x.index_put_({1, Slice(1, 3)}, from_vector<double>({1, 2}, {2}));
  EXPECT_EQ(values(x), (std::vector<double>{7, 0, 0, 0, 7, 1, 2, 0, 7, 0, 0, 0}));
  // Tensor indices: duplicates take the last value, or accumulate.
  Tensor y = zeros({5}, DType::F64);
  y.index_put_({idx({1, 3, 1})}, from_vector<double>({10, 20, 30}, {3}));
  EXPECT_EQ(values(y), (std::vector<double>{0, 30, 0, 20, 0}));
  y.index_put_({idx({1, 3, 1})}, from_vector<double>({1, 2, 3}, {3}), true);
  EXPECT_EQ(values(y), (std::vector<double>{0, 34, 0, 22, 0}));
  // A mask: relu in place; pairs of indices on a transposed view write through to the base.
  Tensor z = from_vector<double>({-1, 2, -3, 4}, {2, 2});
  z.index_put_({z < 0.0}, 0.0);
  EXPECT_EQ(values(z), (std::vector<double>{0, 2, 0, 4}));
  Tensor base = zeros({2, 3}, DType::F64);
  Tensor t = base.t();
  t.index_put_({idx({2, 0}), idx({1, 0})}, from_vector<double>({5, 6}, {2}));
  EXPECT_EQ(values(base), (std::vector<double>{6, 0, 0, 0, 0, 5}));
  // Index dims after a slice stay in place (result [3, 2]); values are taken back to the indexed order.
  Tensor c = zeros({3, 4}, DType::F64);
  c.index_put_({Slice(), idx({2, 0})}, seq({3, 2}));
  EXPECT_EQ(values(c), (std::vector<double>{1, 0, 0, 0, 3, 0, 2, 0, 5, 0, 4, 0}));
  EXPECT_EQ(values(c.index({Slice(), idx({2, 0})})), values(seq({3, 2})));
  // Values broadcast to the indexed shape; a value of another dtype is converted.
  Tensor w = zeros({2, 3}, DType::F32);
  w.index_put_({idx({1})}, from_vector<double>({1, 2, 3}, {3}));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, 0, 0, 1, 2, 3}));
  EXPECT_OXM_ERROR(w.index_put_({idx({1})}, seq({2})), BroadcastIncompatible, "index_put_");
  Tensor g = zeros({3}, DType::F64).requires_grad_();
  EXPECT_OXM_ERROR(g.index_put_({0}, 1.0), InvalidArgument, "requires grad");
  EXPECT_OXM_ERROR(zeros({3}, DType::F64).index_put_({0}, seq({1}).requires_grad_()), NotImplemented, "autograd");
}
