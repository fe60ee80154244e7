// Host-side tests of the CUDA backend's index arithmetic (src/backend/cuda/index_math.hpp): the same code the
// device kernels run, checked against naive row-major walks. Needs no GPU and no CUDA toolkit.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/index_math.hpp"

using namespace oxmera::detail::cuda;

namespace {

// Offset of flat row-major index i for a shape/stride pair, the naive way.
int64_t naive_offset(int64_t i, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}
std::vector<int64_t> contiguous(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t k = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = k;
    k *= shape[d];
  }
  return s;
}

template <int N>
void check_plan(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& strides, int want_ndim,
                bool want_contig) {
  const int64_t* sp[N];
  for (int o = 0; o < N; ++o) sp[o] = strides[o].data();
  Plan<N> p;
  ASSERT_TRUE(make_plan<N>(static_cast<int>(shape.size()), shape.data(), sp, p));
  EXPECT_EQ(p.ndim, want_ndim);
  EXPECT_EQ(p.contiguous, want_contig);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  EXPECT_EQ(p.numel, n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off[N];
    p.offsets(i, off);
    for (int o = 0; o < N; ++o) {
      ASSERT_EQ(off[o], naive_offset(i, shape, strides[o])) << "operand " << o << " index " << i;
      ASSERT_EQ(p.offset(o, i), off[o]);
    }
  }
}

}  // namespace

TEST(CudaIndexMath, ContiguousCoalescesToOneDim) {
  std::vector<int64_t> s = {3, 4, 5};
  check_plan<2>(s, {contiguous(s), contiguous(s)}, 1, true);
}

TEST(CudaIndexMath, BroadcastAndTransposedOperands) {
  std::vector<int64_t> s = {3, 4, 5};
  // b broadcast along dim 1 (stride 0), c transposed (dims 0 and 2 swapped in memory).
  check_plan<3>(s, {contiguous(s), {5, 0, 1}, {1, 15, 3}}, 3, false);
  // scalar broadcast: one dim, stride 0.
  check_plan<2>(s, {contiguous(s), {0, 0, 0}}, 1, false);
  // row broadcast [1, 5] -> [4, 5]: two dims (inner contiguous, outer stride 0).
  check_plan<2>({4, 5}, {contiguous({4, 5}), {0, 1}}, 2, false);
}

TEST(CudaIndexMath, SizeOneDimsAndSlices) {
  // size-1 dims vanish whatever their stride; a step-2 slice keeps its stride.
  check_plan<2>({1, 6, 1}, {{99, 1, 7}, {1, 2, 5}}, 1, false);
  check_plan<2>({2, 3}, {{3, 1}, {7, 2}}, 2, false);
}

TEST(CudaIndexMath, EmptyAndScalar) {
  Plan<2> p;
  std::vector<int64_t> s = {0, 4}, st = {4, 1};
  const int64_t* sp[2] = {st.data(), st.data()};
  ASSERT_TRUE(make_plan<2>(2, s.data(), sp, p));
  EXPECT_EQ(p.numel, 0);
  ASSERT_TRUE(make_plan<2>(0, nullptr, sp, p));  // 0-d: one element at offset 0
  EXPECT_EQ(p.numel, 1);
  EXPECT_TRUE(p.contiguous);
  int64_t off[2] = {-1, -1};
  p.offsets(0, off);
  EXPECT_EQ(off[0], 0);
  EXPECT_EQ(off[1], 0);
}

TEST(CudaIndexMath, TooManyDimsIsReported) {
  std::vector<int64_t> shape(kMaxDims + 1, 2), st(kMaxDims + 1);
  for (int d = 0; d <= kMaxDims; ++d) st[static_cast<size_t>(d)] = (kMaxDims + 1 - d) * 3 + 1;  // never mergeable
  const int64_t* sp[1] = {st.data()};
  Plan<1> p;
  EXPECT_FALSE(make_plan<1>(kMaxDims + 1, shape.data(), sp, p));
}

