#pragma once
// Index arithmetic shared by the backends' kernels: the coalesced elementwise plan (CPU and CUDA), and the
// CUDA kernels' reduction groups, index-op geometry and launch geometry. Plain C++ usable from host code
// (unit-tested in tests/test_cuda_host.cpp without a GPU) and from device code (nvcc): no CUDA header, no
// oxmera type.
//
// Conventions: shapes and strides come in row-major order (dim 0 outermost, as in TensorImpl). Plans and groups
// store dims innermost first (index 0 fastest).
#include <climits>
#include <cstdint>

#include "core/host_device.hpp"

namespace oxmera::detail {

// ---------------------------------------------------------------- elementwise plans
// A coalesced loop nest over an output shape for N operands (operand 0 is the output). Dims of size 1 are
// dropped; adjacent dims merge when every operand is contiguous across them. The CPU kernels use it with
// byte strides and 16 dims, the CUDA kernels with element strides and 12 dims (a CUDA plan is passed to every
// launch by value, so it stays small and trivially copyable: no pointers, no constructor).
template <int N, int MaxDims>
struct CoalescedPlan {
  static_assert(N >= 1 && MaxDims >= 1);
  int ndim = 0;
  bool contiguous = true;  // offset(o, i) == i for every operand: kernels skip the div/mod walk
  // Flat indices and every operand's offsets fit in 32 bits: kernels may walk the dims with offsets32, whose
  // 32-bit division costs a GPU several times less than 64-bit (set by make_plan, the element-stride form; the
  // CPU's byte-stride plans leave it false).
  bool index32 = false;
  int64_t numel = 1;
  // Entries at and above ndim are unspecified: a plain declaration leaves them unset (the CPU builds a plan per
  // op); a value-initialised plan (`CoalescedPlan{}`) has them zero.
  int64_t size[MaxDims];
  int64_t stride[N][MaxDims];

  // Offsets of flat index i (innermost fastest) for every operand, in the strides' unit.
  OXM_HD void offsets(int64_t i, int64_t* off) const {
    for (int o = 0; o < N; ++o) off[o] = 0;
    for (int d = 0; d < ndim; ++d) {
      const int64_t c = i % size[d];
      i /= size[d];
      for (int o = 0; o < N; ++o) off[o] += c * stride[o][d];
    }
  }
  // offsets() in 32-bit arithmetic; only for a plan with index32 (each partial sum is bounded by the operand's
  // span, which fits).
  OXM_HD void offsets32(uint32_t i, int64_t* off) const {
    int32_t acc[N];
    for (int o = 0; o < N; ++o) acc[o] = 0;
    for (int d = 0; d < ndim; ++d) {
      const uint32_t s = static_cast<uint32_t>(size[d]), c = i % s;
      i /= s;
      for (int o = 0; o < N; ++o) acc[o] += static_cast<int32_t>(c) * static_cast<int32_t>(stride[o][d]);
    }
    for (int o = 0; o < N; ++o) off[o] = acc[o];
  }
  OXM_HD int64_t offset(int o, int64_t i) const {
    int64_t off = 0;
    for (int d = 0; d < ndim; ++d) {
      off += (i % size[d]) * stride[o][d];
      i /= size[d];
    }
    return off;
  }
};

// Coalesces the `rank`-dim `shape` into p; stride_of(o, d) is operand o's stride along dim d, in whatever unit
// the caller's plan uses (bytes on the CPU, elements on CUDA). Returns false when more than MaxDims
// non-mergeable dims remain (the caller reports it); p's dims are then unspecified.
template <int N, int MaxDims, class StrideOf>
inline bool coalesce(int rank, const int64_t* shape, StrideOf&& stride_of, CoalescedPlan<N, MaxDims>& p) {
  p.ndim = 0;
  p.numel = 1;
  for (int d = 0; d < rank; ++d) p.numel *= shape[d];
  for (int d = rank; d-- > 0;) {
    if (shape[d] == 1) continue;
    if (p.ndim > 0) {
      bool merge = true;
      for (int o = 0; o < N; ++o)
        if (stride_of(o, d) != p.stride[o][p.ndim - 1] * p.size[p.ndim - 1]) merge = false;
      if (merge) {
        p.size[p.ndim - 1] *= shape[d];
        continue;
      }
    }
    if (p.ndim == MaxDims) return false;
    p.size[p.ndim] = shape[d];
    for (int o = 0; o < N; ++o) p.stride[o][p.ndim] = stride_of(o, d);
    ++p.ndim;
  }
  p.contiguous = p.ndim <= 1;
  for (int o = 0; o < N && p.ndim == 1; ++o) p.contiguous = p.contiguous && p.stride[o][0] == 1;
  return true;
}

// Whether plan p's flat indices and every operand's offsets (in the strides' unit) fit in int32.
template <int N, int MaxDims>
inline bool fits_int32(const CoalescedPlan<N, MaxDims>& p) {
  if (p.numel > INT32_MAX) return false;
  for (int o = 0; o < N; ++o) {
    int64_t span = 0;  // the largest |offset| of operand o
    for (int d = 0; d < p.ndim; ++d) {
      const int64_t st = p.stride[o][d] < 0 ? -p.stride[o][d] : p.stride[o][d];
      if (st > INT32_MAX) return false;
      span += (p.size[d] - 1) * st;  // size <= numel <= 2^31 and st <= 2^31: no overflow
      if (span > INT32_MAX) return false;
    }
  }
  return true;
}

// The plan of `rank`-dim `shape` with per-operand stride arrays `strides[o][d]` (the CUDA kernels' form: element
// strides), dims past ndim zeroed. Returns false as coalesce does.
template <int N, int MaxDims>
inline bool make_plan(int rank, const int64_t* shape, const int64_t* const* strides, CoalescedPlan<N, MaxDims>& p) {
  p = CoalescedPlan<N, MaxDims>{};
  if (!coalesce(
          rank, shape, [strides](int o, int d) { return strides[o][d]; }, p))
    return false;
  p.index32 = fits_int32(p);
  return true;
}

}  // namespace oxmera::detail

