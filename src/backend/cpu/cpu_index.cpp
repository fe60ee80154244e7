// CPU kernels of the index ops (gathers and deterministic scatters). Memory-bound: one build for all ISAs.
#include <algorithm>
#include <cstring>
#include <utility>

#include "backend/cpu/cpu_index.hpp"
#include "backend/cpu/parallel.hpp"

namespace oxmera::detail {
namespace {

// Splits a tensor's geometry around `dim` into (outer, dim, inner) with element strides; outer/inner are
// walked with per-dim counters, so any strides work.
struct Around {
  Shape outer_shape, inner_shape;
  Strides outer_strides, inner_strides;
  int64_t dim_size = 1, dim_stride = 0;
  int64_t outer_numel() const { return outer_shape.product(); }
  int64_t inner_numel() const { return inner_shape.product(); }
};
Around around(const Shape& shape, const Strides& strides, int64_t dim) {
  Around a;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (static_cast<int64_t>(d) < dim) {
      a.outer_shape.push_back(shape[d]);
      a.outer_strides.push_back(strides[d]);
    } else if (static_cast<int64_t>(d) > dim) {
      a.inner_shape.push_back(shape[d]);
      a.inner_strides.push_back(strides[d]);
    } else {
      a.dim_size = shape[d];
      a.dim_stride = strides[d];
    }
  }
  return a;
}
inline int64_t offset_of(int64_t flat, const Shape& shape, const Strides& strides) {
  int64_t off = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    off += (flat % shape[d]) * strides[d];
    flat /= shape[d];
  }
  return off;
}
inline bool is_unit_inner(const Around& a) {
  int64_t expect = 1;
  for (size_t d = a.inner_shape.size(); d-- > 0;) {
    if (a.inner_shape[d] != 1 && a.inner_strides[d] != expect) return false;
    expect *= a.inner_shape[d];
  }
  return true;
}

template <class T>
void index_select_t(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) {
  const Around ax = around(x.shape, x.strides, dim);
  const int64_t n = idx.numel, O = ax.outer_numel(), I = ax.inner_numel();
  const int64_t* ip = idx.ptr<int64_t>();
  const int64_t istride = idx.shape.empty() ? 0 : idx.strides[0];
  const T* xp = x.ptr<T>();
  T* op = out.ptr<T>();
  const bool rows = is_unit_inner(ax);
  parallel_for(O * n, std::max<int64_t>(1, 32768 / std::max<int64_t>(I, 1)), [&](int64_t b, int64_t e) {
    // One outer offset per outer slice, not per element: selecting along the last dim (I == 1, as flip and
    // roll do) is then a plain gather loop.
    for (int64_t u = b; u < e;) {
      const int64_t o = u / n, stop = std::min(e, (o + 1) * n);
      const T* base = xp + offset_of(o, ax.outer_shape, ax.outer_strides);
      for (int64_t i = u % n; u < stop; ++u, ++i) {
        const T* src = base + ip[i * istride] * ax.dim_stride;
        T* dst = op + u * I;
        if (rows && I == 1) {
          *dst = *src;
        } else if (rows) {
          std::memcpy(dst, src, static_cast<size_t>(I) * sizeof(T));
        } else {
          for (int64_t j = 0; j < I; ++j) dst[j] = src[offset_of(j, ax.inner_shape, ax.inner_strides)];
        }
      }
    }
  });
}

template <class T>
void index_add_t(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) {
  const Around ao = around(out.shape, out.strides, dim), as = around(src.shape, src.strides, dim);
  const int64_t n = idx.numel, O = ao.outer_numel(), I = ao.inner_numel();
  const int64_t* ip = idx.ptr<int64_t>();
  const int64_t istride = idx.shape.empty() ? 0 : idx.strides[0];
  T* op = out.ptr<T>();
  const T* sp = src.ptr<T>();
  // Contiguous inner rows on both sides (the embedding backward: [n, D] rows into [V, D]): plain row additions
  // (vectorised) instead of an offset computation per element.
  const bool rows = is_unit_inner(ao) && is_unit_inner(as);
  // Parallel over outer slices only: each (outer, inner) output receives its additions in index order.
  parallel_for(O, std::max<int64_t>(1, 32768 / std::max<int64_t>(n * I, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      T* obase = op + offset_of(o, ao.outer_shape, ao.outer_strides);
      const T* sbase = sp + offset_of(o, as.outer_shape, as.outer_strides);
      for (int64_t i = 0; i < n; ++i) {
        T* orow = obase + ip[i * istride] * ao.dim_stride;
        const T* srow = sbase + i * as.dim_stride;
        if (rows) {
          for (int64_t j = 0; j < I; ++j) orow[j] += srow[j];
          continue;
        }
        for (int64_t j = 0; j < I; ++j)
          orow[offset_of(j, ao.inner_shape, ao.inner_strides)] += srow[offset_of(j, as.inner_shape, as.inner_strides)];
      }
    }
  });
}