TEST(CudaIndexMath, ReduceGroupsMatchNaiveWalk) {
  // x [2, 3, 4] transposed view (strides 1, 2, 6), reduce dims 0 and 2; out keepdim [1, 3, 1] contiguous.
  std::vector<int64_t> shape = {2, 3, 4}, xs = {1, 2, 6}, os = {3, 1, 1};
  Group kept, red;
  ASSERT_TRUE(make_reduce_groups(3, shape.data(), xs.data(), os.data(), 0b101, kept, red));
  EXPECT_EQ(kept.numel(), 3);
  EXPECT_EQ(red.numel(), 8);
  for (int64_t m = 0; m < 3; ++m) {
    EXPECT_EQ(kept.offset(m), m * 2);
    EXPECT_EQ(kept.out_offset(m), m);
    std::vector<int64_t> seen;
    for (int64_t r = 0; r < 8; ++r) seen.push_back(kept.offset(m) + red.offset(r));
    // reduced order: dim 2 fastest, then dim 0 (row-major over the reduced dims)
    std::vector<int64_t> want;
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t c = 0; c < 4; ++c) want.push_back(a * 1 + m * 2 + c * 6);
    EXPECT_EQ(seen, want);
  }
  // full contiguous reduction coalesces to one run
  std::vector<int64_t> cs = contiguous(shape);
  ASSERT_TRUE(make_reduce_groups(3, shape.data(), cs.data(), os.data(), 0b111, kept, red));
  EXPECT_EQ(red.ndim, 1);
  EXPECT_EQ(kept.ndim, 0);
  EXPECT_EQ(kept.numel(), 1);
}

TEST(CudaIndexMath, LinesAlongADim) {
  std::vector<int64_t> shape = {2, 5, 3}, xs = contiguous(shape), os = contiguous(shape);
  Lines l;
  ASSERT_TRUE(make_lines(3, shape.data(), xs.data(), os.data(), 1, l));
  EXPECT_EQ(l.len, 5);
  EXPECT_EQ(l.stride, 3);
  EXPECT_EQ(l.rest.numel(), 6);
  for (int64_t m = 0; m < 6; ++m) EXPECT_EQ(l.rest.offset(m), (m / 3) * 15 + m % 3);
  ASSERT_TRUE(make_lines(0, nullptr, nullptr, nullptr, 0, l));  // 0-d: one line of one element
  EXPECT_EQ(l.len, 1);
  EXPECT_EQ(l.rest.numel(), 1);
}

TEST(CudaIndexMath, GeomCoordsAndDots) {
  Geom g;
  g.rank = 3;
  g.size[0] = 2;
  g.size[1] = 3;
  g.size[2] = 4;
  g.stride[0][0] = 12;
  g.stride[0][1] = 4;
  g.stride[0][2] = 1;
  g.stride[1][0] = 0;
  g.stride[1][1] = 1;
  g.stride[1][2] = 3;
  for (int64_t i = 0; i < 24; ++i) {
    int64_t c[kMaxDims];
    g.coords(i, c);
    EXPECT_EQ(c[0], i / 12);
    EXPECT_EQ(c[1], (i / 4) % 3);
    EXPECT_EQ(c[2], i % 4);
    EXPECT_EQ(g.dot(0, c), i);
    EXPECT_EQ(g.dot(1, c), c[1] + 3 * c[2]);
  }
}

TEST(CudaIndexMath, Col2imSourceInvertsIm2col) {
  // For every geometry, (h, i) -> y found by col2im_source iff im2col reads h at (y, i).
  for (int64_t sh : {1, 2, 3})
    for (int64_t ph : {0, 1, 2})
      for (int64_t dh : {1, 2})
        for (int64_t k : {1, 3}) {
          const int64_t H = 7, oh = (H + 2 * ph - dh * (k - 1) - 1) / sh + 1;
          if (oh <= 0) continue;
          for (int64_t i = 0; i < k; ++i)
            for (int64_t h = 0; h < H; ++h) {
              int64_t want = -1;
              for (int64_t y = 0; y < oh; ++y)
                if (y * sh - ph + i * dh == h) want = y;
              int64_t y = -1;
              const bool found = col2im_source(h, i, sh, ph, dh, oh, y);
              EXPECT_EQ(found, want >= 0) << sh << ph << dh << k << i << h;
              if (found) {
                EXPECT_EQ(y, want);
              }
            }
        }
}

TEST(CudaIndexMath, LaunchGeometry) {
  EXPECT_EQ(grid_blocks(0, 256, 132), 1);
  EXPECT_EQ(grid_blocks(1, 256, 132), 1);
  EXPECT_EQ(grid_blocks(257, 256, 132), 2);
  EXPECT_EQ(grid_blocks(int64_t{1} << 30, 256, 132), 132 * 32);
  EXPECT_EQ(reduce_chunks(1), 1);
  EXPECT_EQ(reduce_chunks(32768), 1);
  EXPECT_EQ(reduce_chunks(32769), 2);
  EXPECT_EQ(reduce_chunks(int64_t{1} << 40), 1024);
}