namespace oxmera::detail::cuda {

inline constexpr int kMaxDims = 12;
// The CUDA kernels' plan: element strides of each operand's own dtype.
template <int N>
using Plan = CoalescedPlan<N, kMaxDims>;

// ---------------------------------------------------------------- reduction groups
// A coalesced group of dims (innermost first) with input strides and output strides.
struct Group {
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  int64_t out_stride[kMaxDims] = {};
  OXM_HD int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= size[d];
    return n;
  }
  // Offsets of element i (0 <= i < numel()) in x and in out. The outermost dim needs no division (what is left
  // of i is below its size), so a single run (the common coalesced case) costs one multiply: 64-bit division is
  // the expensive part of GPU index arithmetic.
  OXM_HD int64_t offset(int64_t i) const { return walk(i, stride); }
  OXM_HD int64_t out_offset(int64_t i) const { return walk(i, out_stride); }
  OXM_HD int64_t walk(int64_t i, const int64_t* st) const {
    int64_t off = 0;
    for (int d = 0; d + 1 < ndim; ++d) {
      off += (i % size[d]) * st[d];
      i /= size[d];
    }
    return ndim > 0 ? off + i * st[ndim - 1] : off;
  }
  // Appends a dim outside the current ones (call from the innermost dim outwards). False on overflow.
  bool push(int64_t sz, int64_t st, int64_t out_st) {
    if (sz == 1) return true;
    if (ndim > 0 && st == stride[ndim - 1] * size[ndim - 1] && out_st == out_stride[ndim - 1] * size[ndim - 1]) {
      size[ndim - 1] *= sz;
      return true;
    }
    if (ndim == kMaxDims) return false;
    size[ndim] = sz;
    stride[ndim] = st;
    out_stride[ndim] = out_st;
    ++ndim;
    return true;
  }
};

// Splits x's dims into kept and reduced groups (bit d of mask = dim d reduced), as the CPU reduction does.
inline bool make_reduce_groups(int rank, const int64_t* shape, const int64_t* x_strides, const int64_t* out_strides,
                               uint64_t mask, Group& kept, Group& red) {
  kept = Group{};
  red = Group{};
  for (int d = rank; d-- > 0;) {
    const bool ok =
        (mask >> d & 1) ? red.push(shape[d], x_strides[d], 0) : kept.push(shape[d], x_strides[d], out_strides[d]);
    if (!ok) return false;
  }
  return true;
}

// Lines along `dim` (softmax, argmax): every dim but `dim` in `rest`; the line itself is (len, stride).
struct Lines {
  Group rest;
  int64_t len = 1, stride = 1, out_stride = 1;
};
inline bool make_lines(int rank, const int64_t* shape, const int64_t* x_strides, const int64_t* out_strides,
                       int64_t dim, Lines& l) {
  l = Lines{};
  for (int d = rank; d-- > 0;)
    if (d != dim && !l.rest.push(shape[d], x_strides[d], out_strides[d])) return false;
  if (rank > 0) {
    l.len = shape[dim];
    l.stride = x_strides[dim];
    l.out_stride = out_strides[dim];
  }
  return true;
}

