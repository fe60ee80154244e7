#include "test_util.hpp"

using namespace oxt;

TEST(Shape, InlineAndHeap) {
  Shape s{1, 2, 3};
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2], 3);
  Shape big(10, 7);  // beyond the inline capacity
  big.push_back(9);
  EXPECT_EQ(big.size(), 11u);
  EXPECT_EQ(big.back(), 9);
  Shape copy = big;
  EXPECT_EQ(copy, big);
  Shape moved = std::move(copy);
  EXPECT_EQ(moved, big);
  moved.insert(0, 5);
  EXPECT_EQ(moved[0], 5);
  moved.erase(0);
  EXPECT_EQ(moved, big);
  EXPECT_EQ(Shape({2, 3}).str(), "[2, 3]");
}

TEST(Shape, CheckedNumelOverflowIsAnError) {
  EXPECT_EQ(checked_numel({2, 3}, "t"), 6);
  EXPECT_EQ(checked_numel({}, "t"), 1);
  EXPECT_EQ(checked_numel({0, 5}, "t"), 0);
  int64_t big = int64_t{1} << 32;
  EXPECT_OXM_ERROR(checked_numel({big, big}, "zeros"), InvalidArgument, "zeros");
  EXPECT_OXM_ERROR(checked_numel({int64_t{1} << 62}, "zeros", 4), InvalidArgument, "64-bit");
  EXPECT_OXM_ERROR(checked_numel({2, -1}, "zeros"), InvalidArgument, "negative size -1");
  EXPECT_OXM_ERROR(zeros({big, big}), InvalidArgument, "[4294967296, 4294967296]");
}

TEST(Shape, Broadcasting) {
  EXPECT_EQ(broadcast_shapes({3, 1, 4}, {2, 4}, "t"), Shape({3, 2, 4}));
  EXPECT_EQ(broadcast_shapes({}, {2, 4}, "t"), Shape({2, 4}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 5}, "t"), Shape({0, 5}));
  EXPECT_OXM_ERROR(broadcast_shapes({3, 2}, {4, 2}, "add"), BroadcastIncompatible, "add: shapes [3, 2] and [4, 2]");
}

TEST(Shape, NormalizeDim) {
  EXPECT_EQ(normalize_dim(-1, 3, "t"), 2);
  EXPECT_EQ(normalize_dim(0, 0, "t"), 0);
  EXPECT_OXM_ERROR(normalize_dim(3, 3, "sum"), IndexOutOfBounds, "dim 3");
  EXPECT_OXM_ERROR(normalize_dim(-4, 3, "sum"), IndexOutOfBounds, "dim -4");
}

TEST(Errors, KindsAndMessages) {
  Error e(ErrorKind::ShapeMismatch, "matmul: bad");
  EXPECT_EQ(e.kind(), ErrorKind::ShapeMismatch);
  EXPECT_STREQ(e.what(), "[ShapeMismatch] matmul: bad");
  EXPECT_EQ(e.message(), "matmul: bad");
  const std::exception& base = e;
  EXPECT_NE(std::string(base.what()).find("matmul"), std::string::npos);
  for (int k = 0; k <= static_cast<int>(ErrorKind::Timeout); ++k)
    EXPECT_STRNE(error_kind_name(static_cast<ErrorKind>(k)), "Unknown");
  EXPECT_STREQ(error_kind_name(ErrorKind::Timeout), "Timeout");
  EXPECT_EQ(static_cast<int>(ErrorKind::Timeout), static_cast<int>(ErrorKind::Backend) + 1);  // appended
}

TEST(DTypes, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::F32), "f32");
  EXPECT_STREQ(dtype_name(DType::U8), "u8");
  EXPECT_EQ(itemsize(DType::F64), 8u);
  EXPECT_EQ(itemsize(DType::U8), 1u);
  EXPECT_TRUE(is_floating(DType::F64));
  EXPECT_FALSE(is_floating(DType::I64));
}

TEST(Devices, CpuWorksCudaIsTypedError) {
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda(0).str(), "cuda:0");
  EXPECT_TRUE(device_available(Device::cpu()));
  init();
  init();  // idempotent
  Tensor t = ones({2});
  if (!device_available(Device::cuda())) {
    EXPECT_OXM_ERROR(t.to(Device::cuda()), BackendUnavailable, "cuda:0");
    EXPECT_OXM_ERROR(empty({2}, DType::F32, Device::cuda()), BackendUnavailable, "cuda");
  }
  EXPECT_OXM_ERROR(t.to(Device::cuda(1)), BackendUnavailable, "cuda:1");
  EXPECT_OXM_ERROR(t.to(Device(DeviceKind::CPU, 1)), BackendUnavailable, "cpu:1");
}

