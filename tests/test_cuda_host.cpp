// Host-side tests of the CUDA backend's index arithmetic (src/backend/common/index_math.hpp): the same code the
// device kernels run, checked against naive row-major walks. Needs no GPU and no CUDA toolkit.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <random>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backend/common/index_math.hpp"
#include "backend/common/philox.hpp"
#include "backend/common/spd_math.hpp"

using namespace oxmera::detail;
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
    ASSERT_TRUE(p.index32);  // every plan here is small
    int64_t off32[N];
    p.offsets32(static_cast<uint32_t>(i), off32);
    for (int o = 0; o < N; ++o) ASSERT_EQ(off32[o], off[o]) << "32-bit walk, operand " << o << " index " << i;
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

// The 32-bit walk is chosen exactly when the flat index and every operand's largest offset fit in int32; where it
// is chosen it agrees with the 64-bit walk, also for offsets near 2^31.
TEST(CudaIndexMath, ThirtyTwoBitWalkOnlyWhereEverythingFits) {
  auto plan_of = [](std::vector<int64_t> shape, std::vector<int64_t> a, std::vector<int64_t> b) {
    Plan<2> p;
    const int64_t* sp[2] = {a.data(), b.data()};
    EXPECT_TRUE(make_plan<2>(static_cast<int>(shape.size()), shape.data(), sp, p));
    return p;
  };
  const int64_t big = INT32_MAX;
  // [2, 3] with a row stride putting the last element exactly at 2^31 - 1: fits
  Plan<2> p = plan_of({2, 3}, {3, 1}, {big - 2, 1});
  EXPECT_TRUE(p.index32);
  for (int64_t i = 0; i < 6; ++i) {
    int64_t o64[2], o32[2];
    p.offsets(i, o64);
    p.offsets32(static_cast<uint32_t>(i), o32);
    EXPECT_EQ(o32[1], o64[1]) << i;
  }
  EXPECT_EQ(p.offset(1, 5), big);
  EXPECT_FALSE(plan_of({2, 3}, {3, 1}, {big - 1, 1}).index32);  // one past: the span is 2^31
  EXPECT_FALSE(plan_of({2, 3}, {3, 1}, {int64_t{1} << 40, 1}).index32);
  EXPECT_TRUE(plan_of({2, 3}, {3, 1}, {0, 1}).index32);  // broadcast
  // a flat index range past int32 (a contiguous operand and a broadcast one)
  EXPECT_FALSE(plan_of({int64_t{1} << 31}, {1}, {0}).index32);
  EXPECT_TRUE(plan_of({big}, {1}, {0}).index32);
}

TEST(CudaIndexMath, TooManyDimsIsReported) {
  std::vector<int64_t> shape(kMaxDims + 1, 2), st(kMaxDims + 1);
  for (int d = 0; d <= kMaxDims; ++d) st[static_cast<size_t>(d)] = (kMaxDims + 1 - d) * 3 + 1;  // never mergeable
  const int64_t* sp[1] = {st.data()};
  Plan<1> p;
  EXPECT_FALSE(make_plan<1>(kMaxDims + 1, shape.data(), sp, p));
}

// ---------------------------------------------------------------- the plan as the CPU kernels build it
// CPU operands: element strides of differing dtypes, coalesced in bytes (stride * itemsize), up to 16 dims.
namespace {
constexpr int kCpuMaxDims = 16;

template <int N>
CoalescedPlan<N, kCpuMaxDims> cpu_plan(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& st,
                                       const int64_t (&item)[N], bool& fits) {
  CoalescedPlan<N, kCpuMaxDims> p;  // not value-initialised, as the CPU declares it
  fits = coalesce(
      static_cast<int>(shape.size()), shape.data(),
      [&](int o, int d) { return st[static_cast<size_t>(o)][static_cast<size_t>(d)] * item[o]; }, p);
  return p;
}

template <int N>
void check_cpu_plan(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& st,
                    const int64_t (&item)[N], int want_ndim) {
  bool fits = false;
  const auto p = cpu_plan<N>(shape, st, item, fits);
  ASSERT_TRUE(fits);
  EXPECT_EQ(p.ndim, want_ndim);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  ASSERT_EQ(p.numel, n);
  for (int64_t i = 0; i < n; ++i)
    for (int o = 0; o < N; ++o)
      ASSERT_EQ(p.offset(o, i), naive_offset(i, shape, st[static_cast<size_t>(o)]) * item[o])
          << "operand " << o << " index " << i;
}
}  // namespace

