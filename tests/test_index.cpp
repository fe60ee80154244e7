// Index and assembly ops against explicit loops, their errors, and gradcheck of their backward rules.
#include "test_util.hpp"

using namespace oxt;

namespace {
Tensor u64(const Shape& s, uint64_t seed) { return (rand(s, seed, DType::F64) * 2.0 - 1.0).requires_grad_(); }
Tensor idx(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector<int64_t>(v, {n});
}
void expect_gc(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
               const std::string& what) {
  GradcheckResult r = gradcheck(f, in);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}
}  // namespace

TEST(IndexSelect, AgainstLoopsOnLayouts) {
  for (DType dt : {DType::F32, DType::F64, DType::I64}) {
    Tensor base = arange(0.0, 60.0, 1.0, DType::F64).reshape({3, 4, 5}).to(dt);
    for (int layout = 0; layout < 2; ++layout) {
      Tensor x = layout == 0 ? base : base.permute({2, 0, 1}).contiguous().permute({1, 2, 0});  // same values, strided
      auto xv = values(x.to(DType::F64));
      Tensor i = idx({2, 0, 2, 1});
      for (int64_t dim : {0, 1, 2}) {
        Tensor y = x.index_select(dim, dim == 0 ? idx({2, 0, 2}) : i);
        auto yv = values(y.to(DType::F64));
        Shape s = y.shape();
        std::vector<int64_t> sel = dim == 0 ? std::vector<int64_t>{2, 0, 2} : std::vector<int64_t>{2, 0, 2, 1};
        for (int64_t a = 0; a < s[0]; ++a)
          for (int64_t b = 0; b < s[1]; ++b)
            for (int64_t c = 0; c < s[2]; ++c) {
              int64_t p[3] = {a, b, c};
              p[dim] = sel[static_cast<size_t>(p[dim])];
              EXPECT_EQ(yv[(a * s[1] + b) * s[2] + c], xv[(p[0] * 4 + p[1]) * 5 + p[2]]) << dim;
            }
      }
    }
  }
  Tensor x = zeros({3, 2});
  EXPECT_OXM_ERROR(x.index_select(0, idx({0, 3})), IndexOutOfBounds, "index 3");
  EXPECT_OXM_ERROR(x.index_select(0, idx({-1})), IndexOutOfBounds, "index -1");
  EXPECT_OXM_ERROR(x.index_select(0, ones({2})), DTypeMismatch, "i64");
  EXPECT_OXM_ERROR(x.index_select(2, idx({0})), IndexOutOfBounds, "dim 2");
  EXPECT_OXM_ERROR(x.index_select(0, zeros({1, 1}, DType::I64)), InvalidArgument, "1-d");
  EXPECT_EQ(x.index_select(0, zeros({0}, DType::I64)).shape(), Shape({0, 2}));
  EXPECT_EQ(x.index_select(1, scalar(1.0, DType::I64)).shape(), Shape({3, 1}));
}

TEST(IndexAdd, DuplicatesAccumulateDeterministically) {
  Tensor self = zeros({4, 2}, DType::F64);
  Tensor src = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor y = self.index_add(0, idx({1, 3, 1}), src);
  EXPECT_EQ(y.to_vector<double>(), std::vector<double>({0, 0, 6, 8, 0, 0, 3, 4}));
  EXPECT_EQ(self.sum().item<double>(), 0.0);  // out of place
  Tensor z = ones({2, 3}).index_add(1, idx({2, 2}), ones({2, 2}));
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>({1, 1, 3, 1, 1, 3}));
  // Many duplicates: order-independent of threads (exact integer-valued sums).
  Tensor big = zeros({5, 64}).index_add(0, zeros({10000}, DType::I64), ones({10000, 64}));
  EXPECT_EQ(big.sum({1}).to_vector<float>(), std::vector<float>({640000, 0, 0, 0, 0}));
  EXPECT_OXM_ERROR(self.index_add(0, idx({0}), ones({1, 3}, DType::F64)), ShapeMismatch, "needs [1, 2]");
  EXPECT_OXM_ERROR(self.index_add(0, idx({4}), ones({1, 2}, DType::F64)), IndexOutOfBounds, "index 4");
  EXPECT_OXM_ERROR(self.index_add(0, idx({0}), ones({1, 2})), DTypeMismatch, "src");
}

TEST(GatherScatter, AgainstLoops) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor i = from_vector<int64_t>({2, 0, 1, 1}, {2, 2});
  EXPECT_EQ(x.gather(1, i).to_vector<double>(), std::vector<double>({3, 1, 5, 5}));
  Tensor i0 = from_vector<int64_t>({1, 0, 1}, {1, 3});
  EXPECT_EQ(x.gather(0, i0).to_vector<double>(), std::vector<double>({4, 2, 6}));
  EXPECT_EQ(x.t().gather(0, from_vector<int64_t>({2, 0}, {1, 2})).to_vector<double>(), std::vector<double>({3, 4}));
  Tensor s = zeros({2, 3}, DType::F64).scatter_add(1, i, from_vector<double>({10, 20, 30, 40}, {2, 2}));
  EXPECT_EQ(s.to_vector<double>(), std::vector<double>({20, 0, 10, 0, 70, 0}));
  EXPECT_OXM_ERROR(x.gather(1, from_vector<int64_t>({3}, {1, 1})), IndexOutOfBounds, "index 3");
  EXPECT_OXM_ERROR(x.gather(1, from_vector<int64_t>({0}, {1})), ShapeMismatch, "rank");
  EXPECT_OXM_ERROR(x.gather(1, zeros({3, 1}, DType::I64)), ShapeMismatch, "exceeds");
}