TEST(Devices, ParseAcceptsNamesAndIndices) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:0"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:7"), Device::cuda(7));
  EXPECT_EQ(Device::parse("cuda:2147483647"), Device::cuda(2147483647));
  EXPECT_EQ(Device::parse("metal"), Device(DeviceKind::Metal, 0));
  EXPECT_EQ(Device::parse("metal:1"), Device(DeviceKind::Metal, 1));
  EXPECT_EQ(Device::parse("cpu:0"), Device::cpu());
  for (Device d : {Device::cpu(), Device(DeviceKind::CPU, 3), Device::cuda(0), Device::cuda(12),
                   Device(DeviceKind::Metal, 0), Device(DeviceKind::Metal, 5)})
    EXPECT_EQ(Device::parse(d.str()), d) << d.str();
}

TEST(Devices, ParseRejectsEverythingElseNamingTheString) {
  for (const char* bad : {"",         "cuda:",  "cuda:-1",         "cuda:+1",
                          "cuda:1x",  "cuda:x", "cuda: 1",         " cuda",
                          "cuda ",    "CUDA",   "cuda0",           "cuda::1",
                          "cuda:1:2", "gpu",    "cudax",           "metal:",
                          "cpu:",     "cpux",   "cuda:2147483648", "cuda:99999999999999999999"}) {
    try {
      (void)Device::parse(bad);
      ADD_FAILURE() << "no error from Device::parse(\"" << bad << "\")";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'" + std::string(bad) + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("cpu, cuda, cuda:N, metal or metal:N"), std::string::npos) << msg;
    }
  }
}

TEST(Random, DeterministicAndWellDistributed) {
  Generator a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(a.next_u64(), c.next_u64());
  Tensor x = randn({100000}, 7, DType::F64);
  double mean = x.mean().item<double>();
  double var = (x * x).mean().item<double>() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.02);
  Tensor u = rand({100000}, 7, DType::F64);
  EXPECT_GE(u.min().item<double>(), 0.0);
  EXPECT_LT(u.max().item<double>(), 1.0);
  EXPECT_NEAR(u.mean().item<double>(), 0.5, 0.01);
  EXPECT_EQ(randn({5}, 3).to_vector<float>(), randn({5}, 3).to_vector<float>());
  Generator g(5);
  auto st = g.state();
  double first = g.next_normal();
  g.set_state(st);
  EXPECT_EQ(g.next_normal(), first);
}

TEST(Build, InfoAndBlas) {
  EXPECT_STREQ(build_info().version, kVersion);
  EXPECT_NE(std::string(blas_name()).size(), 0u);
  EXPECT_GE(get_num_threads(), 1);
  EXPECT_OXM_ERROR(set_num_threads(0), InvalidArgument, "set_num_threads");
}

TEST(Errors, OutOfMemoryIsTyped) {
  // 2^48 bytes exceeds the 47-bit user address space, so every allocator refuses it whatever the overcommit
  // policy; oxmera frees its cache, retries once, then reports OutOfMemory.
  EXPECT_OXM_ERROR(zeros({int64_t{1} << 46}), OutOfMemory, "cannot allocate");
  EXPECT_EQ(zeros({2}).sum().item<float>(), 0.0f);  // still usable afterwards
}

// TF32 is opt-in, as in torch; the setting never changes CPU results.
TEST(Build, Float32MatmulPrecisionIsOptInAndLeavesTheCpuExact) {
  EXPECT_EQ(float32_matmul_precision(), "highest");
  Tensor a = rand({17, 33}, 1), b = rand({33, 9}, 2);
  const std::vector<double> exact = values(matmul(a, b));
  for (const char* p : {"high", "medium"}) {
    set_float32_matmul_precision(p);
    EXPECT_EQ(float32_matmul_precision(), p);
    EXPECT_EQ(values(matmul(a, b)), exact) << p;
  }
  EXPECT_OXM_ERROR(set_float32_matmul_precision("tf32"), InvalidArgument, "set_float32_matmul_precision");
  EXPECT_EQ(float32_matmul_precision(), "medium");  // unchanged by the refused call
  set_float32_matmul_precision("highest");
  EXPECT_EQ(float32_matmul_precision(), "highest");
}