// ---------------------------------------------------------------- index-op geometry
// An uncoalesced row-major shape (dim 0 outermost) with up to 4 stride sets: coordinates of a flat index
// are needed individually by the index ops (the indexed dim's coordinate is special).
struct Geom {
  int rank = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[4][kMaxDims] = {};
  // Set when the element count fits in 31 bits (set_index32): coords then divides in 32-bit arithmetic, several times
  // cheaper on a GPU than 64-bit division.
  bool index32 = false;
  OXM_HD int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= size[d];
    return n;
  }
  void set_index32() { index32 = numel() <= INT32_MAX; }
  // Coordinates of flat row-major index i (0 <= i < numel()). The outermost coordinate is what is left of i: no
  // division for it.
  OXM_HD void coords(int64_t i, int64_t* c) const {
    if (rank == 0) return;
    if (index32) {
      uint32_t j = static_cast<uint32_t>(i);
      for (int d = rank; d-- > 1;) {
        const uint32_t s = static_cast<uint32_t>(size[d]);
        c[d] = j % s;
        j /= s;
      }
      c[0] = j;
      return;
    }
    for (int d = rank; d-- > 1;) {
      c[d] = i % size[d];
      i /= size[d];
    }
    c[0] = i;
  }
  OXM_HD int64_t dot(int s, const int64_t* c) const {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += c[d] * stride[s][d];
    return off;
  }
};

