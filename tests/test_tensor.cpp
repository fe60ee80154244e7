#include "test_util.hpp"

using namespace oxt;

TEST(Construct, FromVectorAndFactories) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(a.shape(), Shape({2, 3}));
  EXPECT_EQ(a.dim(), 2);
  EXPECT_EQ(a.numel(), 6);
  EXPECT_EQ(a.dtype(), DType::F32);
  EXPECT_EQ(a.device(), Device::cpu());
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(a.size(-1), 3);
  EXPECT_EQ(a.stride(0), 3);
  EXPECT_OXM_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), ShapeMismatch, "3 values");
  EXPECT_EQ(zeros({2, 2}, DType::F64).to_vector<double>(), std::vector<double>(4, 0.0));
  EXPECT_EQ(ones({3}, DType::I64).to_vector<int64_t>(), std::vector<int64_t>(3, 1));
  EXPECT_EQ(full({2}, 2.5).to_vector<float>(), std::vector<float>({2.5f, 2.5f}));
  EXPECT_EQ(arange(4).to_vector<int64_t>(), std::vector<int64_t>({0, 1, 2, 3}));
  EXPECT_EQ(arange(0.0, 1.0, 0.25, DType::F64).to_vector<double>(), std::vector<double>({0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(eye(2, DType::F64).to_vector<double>(), std::vector<double>({1, 0, 0, 1}));
  EXPECT_EQ(scalar(3.0).dim(), 0);
  EXPECT_EQ(scalar(3.0).item<float>(), 3.0f);
  EXPECT_EQ(from_vector<uint8_t>({1, 255}, {2}).to_vector<uint8_t>(), std::vector<uint8_t>({1, 255}));
  EXPECT_EQ(zeros({0, 3}).numel(), 0);
  EXPECT_OXM_ERROR(arange(-1), InvalidArgument, "arange");
  EXPECT_OXM_ERROR(randn({2}, 1, DType::I64), UnsupportedDType, "randn");
}

TEST(Access, ItemAndTypeChecks) {
  Tensor a = from_vector<double>({1.5}, {1});
  EXPECT_EQ(a.item<double>(), 1.5);
  EXPECT_OXM_ERROR(a.item<float>(), DTypeMismatch, "f64");
  EXPECT_OXM_ERROR(ones({2}).item<float>(), ShapeMismatch, "one-element");
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_OXM_ERROR(u.shape(), InvalidArgument, "undefined");
  EXPECT_OXM_ERROR(u + u, InvalidArgument, "undefined");
}

TEST(Views, ReshapeSharesStorageWhenPossible) {
  Tensor a = arange(0.0, 12.0, 1.0, DType::F64).reshape({3, 4});
  Tensor b = a.reshape({4, 3});
  EXPECT_TRUE(b.shares_storage(a));
  Tensor c = a.reshape({-1});
  EXPECT_EQ(c.shape(), Shape({12}));
  Tensor t = a.t();  // [4, 3] non-contiguous
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(t.shares_storage(a));
  Tensor r = t.reshape({12});  // needs a copy
  EXPECT_FALSE(r.shares_storage(a));
  EXPECT_EQ(r.to_vector<double>(), std::vector<double>({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_OXM_ERROR(t.view({12}), InvalidArgument, "without copying");
  EXPECT_OXM_ERROR(a.reshape({5, -1}), ShapeMismatch, "cannot infer");
  EXPECT_OXM_ERROR(a.reshape({-1, -1}), InvalidArgument, "only one");
  EXPECT_OXM_ERROR(a.reshape({5}), ShapeMismatch, "12");
  // A split of a transposed dim is still a view.
  Tensor x = zeros({2, 6}).t();  // [6, 2] strides (1, 6)
  Tensor y = x.reshape({3, 2, 2});
  EXPECT_TRUE(y.shares_storage(x));
}

TEST(Views, PermuteTransposeNarrowSliceSelect) {
  Tensor a = arange(0.0, 24.0, 1.0, DType::F64).reshape({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), Shape({4, 2, 3}));
  EXPECT_EQ(p.strides(), Strides({1, 12, 4}));
  EXPECT_EQ(values(p.contiguous())[1], 4.0);
  EXPECT_OXM_ERROR(a.permute({0, 0, 1}), InvalidArgument, "repeated");
  EXPECT_OXM_ERROR(a.permute({0, 1}), InvalidArgument, "once");
  EXPECT_EQ(a.transpose(0, 2).shape(), Shape({4, 3, 2}));
  EXPECT_EQ(a.t().shape(), Shape({2, 4, 3}));
  Tensor n = a.narrow(2, 1, 2);
  EXPECT_EQ(n.shape(), Shape({2, 3, 2}));
  EXPECT_EQ(values(n)[0], 1.0);
  EXPECT_OXM_ERROR(a.narrow(2, 3, 2), IndexOutOfBounds, "start 3");
  Tensor s = a.slice(2, 0, 4, 2);
  EXPECT_EQ(values(s).size(), 12u);
  EXPECT_EQ(values(s)[1], 2.0);
  EXPECT_OXM_ERROR(a.slice(2, 3, 1), InvalidArgument, "reversed range");
  EXPECT_OXM_ERROR(a.slice(2, 0, 9), IndexOutOfBounds, "out of bounds");
  EXPECT_EQ(a.slice(1, -2, 3).shape(), Shape({2, 2, 4}));
  Tensor sel = a.select(1, -1);
  EXPECT_EQ(sel.shape(), Shape({2, 4}));
  EXPECT_EQ(values(sel)[0], 8.0);
  EXPECT_OXM_ERROR(a.select(1, 3), IndexOutOfBounds, "index 3");
  EXPECT_OXM_ERROR(a.select(1, -4), IndexOutOfBounds, "index -4");
}

// contiguous() of transposed and permuted views takes a tiled path when the two innermost dims swap (and a
// short-row path for permutes that keep runs contiguous): every element lands where the index math says, for
// sizes around the tile (16), batched, with offsets, for every dtype, and for a copy into a transposed view.
TEST(Views, TransposedCopiesMatchTheIndexMath) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{8, 8}, {15, 17}, {16, 16}, {33, 70}, {100, 9}, {1, 40}}) {
    const std::string what = std::to_string(r) + "x" + std::to_string(c);
    // Values below 251, so that u8 holds them too.
    Tensor x = arange(static_cast<double>(3 * r * c), DType::F64).remainder(251.0).reshape({3, r, c});
    for (DType dt : {DType::F32, DType::F64, DType::I64, DType::U8}) {
      Tensor xt = x.to(dt).transpose(1, 2).contiguous();  // [3, c, r]
      ASSERT_EQ(xt.shape(), Shape({3, c, r}));
      const std::vector<double> v = values(xt.to(DType::F64));
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t i = 0; i < c; ++i)
          for (int64_t j = 0; j < r; ++j) {
            const double want = static_cast<double>((b * r * c + j * c + i) % 251);
            ASSERT_EQ(v[static_cast<size_t>((b * c + i) * r + j)], want) << what << " " << dtype_name(dt);
          }
    }
    // An offset, strided source (a column slice of a wider matrix, transposed).
    Tensor wide = arange(static_cast<double>(r * (c + 5)), DType::F32).reshape({r, c + 5});
    Tensor sub = wide.narrow(1, 2, c).t().contiguous();  // [c, r]
    const std::vector<double> sv = values(sub);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < r; ++j)
        ASSERT_EQ(sv[static_cast<size_t>(i * r + j)], static_cast<double>(j * (c + 5) + i + 2)) << what;
    // Into a transposed destination.
    Tensor dst = zeros({c, r}, DType::F32);
    dst.t().copy_(x.select(0, 1).to(DType::F32));
    const std::vector<double> dv = values(dst);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < r; ++j)
        ASSERT_EQ(dv[static_cast<size_t>(i * r + j)], static_cast<double>((r * c + j * c + i) % 251));
  }
  // A head split: [B, L, H, E] -> [B, H, L, E].
  Tensor h = arange(2.0 * 5 * 3 * 4, DType::F32).reshape({2, 5, 3, 4});
  const std::vector<double> hv = values(h.permute({0, 2, 1, 3}).contiguous());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t l = 0; l < 5; ++l)
        for (int64_t e = 0; e < 4; ++e)
          ASSERT_EQ(hv[static_cast<size_t>(((b * 3 + k) * 5 + l) * 4 + e)],
                    static_cast<double>(((b * 5 + l) * 3 + k) * 4 + e));
}