TEST(CoalescedPlan, CpuByteStridesOfMixedDtypes) {
  const std::vector<int64_t> s = {3, 4, 5};
  // A where: f32 output, u8 mask, f32 and f64 operands, all contiguous: one dim whatever the item sizes.
  check_cpu_plan<4>(s, {contiguous(s), contiguous(s), contiguous(s), contiguous(s)}, {4, 1, 4, 8}, 1);
  // An f64 operand broadcast along dim 1 and a transposed i64 one keep three dims; byte offsets follow.
  check_cpu_plan<3>(s, {contiguous(s), {5, 0, 1}, {1, 15, 3}}, {4, 8, 8}, 3);
  // A cast into f32 from the first 6 columns of an f64 [2, 12]: the rows do not merge; a step-2 slice of
  // every column does (its rows continue where the previous ones end).
  check_cpu_plan<2>({2, 6}, {contiguous({2, 6}), {12, 1}}, {4, 8}, 2);
  check_cpu_plan<2>({2, 6}, {contiguous({2, 6}), {12, 2}}, {4, 8}, 1);
  // Size-1 dims vanish; a 0-d shape has no dims and one element.
  check_cpu_plan<2>({1, 6, 1}, {{6, 1, 1}, {99, 1, 7}}, {8, 8}, 1);
  check_cpu_plan<1>({}, {{}}, {4}, 0);
}

TEST(CoalescedPlan, CpuMergesOnlyWhereEveryOperandIsContiguousInBytes) {
  // Same element strides, different byte strides: still mergeable (each operand is contiguous in its own
  // dtype). An output whose rows are padded (row stride 8 elements for 5 columns) keeps two dims.
  check_cpu_plan<2>({4, 5}, {contiguous({4, 5}), contiguous({4, 5})}, {4, 8}, 1);
  check_cpu_plan<2>({4, 5}, {{8, 1}, contiguous({4, 5})}, {4, 8}, 2);
}

TEST(CoalescedPlan, CpuTakesSixteenDimsAndReportsSeventeen) {
  for (int rank : {kCpuMaxDims, kCpuMaxDims + 1}) {
    std::vector<int64_t> shape(static_cast<size_t>(rank), 2), st(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) st[static_cast<size_t>(d)] = (rank - d) * 3 + 1;  // never mergeable
    bool fits = false;
    const int64_t item[1] = {4};
    const auto p = cpu_plan<1>(shape, {st}, item, fits);
    EXPECT_EQ(fits, rank <= kCpuMaxDims) << rank;
    if (fits) {
      EXPECT_EQ(p.ndim, kCpuMaxDims);
      for (int64_t i = 0; i < p.numel; i += 97) ASSERT_EQ(p.offset(0, i), naive_offset(i, shape, st) * 4);
    }
  }
}

TEST(CoalescedPlan, CudaPlanIsSmallAndTriviallyCopyable) {
  // Passed to every elementwise launch by value.
  static_assert(std::is_trivially_copyable_v<Plan<4>>);
  EXPECT_EQ(sizeof(Plan<4>), sizeof(int64_t) * (2 + kMaxDims * 5));
  EXPECT_EQ(kMaxDims, 12);
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

// Group::offset skips the outermost dim's division: the same offsets as dividing through every dim.
TEST(CudaIndexMath, GroupOffsetsMatchTheFullDivisionWalk) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 5);
    std::vector<int64_t> shape(static_cast<size_t>(rank)), xs(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      shape[static_cast<size_t>(d)] = 1 + static_cast<int64_t>(rng() % 5);
      xs[static_cast<size_t>(d)] = static_cast<int64_t>(rng() % 40) - 10;  // any strides, negative and 0 included
    }
    const uint64_t mask = rng() % (uint64_t{1} << rank);
    std::vector<int64_t> out_shape = shape;
    for (int d = 0; d < rank; ++d)
      if (mask >> d & 1) out_shape[static_cast<size_t>(d)] = 1;
    const std::vector<int64_t> os = contiguous(out_shape);
    Group kept, red;
    ASSERT_TRUE(make_reduce_groups(rank, shape.data(), xs.data(), os.data(), mask, kept, red));
    for (const Group* g : {&kept, &red})
      for (int64_t i = 0; i < g->numel(); ++i) {
        int64_t off = 0, out = 0, j = i;
        for (int d = 0; d < g->ndim; ++d) {
          off += (j % g->size[d]) * g->stride[d];
          out += (j % g->size[d]) * g->out_stride[d];
          j /= g->size[d];
        }
        ASSERT_EQ(g->offset(i), off) << "trial " << trial << " i " << i;
        ASSERT_EQ(g->out_offset(i), out) << "trial " << trial << " i " << i;
      }
  }
}