// First position in the ascending keys[0, n) whose key is >= `key` (n when none): the sorted scatters'
// run lookup.
OXM_HD inline int64_t lower_bound_key(const uint64_t* keys, int64_t n, uint64_t key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// ---------------------------------------------------------------- col2im
// The (y, z) output position that reads input pixel (h, w) through kernel tap (i, j), or false when none
// does: h = y*sh - ph + i*dh must hold for an integer y in [0, oh) (same for w).
OXM_HD inline bool col2im_source(int64_t h, int64_t i, int64_t sh, int64_t ph, int64_t dh, int64_t oh, int64_t& y) {
  const int64_t t = h + ph - i * dh;
  if (t < 0 || t % sh != 0) return false;
  y = t / sh;
  return y < oh;
}

// Where column element p of im2col's [N, C*K, L] output comes from: image nn, channel c, tap (i, j), output
// position (y, z). I is the index type of the arithmetic: uint32_t when every index fits (im2col_fits_32bit), since a
// GPU divides 32-bit integers several times faster than 64-bit ones, else int64_t.
struct Im2colPos {
  int64_t nn, c, i, j, y, z;
};
template <class I>
OXM_HD inline Im2colPos im2col_position(I p, I C, I kh, I kw, I oh, I ow) {
  const I K = kh * kw, L = oh * ow;
  const I l = p % L, row = p / L;
  const I k = row % K, nc = row / K;
  return {static_cast<int64_t>(nc / C), static_cast<int64_t>(nc % C), static_cast<int64_t>(k / kw),
          static_cast<int64_t>(k % kw), static_cast<int64_t>(l / ow), static_cast<int64_t>(l % ow)};
}
// Input pixel p of col2im's [N, C, H, W] gradient: plane nc (= n * C + c), row h, column w.
struct Col2imPos {
  int64_t nc, h, w;
};
template <class I>
OXM_HD inline Col2imPos col2im_position(I p, I H, I W) {
  const I row = p / W;
  return {static_cast<int64_t>(row / H), static_cast<int64_t>(row % H), static_cast<int64_t>(p % W)};
}
// True when the 32-bit arithmetic is exact: every element index below n, and each factor, fits in an int32.
inline bool im2col_fits_32bit(int64_t n, int64_t C, int64_t kh, int64_t kw, int64_t oh, int64_t ow) {
  constexpr int64_t kMax = INT32_MAX;
  return n <= kMax && C <= kMax && kh <= kMax && kw <= kMax && oh <= kMax && ow <= kMax && kh * kw <= kMax &&
         oh * ow <= kMax;
}

// ---------------------------------------------------------------- launch geometry
// Blocks for a grid-stride loop over n elements: enough to fill the device, never more than needed.
inline int64_t grid_blocks(int64_t n, int threads, int sm_count) {
  if (n <= 0) return 1;
  const int64_t need = (n + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sm_count > 0 ? sm_count : 1) * 32;
  return need < cap ? need : cap;
}
// Chunks a reduction of R elements per output is split into: depends on R only (deterministic results).
inline int64_t reduce_chunks(int64_t R) {
  constexpr int64_t kChunk = 32768, kMaxChunks = 1024;
  const int64_t c = (R + kChunk - 1) / kChunk;
  return c < 1 ? 1 : (c > kMaxChunks ? kMaxChunks : c);
}
// Column reductions (the kept outputs contiguous in x): blocks of kColOutputs outputs x kColRows reduced
// rows, and the reduced extent split into `chunks` so that few outputs still fill the device. Depends on
// M and R only, so every GPU combines in the same order (the target, 528 blocks, is 4 per SM of an H100/H200).
inline constexpr int kColOutputs = 32, kColRows = 8;
inline constexpr int64_t kColTargetBlocks = 528;
inline int64_t col_reduce_chunks(int64_t M, int64_t R) {
  const int64_t col_blocks = (M + kColOutputs - 1) / kColOutputs;
  const int64_t want = (kColTargetBlocks + col_blocks - 1) / col_blocks;
  const int64_t by_rows = (R + 8 * kColRows - 1) / (8 * kColRows);  // at least 8 rows per thread per chunk
  int64_t c = want < by_rows ? want : by_rows;
  if (c > 65535) c = 65535;  // grid.y limit
  return c < 1 ? 1 : c;
}

// Which kernel reduces M = kept.numel() outputs of R = red.numel() elements each (cuda_reduce.cu; host-tested):
//  Fill      no element to reduce: each output is the identity;
//  WarpRows  many short contiguous runs (sum(-1) of [N, 256]): a warp per output, lanes reading adjacent elements
//            (one thread per output would read R elements apart in each lane: uncoalesced);
//  Thread    many short runs otherwise (the kept outputs adjacent, or runs under 16): a thread per output;
//  Cols      the kept outputs contiguous in x: a warp reads 32 adjacent outputs' values;
//  Block     long runs: a block per output (and chunk).
enum class ReduceKernel { Fill, WarpRows, Thread, Cols, Block };
inline constexpr int64_t kWarpRowsMin = 16;
inline ReduceKernel choose_reduce_kernel(const Group& kept, const Group& red) {
  const int64_t M = kept.numel(), R = red.numel();
  if (R == 0) return ReduceKernel::Fill;
  if (M >= 4096 && R <= 256) {
    const bool contiguous_runs = red.ndim == 1 && red.stride[0] == 1;
    return contiguous_runs && R >= kWarpRowsMin ? ReduceKernel::WarpRows : ReduceKernel::Thread;
  }
  if (kept.ndim >= 1 && kept.stride[0] == 1 && kept.size[0] >= kColRows) return ReduceKernel::Cols;
  return ReduceKernel::Block;
}

// ---------------------------------------------------------------- grouped optimizer launches
// A launch updates up to kMultiMax parameters; block b of it updates kMultiChunk elements of one parameter.
// first_block[j] is the first block of the launch's parameter j (count + 1 increasing entries, the last the
// launch's block count). multi_block_param maps a block to its parameter; multi_block_range to its elements.
inline constexpr int kMultiMax = 24;
inline constexpr int64_t kMultiChunk = 4096;
OXM_HD inline int multi_block_param(const int64_t* first_block, int count, int64_t b) {
  int j = 0;
  while (j + 1 < count && b >= first_block[j + 1]) ++j;
  return j;
}
OXM_HD inline void multi_block_range(const int64_t* first_block, const int64_t* n, int j, int64_t b, int64_t& begin,
                                     int64_t& end) {
  begin = (b - first_block[j]) * kMultiChunk;
  end = begin + kMultiChunk < n[j] ? begin + kMultiChunk : n[j];
}
// Host side: assigns parameter i (numel sizes[i]; empty ones are skipped) to a launch. Calls
// place(i, launch, slot, first_block) for each non-empty parameter in order and close(launch, slot_count,
// blocks) when a launch is full (kMultiMax parameters or 2^30 blocks) and after the last one.
template <class Place, class Close>
void plan_multi_launches(const int64_t* sizes, int64_t count, Place&& place, Close&& close) {
  int launch = 0, slot = 0;
  int64_t blocks = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (sizes[i] == 0) continue;
    place(i, launch, slot, blocks);
    ++slot;
    blocks += (sizes[i] + kMultiChunk - 1) / kMultiChunk;
    if (slot == kMultiMax || blocks >= (int64_t{1} << 30)) {
      close(launch, slot, blocks);
      ++launch;
      slot = 0;
      blocks = 0;
    }
  }
  if (slot > 0) close(launch, slot, blocks);
}

}  // namespace oxmera::detail::cuda