TEST(Views, SqueezeUnsqueezeFlattenBroadcast) {
  Tensor a = zeros({2, 1, 3});
  EXPECT_EQ(a.squeeze().shape(), Shape({2, 3}));
  EXPECT_EQ(a.squeeze(1).shape(), Shape({2, 3}));
  EXPECT_EQ(a.squeeze(0).shape(), Shape({2, 1, 3}));
  EXPECT_EQ(a.unsqueeze(0).shape(), Shape({1, 2, 1, 3}));
  EXPECT_EQ(a.unsqueeze(-1).shape(), Shape({2, 1, 3, 1}));
  EXPECT_OXM_ERROR(a.unsqueeze(5), IndexOutOfBounds, "unsqueeze");
  EXPECT_EQ(zeros({2, 3, 4}).flatten(1).shape(), Shape({2, 12}));
  EXPECT_EQ(zeros({2, 3, 4}).flatten().shape(), Shape({24}));
  Tensor b = from_vector<float>({1, 2, 3}, {3}).broadcast_to({2, 3});
  EXPECT_EQ(b.strides(), Strides({0, 1}));
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>({1, 2, 3, 1, 2, 3}));
  EXPECT_OXM_ERROR(b.broadcast_to({3}), BroadcastIncompatible, "fewer dims");
  EXPECT_OXM_ERROR(ones({2}).broadcast_to({3}), BroadcastIncompatible, "[2]");
  Tensor c = b.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(b));
  Tensor d = c.contiguous();
  EXPECT_TRUE(d.is_same(c));
}