// im2col / col2im index decompositions: the 32-bit arithmetic the kernels use when the sizes fit gives the positions
// of the 64-bit one and of the layout's nested loops ([N, C*K, L] columns; [N, C, H, W] pixels).
TEST(CudaIndexMath, Im2colAndCol2imPositionsIn32And64Bit) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t N = 1 + rng() % 3, C = 1 + rng() % 4, kh = 1 + rng() % 3, kw = 1 + rng() % 3, oh = 1 + rng() % 5,
                  ow = 1 + rng() % 6;
    int64_t p = 0;
    for (int64_t nn = 0; nn < N; ++nn)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j)
            for (int64_t y = 0; y < oh; ++y)
              for (int64_t z = 0; z < ow; ++z, ++p) {
                const Im2colPos a = im2col_position<uint32_t>(static_cast<uint32_t>(p), static_cast<uint32_t>(C),
                                                              static_cast<uint32_t>(kh), static_cast<uint32_t>(kw),
                                                              static_cast<uint32_t>(oh), static_cast<uint32_t>(ow));
                const Im2colPos b = im2col_position<int64_t>(p, C, kh, kw, oh, ow);
                for (const Im2colPos& q : {a, b}) {
                  ASSERT_EQ(q.nn, nn);
                  ASSERT_EQ(q.c, c);
                  ASSERT_EQ(q.i, i);
                  ASSERT_EQ(q.j, j);
                  ASSERT_EQ(q.y, y);
                  ASSERT_EQ(q.z, z);
                }
              }
    const int64_t H = oh + 1, W = ow + 2;
    p = 0;
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w, ++p) {
          const Col2imPos a =
              col2im_position<uint32_t>(static_cast<uint32_t>(p), static_cast<uint32_t>(H), static_cast<uint32_t>(W));
          const Col2imPos b = col2im_position<int64_t>(p, H, W);
          for (const Col2imPos& q : {a, b}) {
            ASSERT_EQ(q.nc, nc);
            ASSERT_EQ(q.h, h);
            ASSERT_EQ(q.w, w);
          }
        }
  }
  // The 32-bit path only where every index and factor fits.
  EXPECT_TRUE(im2col_fits_32bit(INT32_MAX, 3, 3, 3, 28, 28));
  EXPECT_FALSE(im2col_fits_32bit(int64_t{INT32_MAX} + 1, 3, 3, 3, 28, 28));
  EXPECT_FALSE(im2col_fits_32bit(1000, 3, 3, 3, int64_t{1} << 16, int64_t{1} << 16));  // L overflows 32 bits
  EXPECT_FALSE(im2col_fits_32bit(1000, 3, int64_t{1} << 16, int64_t{1} << 16, 2, 2));  // K overflows
  // Near the boundary the 32-bit decomposition is still the 64-bit one.
  const int64_t C = 7, kh = 3, kw = 3, oh = 1000, ow = 1000;
  for (int64_t p : {int64_t{INT32_MAX} - 1, int64_t{INT32_MAX} - 12345, int64_t{1} << 30}) {
    const Im2colPos a = im2col_position<uint32_t>(static_cast<uint32_t>(p), C, kh, kw, oh, ow);
    const Im2colPos b = im2col_position<int64_t>(p, C, kh, kw, oh, ow);
    EXPECT_EQ(std::tie(a.nn, a.c, a.i, a.j, a.y, a.z), std::tie(b.nn, b.c, b.i, b.j, b.y, b.z)) << p;
  }
}

// reduce_t's kernel choice (cuda_reduce.cu), for the shapes each path is for.
ReduceKernel kernel_for(std::vector<int64_t> shape, std::vector<int64_t> strides, uint64_t mask,
                        Group* kept_out = nullptr, Group* red_out = nullptr) {
  std::vector<int64_t> out_shape = shape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (mask >> d & 1) out_shape[d] = 1;
  const std::vector<int64_t> os = contiguous(out_shape);
  Group kept, red;
  EXPECT_TRUE(
      make_reduce_groups(static_cast<int>(shape.size()), shape.data(), strides.data(), os.data(), mask, kept, red));
  if (kept_out) *kept_out = kept;
  if (red_out) *red_out = red;
  return choose_reduce_kernel(kept, red);
}