// Visits every position p of `shape` (row-major) with the offsets of p in a, b (element strides), and
// the index value position; `dim` of a is replaced by idx[p].
template <class F>
void for_each_indexed(const Shape& shape, const Strides& sa, const Strides& sb, const Strides& si, F&& f) {
  const int64_t total = shape.product();
  const size_t r = shape.size();
  SmallDims pos(r, 0);
  int64_t oa = 0, ob = 0, oi = 0;
  for (int64_t k = 0; k < total; ++k) {
    f(oa, ob, oi, pos);
    for (size_t d = r; d-- > 0;) {
      ++pos[d];
      oa += sa[d];
      ob += sb[d];
      oi += si[d];
      if (pos[d] < shape[d]) break;
      oa -= sa[d] * shape[d];
      ob -= sb[d] * shape[d];
      oi -= si[d] * shape[d];
      pos[d] = 0;
    }
  }
}

template <class T>
void gather_t(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) {
  Strides xs = x.strides;
  const int64_t dstride = x.shape.empty() ? 0 : xs[dim];
  if (!xs.empty()) xs[dim] = 0;  // the dim coordinate comes from the index
  const T* xp = x.ptr<T>();
  T* op = out.ptr<T>();
  const int64_t* ip = idx.ptr<int64_t>();
  for_each_indexed(out.shape, xs, out.strides, idx.strides,
                   [&](int64_t ox, int64_t oo, int64_t oi, const SmallDims&) { op[oo] = xp[ox + ip[oi] * dstride]; });
}

template <class T>
void scatter_add_t(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) {
  Strides os = out.strides;
  const int64_t dstride = out.shape.empty() ? 0 : os[dim];
  if (!os.empty()) os[dim] = 0;
  T* op = out.ptr<T>();
  const T* sp = src.ptr<T>();
  const int64_t* ip = idx.ptr<int64_t>();
  for_each_indexed(
      idx.shape, os, src.strides, idx.strides,
      [&](int64_t oo, int64_t osrc, int64_t oi, const SmallDims&) { op[oo + ip[oi] * dstride] += sp[osrc]; });
}

// Output columns z whose input column z*sw + w0 lies inside [0, W): [z_lo, z_hi). The ceilings are taken as
// (a - 1) / s + 1 for a > 0, so a stride near INT64_MAX does not overflow.
std::pair<int64_t, int64_t> inside_columns(const ConvGeometry& g, int64_t W, int64_t w0) {
  const int64_t z_lo = std::min<int64_t>(g.ow, w0 >= 0 ? 0 : (-w0 - 1) / g.sw + 1);
  const int64_t z_hi = std::max<int64_t>(z_lo, std::min<int64_t>(g.ow, W - w0 <= 0 ? 0 : (W - w0 - 1) / g.sw + 1));
  return {z_lo, z_hi};
}

template <class T>
void im2col_t(const TensorImpl& x, TensorImpl& cols, const ConvGeometry& g, double pad_value, bool ones_row) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t s0 = x.strides[0], s1 = x.strides[1], s2 = x.strides[2], s3 = x.strides[3];
  const int64_t K = g.kh * g.kw, L = g.oh * g.ow;
  const int64_t rows = C * K + (ones_row ? 1 : 0);  // rows per image
  const T* xp = x.ptr<T>();
  T* cp = cols.ptr<T>();
  const T pad = static_cast<T>(pad_value);
  if (ones_row)
    for (int64_t n = 0; n < N; ++n) std::fill(cp + (n * rows + C * K) * L, cp + (n + 1) * rows * L, T(1));
  parallel_for(N * C * K, std::max<int64_t>(1, 16384 / std::max<int64_t>(L, 1)), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t n = row / (C * K), c = (row / K) % C, i = (row % K) / g.kw, j = row % g.kw;
      const T* plane = xp + n * s0 + c * s1;
      T* out = cp + (n * rows + row % (C * K)) * L;
      const int64_t w0 = -g.pw + j * g.dw;
      const auto [z_lo, z_hi] = inside_columns(g, W, w0);  // the same for every y
      for (int64_t y = 0; y < g.oh; ++y) {
        const int64_t h = y * g.sh - g.ph + i * g.dh;
        T* orow = out + y * g.ow;
        if (h < 0 || h >= H) {
          for (int64_t z = 0; z < g.ow; ++z) orow[z] = pad;
          continue;
        }
        const T* xrow = plane + h * s2;
        for (int64_t z = 0; z < z_lo; ++z) orow[z] = pad;
        if (z_hi - z_lo == 1) {
          orow[z_lo] = xrow[(z_lo * g.sw + w0) * s3];  // the only case where sw * s3 may not fit in int64
        } else if (z_hi > z_lo) {
          const T* src = xrow + (z_lo * g.sw + w0) * s3;
          const int64_t step = g.sw * s3;
          if (step == 1) {
            std::memcpy(orow + z_lo, src, static_cast<size_t>(z_hi - z_lo) * sizeof(T));
          } else {
            for (int64_t z = z_lo; z < z_hi; ++z) orow[z] = src[(z - z_lo) * step];
          }
        }
        for (int64_t z = z_hi; z < g.ow; ++z) orow[z] = pad;
      }
    }
  });
}