TEST(Convert, DTypeCasts) {
  Tensor a = from_vector<double>({1.75, -2.5}, {2});
  EXPECT_EQ(a.to(DType::F32).to_vector<float>(), std::vector<float>({1.75f, -2.5f}));
  EXPECT_EQ(a.to(DType::I64).to_vector<int64_t>(), std::vector<int64_t>({1, -2}));
  EXPECT_EQ(arange(3).to(DType::F64).to_vector<double>(), std::vector<double>({0, 1, 2}));
  EXPECT_TRUE(a.to(DType::F64).is_same(a));
  Tensor t = from_vector<float>({1, 2, 3, 4}, {2, 2}).t().to(DType::F64);
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>({1, 3, 2, 4}));
}

TEST(InPlace, UpdatesAndGuards) {
  Tensor a = zeros({2, 2});
  a.fill_(2.0);
  a.add_(ones({2}), 3.0);
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(4, 5.0f));
  a.mul_(2.0);
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(4, 10.0f));
  a.t().narrow(0, 0, 1).copy_(from_vector<float>({7, 8}, {1, 2}));  // strided destination
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>({7, 10, 8, 10}));
  a.zero_();
  EXPECT_EQ(a.sum().item<float>(), 0.0f);
  Tensor w = ones({2}).requires_grad_();
  EXPECT_OXM_ERROR(w.add_(ones({2})), InvalidArgument, "NoGradGuard");
  {
    NoGradGuard ng;
    w.add_(ones({2}));
  }
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>({2, 2}));
  EXPECT_OXM_ERROR(a.add_(ones({2}, DType::F64)), DTypeMismatch, "add_");
  EXPECT_OXM_ERROR(a.copy_(ones({3})), BroadcastIncompatible, "broadcast_to");
  // A broadcast view shares memory between its elements: writing into it is refused, not raced.
  Tensor x = from_vector<float>({1, 2, 3}, {3});
  EXPECT_OXM_ERROR(x.broadcast_to({4, 3}).mul_(2.0), InvalidArgument, "broadcast view");
  EXPECT_OXM_ERROR(x.broadcast_to({4, 3}).add_(ones({4, 3})), InvalidArgument, "broadcast view");
  EXPECT_OXM_ERROR(x.broadcast_to({4, 3}).copy_(ones({4, 3})), InvalidArgument, "broadcast view");
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>({1, 2, 3}));
  x.broadcast_to({1, 3}).mul_(2.0);  // size-1 broadcast dims are fine
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>({2, 4, 6}));
}

TEST(Print, Readable) {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  std::string s = a.str();
  EXPECT_NE(s.find("[[1, 2],"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[2, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=f32"), std::string::npos) << s;
  std::string big = zeros({100}).str();
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_EQ(Tensor().str(), "Tensor(undefined)");
  EXPECT_NE(ones({1}).requires_grad_().str().find("requires_grad"), std::string::npos);
}

TEST(Allocator, SteadyStateDoesNotHitTheSystem) {
  // Warm up one step of a small computation, then repeat it: every buffer must come from the cache.
  Tensor x = randn({64, 16}, 1), w = randn({64, 16}, 2).requires_grad_();
  auto step = [&] {
    Tensor y = (x * w).relu().sum();
    y.backward();
    w.zero_grad();
  };
  step();
  step();
  MemoryStats before = memory_stats();
  for (int i = 0; i < 10; ++i) step();
  MemoryStats after = memory_stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_GT(after.cache_hits, before.cache_hits);
  EXPECT_GE(after.peak_allocated_bytes, after.allocated_bytes);
  empty_cache();
  EXPECT_LE(memory_stats().reserved_bytes, after.reserved_bytes);
}