TEST(CudaIndexMath, ReduceKernelChoice) {
  // sum(-1) of [8192, 256]: many short contiguous runs, a warp per row.
  Group kept, red;
  EXPECT_EQ(kernel_for({8192, 256}, contiguous({8192, 256}), 0b10, &kept, &red), ReduceKernel::WarpRows);
  // The warp's walk: lane i reads elements i, i + 32, ... of its row, so the 32 lanes read 32 adjacent elements at
  // each step, and every element is read exactly once.
  for (int64_t m : {int64_t{0}, int64_t{4095}, int64_t{8191}}) {
    std::vector<int> reads(256, 0);
    for (int64_t step = 0; step * 32 < red.numel(); ++step)
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t r = step * 32 + lane;
        if (r >= red.numel()) continue;
        const int64_t at = kept.offset(m) + r * red.stride[0];
        EXPECT_EQ(at, m * 256 + step * 32 + lane);
        ++reads[static_cast<size_t>(r)];
      }
    for (int v : reads) EXPECT_EQ(v, 1);
  }
  // Short runs: a thread per row reads its few elements (lanes 3 elements apart: one segment per warp).
  EXPECT_EQ(kernel_for({8192, 3}, contiguous({8192, 3}), 0b10), ReduceKernel::Thread);
  // The same rows read through a transposed view are not contiguous runs: a thread per output, and adjacent
  // outputs are adjacent in memory.
  EXPECT_EQ(kernel_for({8192, 256}, {1, 8192}, 0b10), ReduceKernel::Thread);
  EXPECT_EQ(kernel_for({256, 8192}, contiguous({256, 8192}), 0b01), ReduceKernel::Thread);
  // Few outputs: a column reduction when the outputs are contiguous in x, else a block per output.
  EXPECT_EQ(kernel_for({100000, 64}, contiguous({100000, 64}), 0b01), ReduceKernel::Cols);
  EXPECT_EQ(kernel_for({64, 100000}, contiguous({64, 100000}), 0b10), ReduceKernel::Block);
  // Nothing to reduce: the identity.
  EXPECT_EQ(kernel_for({8, 0}, contiguous({8, 0}), 0b10), ReduceKernel::Fill);
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

// coords in 32-bit arithmetic (index32, set when the element count fits) and in 64-bit: the same coordinates as
// the full division walk, for random shapes and near the 2^31 boundary.
TEST(CudaIndexMath, GeomCoordsIn32And64Bit) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    Geom g;
    g.rank = 1 + static_cast<int>(rng() % 6);
    for (int d = 0; d < g.rank; ++d) g.size[d] = 1 + static_cast<int64_t>(rng() % 5);
    g.set_index32();
    ASSERT_TRUE(g.index32);
    for (int64_t i = 0; i < g.numel(); ++i) {
      int64_t want[kMaxDims], c32[kMaxDims], c64[kMaxDims];
      int64_t j = i;
      for (int d = g.rank; d-- > 0;) {
        want[d] = j % g.size[d];
        j /= g.size[d];
      }
      g.coords(i, c32);
      Geom wide = g;
      wide.index32 = false;
      wide.coords(i, c64);
      for (int d = 0; d < g.rank; ++d) {
        ASSERT_EQ(c32[d], want[d]) << "trial " << trial << " i " << i << " dim " << d;
        ASSERT_EQ(c64[d], want[d]) << "trial " << trial << " i " << i << " dim " << d;
      }
    }
  }
  Geom big;  // [2^16, 2^15 - 1]: just under 2^31 elements
  big.rank = 2;
  big.size[0] = int64_t{1} << 16;
  big.size[1] = (int64_t{1} << 15) - 1;
  big.set_index32();
  EXPECT_TRUE(big.index32);
  for (int64_t i : {big.numel() - 1, big.numel() / 2 + 7}) {
    int64_t c[kMaxDims];
    big.coords(i, c);
    EXPECT_EQ(c[0], i / big.size[1]);
    EXPECT_EQ(c[1], i % big.size[1]);
  }
  big.size[1] = int64_t{1} << 15;  // exactly 2^31 elements: 64-bit
  big.set_index32();
  EXPECT_FALSE(big.index32);
  int64_t c[kMaxDims];
  big.coords(big.numel() - 1, c);
  EXPECT_EQ(c[0], big.size[0] - 1);
  EXPECT_EQ(c[1], big.size[1] - 1);
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

TEST(CudaIndexMath, ColumnReductionChunks) {
  EXPECT_EQ(col_reduce_chunks(4096, 4096), 5);    // 128 column blocks; 528 blocks wanted
  EXPECT_EQ(col_reduce_chunks(4, 1000000), 528);  // few outputs: spread over the device
  EXPECT_EQ(col_reduce_chunks(4, 100), 2);        // but at least 8 rows per thread and chunk
  EXPECT_EQ(col_reduce_chunks(1 << 20, 10), 1);
  EXPECT_EQ(col_reduce_chunks(1, int64_t{1} << 40), 528);
  EXPECT_EQ(col_reduce_chunks(7, 1), 1);
}

