#pragma once
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <oxmera/oxmera.hpp>

namespace oxt {
using namespace oxmera;

// Bit patterns of a tensor (f32 / f64 / i64, on any device), for exact comparisons.
inline std::vector<uint64_t> bits(const Tensor& t) {
  std::vector<uint64_t> out;
  Tensor c = t.detach().to(Device::cpu()).contiguous();
  if (c.dtype() == DType::F32) {
    for (float f : c.to_vector<float>()) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      out.push_back(u);
    }
  } else if (c.dtype() == DType::F64) {
    for (double d : c.to_vector<double>()) {
      uint64_t u;
      std::memcpy(&u, &d, 8);
      out.push_back(u);
    }
  } else {
    for (int64_t v : c.to_vector<int64_t>()) out.push_back(static_cast<uint64_t>(v));
  }
  return out;
}
// Bit patterns of named tensors (a module's parameters, an optimizer's state), in order.
using Snapshot = std::vector<std::pair<std::string, std::vector<uint64_t>>>;
inline Snapshot snapshot(const std::vector<std::pair<std::string, Tensor>>& named) {
  Snapshot s;
  for (const auto& [n, t] : named) s.emplace_back(n, bits(t));
  return s;
}

// Values of any float tensor as f64, in logical row-major order.
inline std::vector<double> values(const Tensor& t) {
  if (t.dtype() == DType::F64) return t.to_vector<double>();
  return t.to(DType::F64).to_vector<double>();
}

// Expects |a - b| <= atol + rtol |b| element-wise (NaN must match NaN, infinities must match exactly).
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": got " << got[i] << ", want NaN";
      continue;
    }
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
      continue;
    }
    EXPECT_LE(std::abs(got[i] - want[i]), atol + rtol * std::abs(want[i]))
        << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
}

// Row-major strides of a shape (for reference loops).
inline std::vector<int64_t> rm_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t k = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = k;
    k *= s[i];
  }
  return st;
}

// Index of flat output position `i` of `out` into a (broadcast) input of shape `in`.
inline int64_t bcast_index(int64_t i, const Shape& out, const Shape& in) {
  auto os = rm_strides(out), is = rm_strides(in);
  int64_t idx = 0;
  const size_t lead = out.size() - in.size();
  for (size_t d = 0; d < out.size(); ++d) {
    int64_t c = (i / os[d]) % out[d];
    if (d >= lead && in[d - lead] != 1) idx += c * is[d - lead];
  }
  return idx;
}

// A fresh temporary directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "oxmera-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (std::filesystem::path(dir_) / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir_;
};

template <class F>
ErrorKind error_kind_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "expected an oxmera::Error";
  return ErrorKind::Backend;
}

// Asserts that f throws an oxmera::Error of `kind` whose message contains `needle`.
#define EXPECT_OXM_ERROR(stmt, kind_, needle)                          \
  do {                                                                 \
    try {                                                              \
      (void)(stmt);                                                    \
      ADD_FAILURE() << "no error from: " #stmt;                        \
    } catch (const ::oxmera::Error& e) {                               \
      EXPECT_EQ(e.kind(), ::oxmera::ErrorKind::kind_) << e.what();     \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) \
          << "message lacks '" << needle << "': " << e.what();         \
    }                                                                  \
  } while (0)

}  // namespace oxt