TEST(CatStackPad, ShapesValuesErrors) {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2}), b = from_vector<float>({5, 6}, {1, 2});
  EXPECT_EQ(cat({a, b}, 0).to_vector<float>(), std::vector<float>({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(cat({a, a.t()}, 1).to_vector<float>(), std::vector<float>({1, 2, 1, 3, 3, 4, 2, 4}));
  EXPECT_EQ(cat({a, zeros({0, 2})}, 0).shape(), Shape({2, 2}));
  EXPECT_OXM_ERROR(cat({a, b}, 1), ShapeMismatch, "all dims except");
  EXPECT_OXM_ERROR(cat({a, b.to(DType::F64)}, 0), DTypeMismatch, "cat");
  EXPECT_OXM_ERROR(cat({}, 0), InvalidArgument, "at least one");
  EXPECT_OXM_ERROR(cat({scalar(1.0)}, 0), InvalidArgument, "0-d");
  Tensor st = stack({a, a * 2.0}, 1);
  EXPECT_EQ(st.shape(), Shape({2, 2, 2}));
  EXPECT_EQ(st.to_vector<float>(), std::vector<float>({1, 2, 2, 4, 3, 4, 6, 8}));
  EXPECT_EQ(stack({a, a}, -1).shape(), Shape({2, 2, 2}));
  EXPECT_OXM_ERROR(stack({a, b}), ShapeMismatch, "stack");
  Tensor p = pad(a, 1, 1, 2, -1.0);
  EXPECT_EQ(p.shape(), Shape({2, 5}));
  EXPECT_EQ(p.to_vector<float>(), std::vector<float>({-1, 1, 2, -1, -1, -1, 3, 4, -1, -1}));
  EXPECT_EQ(pad(a, 0, 0, 0).to_vector<float>(), a.to_vector<float>());
  EXPECT_OXM_ERROR(pad(a, 0, -1, 0), InvalidArgument, "crop");
}

TEST(OneHot, ValuesAndErrors) {
  Tensor oh = one_hot(idx({2, 0, 1}), 4);
  EXPECT_EQ(oh.shape(), Shape({3, 4}));
  EXPECT_EQ(oh.to_vector<float>(), std::vector<float>({0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(one_hot(idx({3, 1})).shape(), Shape({2, 4}));
  EXPECT_EQ(one_hot(from_vector<int64_t>({1, 0}, {2, 1}), 2, DType::F64).shape(), Shape({2, 1, 2}));
  EXPECT_OXM_ERROR(one_hot(idx({5}), 3), IndexOutOfBounds, "index 5");
  EXPECT_OXM_ERROR(one_hot(idx({-2}), 3), IndexOutOfBounds, "index -2");
  EXPECT_OXM_ERROR(one_hot(ones({2}), 3), DTypeMismatch, "i64");
}

TEST(IndexGradcheck, AllIndexOps) {
  Tensor x = u64({4, 3}, 1), y = u64({2, 3}, 2), z = u64({4, 2}, 3);
  expect_gc([](const std::vector<Tensor>& v) { return v[0].index_select(0, idx({3, 1, 3})); }, {x}, "index_select 0");
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return v[0].t().index_select(1, idx({0, 0, 2}));
      },
      {x}, "index_select t");
  expect_gc([](const std::vector<Tensor>& v) { return v[0].index_add(0, idx({1, 1}), v[1]); }, {x, y}, "index_add");
  Tensor gi = from_vector<int64_t>({2, 0, 1, 1, 0, 0, 2, 2}, {4, 2});
  expect_gc([&](const std::vector<Tensor>& v) { return v[0].gather(1, gi); }, {x}, "gather");
  expect_gc([&](const std::vector<Tensor>& v) { return v[0].scatter_add(1, gi, v[1]); }, {x, z}, "scatter_add");
  // an index smaller than src: src entries outside it are unused and get a zero gradient
  Tensor gs = from_vector<int64_t>({2, 0, 1, 1, 0, 2}, {3, 2});
  Tensor big = u64({4, 3}, 5);
  expect_gc([&](const std::vector<Tensor>& v) { return v[0].scatter_add(1, gs, v[1]); }, {x, big},
            "scatter_add, index smaller than src");
  expect_gc([](const std::vector<Tensor>& v) { return cat({v[0], v[1], v[0]}, 0); }, {x, y}, "cat");
  expect_gc([](const std::vector<Tensor>& v) { return stack({v[0], v[0] * 2.0}, 2); }, {x}, "stack");
  expect_gc([](const std::vector<Tensor>& v) { return pad(v[0], 1, 2, 1, 3.0).square(); }, {x}, "pad");
  expect_gc([](const std::vector<Tensor>& v) { return v[0].narrow(0, 1, 2).exp(); }, {x}, "narrow");
  // The research workload's shape: logdet-free part — principal submatrices selected twice.
  Tensor k = u64({5, 5}, 4);
  expect_gc(
      [](const std::vector<Tensor>& v) {
        return v[0].index_select(0, idx({4, 1, 2})).index_select(1, idx({4, 1, 2}));
      },
      {k}, "principal submatrix");
}