TEST(CudaIndexMath, LowerBoundOfSortedKeys) {
  const std::vector<uint64_t> keys = {1, 1, 3, 3, 3, 7, 9};
  for (uint64_t key = 0; key <= 10; ++key) {
    int64_t want = 0;
    while (want < static_cast<int64_t>(keys.size()) && keys[static_cast<size_t>(want)] < key) ++want;
    EXPECT_EQ(lower_bound_key(keys.data(), static_cast<int64_t>(keys.size()), key), want) << key;
  }
  EXPECT_EQ(lower_bound_key(keys.data(), 0, 5), 0);
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

// The grouped optimizer launch plan (optimizer_steps): every element of every non-empty parameter is
// updated by exactly one block, parameters keep their order, no launch exceeds kMultiMax parameters.
TEST(CudaIndexMath, GroupedOptimizerLaunchesCoverEveryElementOnce) {
  std::mt19937_64 rng(5);
  const int64_t pick[] = {0, 1, 7, 4095, 4096, 4097, 10000, 8192, 33, 1 << 20};
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t count = static_cast<int64_t>(rng() % 60);
    std::vector<int64_t> sizes(static_cast<size_t>(count));
    for (auto& v : sizes) v = pick[rng() % 10];
    struct Launch {
      std::vector<int64_t> param, first_block, n;
      int count = 0;
    };
    std::vector<Launch> launches;
    int64_t last = -1;
    plan_multi_launches(
        sizes.data(), count,
        [&](int64_t i, int launch, int slot, int64_t first) {
          if (static_cast<size_t>(launch) == launches.size()) launches.emplace_back();
          Launch& l = launches[static_cast<size_t>(launch)];
          ASSERT_EQ(static_cast<int>(l.param.size()), slot);
          ASSERT_GT(i, last);  // parameters in order, each once
          last = i;
          l.param.push_back(i);
          l.first_block.push_back(first);
          l.n.push_back(sizes[static_cast<size_t>(i)]);
        },
        [&](int launch, int slots, int64_t blocks) {
          Launch& l = launches[static_cast<size_t>(launch)];
          l.count = slots;
          l.first_block.push_back(blocks);
        });
    std::vector<int64_t> covered(static_cast<size_t>(count), 0), next(static_cast<size_t>(count), 0);
    for (const Launch& l : launches) {
      ASSERT_GE(l.count, 1);
      ASSERT_LE(l.count, kMultiMax);
      ASSERT_EQ(static_cast<int>(l.first_block.size()), l.count + 1);
      for (int64_t b = 0; b < l.first_block[static_cast<size_t>(l.count)]; ++b) {
        const int j = multi_block_param(l.first_block.data(), l.count, b);
        int64_t begin = 0, end = 0;
        multi_block_range(l.first_block.data(), l.n.data(), j, b, begin, end);
        const size_t p = static_cast<size_t>(l.param[static_cast<size_t>(j)]);
        ASSERT_EQ(begin, next[p]) << "trial " << trial;  // consecutive, disjoint ranges
        ASSERT_LT(begin, end);
        next[p] = end;
        covered[p] += end - begin;
      }
    }
    for (int64_t i = 0; i < count; ++i) EXPECT_EQ(covered[static_cast<size_t>(i)], sizes[static_cast<size_t>(i)]);
  }
}

// ---------------------------------------------------------------- small SPD kernels (spd_math.hpp)
namespace {

// Independent f64 reference: Gauss-Jordan with partial pivoting gives log|det| and the inverse.
void gauss_jordan(std::vector<double> a, int n, double& logabsdet, std::vector<double>& inv) {
  inv.assign(static_cast<size_t>(n * n), 0.0);
  for (int i = 0; i < n; ++i) inv[static_cast<size_t>(i * n + i)] = 1.0;
  logabsdet = 0;
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (std::abs(a[static_cast<size_t>(r * n + c)]) > std::abs(a[static_cast<size_t>(p * n + c)])) p = r;
    for (int k = 0; k < n; ++k) {
      std::swap(a[static_cast<size_t>(c * n + k)], a[static_cast<size_t>(p * n + k)]);
      std::swap(inv[static_cast<size_t>(c * n + k)], inv[static_cast<size_t>(p * n + k)]);
    }
    const double d = a[static_cast<size_t>(c * n + c)];
    logabsdet += std::log(std::abs(d));
    for (int k = 0; k < n; ++k) {
      a[static_cast<size_t>(c * n + k)] /= d;
      inv[static_cast<size_t>(c * n + k)] /= d;
    }
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[static_cast<size_t>(r * n + c)];
      for (int k = 0; k < n; ++k) {
        a[static_cast<size_t>(r * n + k)] -= f * a[static_cast<size_t>(c * n + k)];
        inv[static_cast<size_t>(r * n + k)] -= f * inv[static_cast<size_t>(c * n + k)];
      }
    }
  }
}