template <class T>
void col2im_t(const TensorImpl& cols, TensorImpl& xg, const ConvGeometry& g, bool ones_row, bool zero_first) {
  const int64_t N = xg.shape[0], C = xg.shape[1], H = xg.shape[2], W = xg.shape[3];
  const int64_t K = g.kh * g.kw, L = g.oh * g.ow;
  const int64_t rows = C * K + (ones_row ? 1 : 0);  // rows per image (im2col's ones row is skipped)
  const T* cp = cols.ptr<T>();
  T* xp = xg.ptr<T>();
  // One (n, c) plane per task: every write to a plane comes from its own K rows, in a fixed order.
  parallel_for(N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(K * L, 1)), [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      T* plane = xp + nc * H * W;
      if (zero_first) std::fill(plane, plane + H * W, T(0));
      const T* image = cp + (nc / C) * rows * L + (nc % C) * K * L;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = k / g.kw, j = k % g.kw;
        const T* in = image + k * L;
        const int64_t w0 = -g.pw + j * g.dw;
        const auto [z_lo, z_hi] = inside_columns(g, W, w0);
        for (int64_t y = 0; y < g.oh; ++y) {
          const int64_t h = y * g.sh - g.ph + i * g.dh;
          if (h < 0 || h >= H) continue;
          const int64_t base = h * W + w0;  // plane index of column z = base + z * sw
          const T* irow = in + y * g.ow;
          if (g.sw == 1) {
            for (int64_t z = z_lo; z < z_hi; ++z) plane[base + z] += irow[z];
          } else {
            for (int64_t z = z_lo; z < z_hi; ++z) plane[base + z * g.sw] += irow[z];
          }
        }
      }
    }
  });
}

#define OXM_DISPATCH(dtype, fn, ...)   \
  switch (dtype) {                     \
    case DType::F32:                   \
      return fn<float>(__VA_ARGS__);   \
    case DType::F64:                   \
      return fn<double>(__VA_ARGS__);  \
    case DType::I64:                   \
      return fn<int64_t>(__VA_ARGS__); \
    case DType::U8:                    \
      return fn<uint8_t>(__VA_ARGS__); \
  }

}  // namespace

void cpu_index_select(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) {
  OXM_DISPATCH(x.dtype, index_select_t, x, dim, idx, out)
}
void cpu_index_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) {
  OXM_DISPATCH(out.dtype, index_add_t, out, dim, idx, src)
}
void cpu_gather(const TensorImpl& x, int64_t dim, const TensorImpl& idx, TensorImpl& out) {
  OXM_DISPATCH(x.dtype, gather_t, x, dim, idx, out)
}
void cpu_scatter_add(TensorImpl& out, int64_t dim, const TensorImpl& idx, const TensorImpl& src) {
  OXM_DISPATCH(out.dtype, scatter_add_t, out, dim, idx, src)
}

void cpu_im2col(const TensorImpl& x, TensorImpl& cols, const ConvGeometry& g, double pad_value, bool ones_row) {
  switch (x.dtype) {
    case DType::F32:
      return im2col_t<float>(x, cols, g, pad_value, ones_row);
    case DType::F64:
      return im2col_t<double>(x, cols, g, pad_value, ones_row);
    default:
      OXM_FAIL(UnsupportedDType, "im2col: dtype ", x.dtype, " is not supported (f32, f64)");
  }
}
void cpu_col2im(const TensorImpl& cols, TensorImpl& x_grad, const ConvGeometry& g, bool ones_row, bool zero_first) {
  switch (cols.dtype) {
    case DType::F32:
      return col2im_t<float>(cols, x_grad, g, ones_row, zero_first);
    case DType::F64:
      return col2im_t<double>(cols, x_grad, g, ones_row, zero_first);
    default:
      OXM_FAIL(UnsupportedDType, "col2im: dtype ", cols.dtype, " is not supported (f32, f64)");
  }
}

}  // namespace oxmera::detail