// A random SPD matrix B B^T / n + 0.5 I, rounded to T.
template <class T>
std::vector<T> random_spd(int n, std::mt19937_64& rng) {
  std::normal_distribution<double> N01;
  std::vector<double> B(static_cast<size_t>(n * n));
  for (auto& x : B) x = N01(rng);
  std::vector<T> a(static_cast<size_t>(n * n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += B[static_cast<size_t>(i * n + k)] * B[static_cast<size_t>(j * n + k)];
      const T v = static_cast<T>(s / n + (i == j ? 0.5 : 0.0));
      a[static_cast<size_t>(i * n + j)] = v;
      a[static_cast<size_t>(j * n + i)] = v;
    }
  return a;
}

}  // namespace

TEST(CudaSpdMath, LogdetAndInverseMatchGaussJordan) {
  std::mt19937_64 rng(7);
  for (int n : {1, 2, 3, 4, 5, 8, 16, 31, kSpdMaxN}) {
    for (int rep = 0; rep < 3; ++rep) {
      const std::vector<double> a = random_spd<double>(n, rng);
      // exactly spd_work_size(n): ASan builds catch any access beyond the packed triangle
      std::vector<double> work(static_cast<size_t>(spd_work_size(n))), inv(static_cast<size_t>(n * n), -7.0), ref_inv;
      double ld = -7.0, ref_ld = 0;
      const SpdPivot p = spd_logdet_inverse(a.data(), n, work.data(), &ld, inv.data());
      gauss_jordan(a, n, ref_ld, ref_inv);
      EXPECT_EQ(p.pivot, -1) << "n " << n;
      EXPECT_NEAR(ld, ref_ld, 1e-11 * (1 + std::abs(ref_ld))) << "n " << n;
      for (int e = 0; e < n * n; ++e)
        EXPECT_NEAR(inv[static_cast<size_t>(e)], ref_inv[static_cast<size_t>(e)], 1e-10) << "n " << n << " e " << e;
      // f32 storage (what the GPU kernels read and write), f64 arithmetic inside.
      std::vector<float> af(a.begin(), a.end()), invf(static_cast<size_t>(n * n));
      float ldf = 0;
      EXPECT_EQ(spd_logdet_inverse(af.data(), n, work.data(), &ldf, invf.data()).pivot, -1);
      std::vector<double> ad(af.begin(), af.end());
      gauss_jordan(ad, n, ref_ld, ref_inv);
      EXPECT_NEAR(ldf, ref_ld, 2e-6 * (1 + std::abs(ref_ld))) << "n " << n;
      for (int e = 0; e < n * n; ++e)
        EXPECT_NEAR(invf[static_cast<size_t>(e)], ref_inv[static_cast<size_t>(e)],
                    1e-6 * (1 + std::abs(ref_inv[static_cast<size_t>(e)])))
            << "n " << n << " e " << e;
    }
  }
}

TEST(CudaSpdMath, LogdetWithoutInverseAndFailedPivots) {
  std::mt19937_64 rng(11);
  const int n = 6;
  std::vector<double> a = random_spd<double>(n, rng), work(spd_work_size(n)), inv(n * n, 0.0);
  double ld_only = 0, ld = 0;
  EXPECT_EQ(spd_logdet_inverse(a.data(), n, work.data(), &ld_only, static_cast<double*>(nullptr)).pivot, -1);
  EXPECT_EQ(spd_logdet_inverse(a.data(), n, work.data(), &ld, inv.data()).pivot, -1);
  EXPECT_EQ(ld_only, ld);
  // Only the lower triangle is read.
  std::vector<double> lower = a;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) lower[static_cast<size_t>(i * n + j)] = 1e30;
  double ld_lower = 0;
  EXPECT_EQ(spd_logdet_inverse(lower.data(), n, work.data(), &ld_lower, static_cast<double*>(nullptr)).pivot, -1);
  EXPECT_EQ(ld_lower, ld);
  // A negative diagonal entry fails at its pivot; a rank-deficient matrix at the first zero pivot; NaN fails.
  std::vector<double> bad = a;
  bad[3 * n + 3] = -1.0;
  double failed = 42;
  SpdPivot p = spd_logdet_inverse(bad.data(), n, work.data(), &failed, inv.data());
  EXPECT_EQ(p.pivot, 3);
  EXPECT_LT(p.value, 0);
  EXPECT_TRUE(std::isnan(failed));  // a failing matrix's outputs are NaN
  for (double v : inv) EXPECT_TRUE(std::isnan(v));
  std::vector<double> ones(static_cast<size_t>(n * n), 1.0);  // rank 1: pivot 1 is exactly 0
  p = spd_logdet_inverse(ones.data(), n, work.data(), &failed, inv.data());
  EXPECT_EQ(p.pivot, 1);
  EXPECT_EQ(p.value, 0.0);
  std::vector<double> nan = a;
  nan[0] = std::nan("");
  p = spd_logdet_inverse(nan.data(), n, work.data(), &failed, inv.data());
  EXPECT_EQ(p.pivot, 0);
  EXPECT_TRUE(std::isnan(p.value));
}

TEST(CudaSpdMath, CholeskyFactorReproducesTheMatrix) {
  std::mt19937_64 rng(13);
  for (int n : {1, 3, 7, 16, kSpdMaxN}) {
    const std::vector<float> a = random_spd<float>(n, rng);
    std::vector<double> work(static_cast<size_t>(spd_work_size(n)));
    std::vector<float> L(static_cast<size_t>(n * n), -3.0f);
    ASSERT_EQ(spd_cholesky(a.data(), n, work.data(), L.data()).pivot, -1);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        if (j > i) {
          EXPECT_EQ(L[static_cast<size_t>(i * n + j)], 0.0f);
        }
        double s = 0;  // (L L^T)_ij
        for (int k = 0; k < n; ++k)
          s += double(L[static_cast<size_t>(i * n + k)]) * double(L[static_cast<size_t>(j * n + k)]);
        EXPECT_NEAR(s, a[static_cast<size_t>(i * n + j)], 2e-6 * (1 + std::abs(a[static_cast<size_t>(i * n + j)])))
            << "n " << n;
      }
    std::vector<float> bad = a;
    bad[static_cast<size_t>((n - 1) * n + (n - 1))] = -5.0f;
    std::vector<float> failed(static_cast<size_t>(n * n), 9.0f);
    const SpdPivot p = spd_cholesky(bad.data(), n, work.data(), failed.data());
    EXPECT_EQ(p.pivot, n - 1);
    for (float v : failed) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(CudaSpdMath, TriangularSolveColumns) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> U(-1, 1);
  for (int n : {1, 2, 5, 16, kSpdMaxN})
    for (bool upper : {false, true}) {
      // a well-conditioned triangular matrix; the other triangle holds garbage that must not be read
      std::vector<double> t(static_cast<size_t>(n * n));
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          t[static_cast<size_t>(i * n + j)] = i == j ? 2.0 + U(rng) : ((upper ? j > i : j < i) ? 0.3 * U(rng) : 1e30);
      const int64_t k = 3;
      std::vector<double> b(static_cast<size_t>(n * k)), x = b, work(static_cast<size_t>(n));
      for (auto& v : b) v = U(rng);
      x = b;
      for (int64_t c = 0; c < k; ++c) ASSERT_EQ(tri_solve_column(t.data(), n, x.data() + c, k, upper, work.data()), -1);
      for (int i = 0; i < n; ++i)
        for (int64_t c = 0; c < k; ++c) {
          double s = 0;  // (T x)_ic over T's triangle
          for (int j = upper ? i : 0; j <= (upper ? n - 1 : i); ++j)
            s += t[static_cast<size_t>(i * n + j)] * x[static_cast<size_t>(j * k + c)];
          EXPECT_NEAR(s, b[static_cast<size_t>(i * k + c)], 1e-12) << n << upper;
        }
      // a zero on the diagonal: reported at the first row the solve reaches, that column of x NaN
      if (n >= 2) {
        t[static_cast<size_t>(1 * n + 1)] = 0.0;
        x = b;
        EXPECT_EQ(tri_solve_column(t.data(), n, x.data(), k, upper, work.data()), 1);  // the only zero
        for (int i = 0; i < n; ++i) {
          EXPECT_TRUE(std::isnan(x[static_cast<size_t>(i * k)]));
          EXPECT_EQ(x[static_cast<size_t>(i * k + 1)], b[static_cast<size_t>(i * k + 1)]);  // other columns
        }
      }
    }
}

// The warp-per-matrix functions (the CUDA kernels' layout) give the one-thread functions' results bit for bit,
// whatever order a phase's lanes run in (a race between lanes of one phase would show as a difference), and fail
// at the same pivot with NaN outputs. The tile is exactly kSpdWarpTile doubles: ASan builds catch any access
// beyond it.
TEST(CudaSpdMath, WarpPerMatrixMatchesThreadPerMatrix) {
  std::mt19937_64 rng(19);
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  for (int n = 1; n <= kSpdMaxN; ++n)
    for (bool reverse : {false, true})
      for (int fail_at : {-1, n / 2}) {
        const std::string tag =
            "n " + std::to_string(n) + (reverse ? " reverse" : "") + " fail_at " + std::to_string(fail_at);
        std::vector<double> a = random_spd<double>(n, rng);
        if (fail_at >= 0) a[static_cast<size_t>(fail_at * n + fail_at)] = -1.0;
        std::vector<float> af(a.begin(), a.end());
        std::vector<double> work(static_cast<size_t>(spd_work_size(n))), tile(kSpdWarpTile);
        const SequentialWarp w{reverse};
        // f64 storage: logdet and inverse
        std::vector<double> inv1(static_cast<size_t>(n * n)), inv2(static_cast<size_t>(n * n));
        double ld1 = 0, ld2 = 0;
        const SpdPivot p1 = spd_logdet_inverse(a.data(), n, work.data(), &ld1, inv1.data());
        const SpdPivot p2 = spd_warp_logdet_inverse(w, a.data(), n, tile.data(), &ld2, inv2.data());
        EXPECT_EQ(p2.pivot, p1.pivot) << tag;
        EXPECT_TRUE(same(p2.value, p1.value)) << tag;
        EXPECT_EQ(p1.pivot, fail_at) << tag;
        EXPECT_TRUE(same(ld2, ld1)) << tag << ": " << ld2 << " vs " << ld1;
        for (int e = 0; e < n * n; ++e)
          ASSERT_TRUE(same(inv2[static_cast<size_t>(e)], inv1[static_cast<size_t>(e)])) << tag << " e " << e;
        double ld3 = 0;  // without the inverse
        EXPECT_EQ(spd_warp_logdet_inverse(w, a.data(), n, tile.data(), &ld3, static_cast<double*>(nullptr)).pivot,
                  fail_at)
            << tag;
        EXPECT_TRUE(same(ld3, ld1)) << tag;
        // f32 storage (what the GPU kernels read and write): the Cholesky factor
        std::vector<float> L1(static_cast<size_t>(n * n), 5.0f), L2(static_cast<size_t>(n * n), 7.0f);
        const SpdPivot c1 = spd_cholesky(af.data(), n, work.data(), L1.data());
        const SpdPivot c2 = spd_warp_cholesky(w, af.data(), n, tile.data(), L2.data());
        EXPECT_EQ(c2.pivot, c1.pivot) << tag;
        for (int e = 0; e < n * n; ++e)
          ASSERT_TRUE(same(L2[static_cast<size_t>(e)], L1[static_cast<size_t>(e)])) << tag << " e " << e;
        if (fail_at < 0) {
          EXPECT_EQ(p1.pivot, -1) << tag;
          EXPECT_FALSE(std::isnan(ld1)) << tag;
        } else {
          EXPECT_TRUE(std::isnan(ld2)) << tag;
          EXPECT_TRUE(std::isnan(inv2[0]) && std::isnan(L2[0])) << tag;
        }
      }
}

// Philox4x32-10 against the known-answer vectors published with the generator (Random123's kat_vectors), and the
// dropout mask built on it: element i from word i % 4 of block offset + i / 4, a pure function of (seed, offset, i).
TEST(Philox, KnownAnswersAndTheDropoutMask) {
  auto words = [](Philox4 r) { return std::vector<uint32_t>(r.v, r.v + 4); };
  EXPECT_EQ(words(philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0)),
            (std::vector<uint32_t>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(words(philox4x32_10(Philox4{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff)),
            (std::vector<uint32_t>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(words(philox4x32_10(Philox4{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0)),
            (std::vector<uint32_t>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  // the mask: a prefix of a longer draw, shifted by whole blocks with the offset, kept fraction near 1 - p
  const int64_t n = 40001;
  const double p = 0.3, scale = 1.0 / 0.7;
  std::vector<float> a(n), b(n + 8), c(n - 1);
  dropout_mask_host<float>(77, 5, n, p, scale, a.data());
  dropout_mask_host<float>(77, 3, n + 8, p, scale, b.data());
  dropout_mask_host<float>(77, 5, n - 1, p, scale, c.data());
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(a[i] == 0.0f || a[i] == static_cast<float>(scale)) << i;
    ASSERT_EQ(a[i], b[i + 8]) << i;  // offset 5 = offset 3 + two blocks of four
    if (i < n - 1) {
      ASSERT_EQ(a[i], c[i]) << i;
    }
    kept += a[i] != 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.01);
  std::vector<float> other(n);
  dropout_mask_host<float>(78, 5, n, p, scale, other.data());
  EXPECT_NE(other, a) << "another seed, another mask";
  for (uint32_t w : {0u, 0xffu, 0x100u, 0xffffffffu}) {
    const double u = philox_unit(w);
    EXPECT_TRUE(u >= 0.0 && u < 1.0) << w;
  }
}
