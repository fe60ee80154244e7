// Structured layout ops written as compositions of ops every backend runs (where, index_select, narrow,
// broadcast + copy): tril / triu, masked_fill, chunk / split / unbind, flip / roll, repeat / tile. Their
// gradients come from the ops they are made of, so there is no kernel and no node here.
#include <algorithm>

#include "ops/graph_capture.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera {
namespace {

void check_values_dtype(const Tensor& x, const char* op) {
  detail::check_defined(x, op);
  OXM_CHECK(x.dtype() != DType::U8, UnsupportedDType, op, ": dtype u8 is not supported (f32, f64, i64)");
}

// An I64 index tensor on x's device.
Tensor index_on_device_of(const std::vector<int64_t>& idx, const Tensor& x) {
  return detail::constant_on_device(from_vector<int64_t>(idx, {static_cast<int64_t>(idx.size())}), x.device());
}

Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  check_values_dtype(x, op);
  OXM_CHECK(x.dim() >= 2, InvalidArgument, op, ": needs a tensor of rank >= 2 (matrices in the last two dims), got ",
            "shape ", x.shape());
  const int64_t rows = x.size(-2), cols = x.size(-1);
  // A [rows, cols] u8 mask built on the host: one small transfer, then one where() broadcast over the batch.
  std::vector<uint8_t> keep(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      keep[static_cast<size_t>(i * cols + j)] = lower ? (j - i <= diagonal) : (j - i >= diagonal);
  Tensor mask = detail::constant_on_device(from_vector<uint8_t>(keep, {rows, cols}), x.device());
  return where(mask, x, ops::scalar_on_device_of(0.0, x, op));
}

}  // namespace

Tensor Tensor::tril(int64_t diagonal) const { return triangle(*this, diagonal, true, "tril"); }
namespace ops {
Tensor causal_mask(int64_t L, int64_t S, Device device) {
  OXM_CHECK(L >= 0 && S >= 0, InvalidArgument, "causal mask: sizes must be >= 0, got [", L, ", ", S, "]");
  std::vector<uint8_t> future(static_cast<size_t>(L * S));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = i + 1; j < S; ++j) future[static_cast<size_t>(i * S + j)] = 1;
  return detail::constant_on_device(from_vector<uint8_t>(future, {L, S}), device);
}
}  // namespace ops

Tensor Tensor::triu(int64_t diagonal) const { return triangle(*this, diagonal, false, "triu"); }

Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value) const {
  check_values_dtype(*this, "masked_fill");
  detail::check_defined(mask, "masked_fill", "mask");
  detail::check_defined(value, "masked_fill", "value");
  OXM_CHECK(mask.dtype() == DType::U8 || mask.dtype() == dtype(), DTypeMismatch, "masked_fill: mask has dtype ",
            mask.dtype(), " but self has dtype ", dtype(),
            "; the mask must be u8 or self's dtype (a comparison of self gives one)");
  OXM_CHECK(mask.device() == device(), DeviceMismatch, "masked_fill: mask is on ", mask.device(), " but self is on ",
            device());
  OXM_CHECK(value.dim() == 0, InvalidArgument, "masked_fill: the value must be a 0-d tensor (or a number), got shape ",
            value.shape());
  OXM_CHECK(value.dtype() != DType::U8, UnsupportedDType, "masked_fill: a u8 value is not supported");
  const Shape b = broadcast_shapes(shape(), mask.shape(), "masked_fill");
  OXM_CHECK(b == shape(), ShapeMismatch, "masked_fill: mask of shape ", mask.shape(),
            " does not broadcast to self's shape ", shape(), " (the result keeps self's shape)");
  return where(mask, value.to(dtype()).to(device()), *this);
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  check_values_dtype(*this, "masked_fill");
  return masked_fill(mask, ops::scalar_on_device_of(value, *this, "masked_fill"));
}

std::vector<Tensor> Tensor::split_size(int64_t size, int64_t dim) const {
  detail::check_defined(*this, "split");
  OXM_CHECK(this->dim() > 0, InvalidArgument, "split: a 0-d tensor cannot be split");
  const int64_t d = normalize_dim(dim, this->dim(), "split"), n = this->size(d);
  OXM_CHECK(size > 0 || (size == 0 && n == 0), InvalidArgument, "split: split size ", size, " must be positive (dim ",
            dim, " of shape ", shape(), ")");
  std::vector<Tensor> out;
  if (n == 0) out.push_back(narrow(d, 0, 0));  // torch: one empty piece
  for (int64_t s = 0; s < n; s += size) out.push_back(narrow(d, s, std::min(size, n - s)));
  return out;
}

std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t dim) const {
  detail::check_defined(*this, "split");
  OXM_CHECK(this->dim() > 0, InvalidArgument, "split: a 0-d tensor cannot be split");
  const int64_t d = normalize_dim(dim, this->dim(), "split"), n = this->size(d);
  int64_t total = 0;
  for (int64_t s : sizes) {
    OXM_CHECK(s >= 0, InvalidArgument, "split: sizes ", Dims(sizes), " contain a negative size");
    OXM_CHECK(!__builtin_add_overflow(total, s, &total), ShapeMismatch, "split: sizes ", Dims(sizes),
              " sum to more than 2^63 but dim ", dim, " of shape ", shape(), " has ", n, " entries");
  }
  OXM_CHECK(total == n, ShapeMismatch, "split: sizes ", Dims(sizes), " sum to ", total, " but dim ", dim, " of shape ",
            shape(), " has ", n, " entries");
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  detail::check_defined(*this, "chunk");
  OXM_CHECK(chunks > 0, InvalidArgument, "chunk: the number of chunks must be positive, got ", chunks);
  OXM_CHECK(this->dim() > 0, InvalidArgument, "chunk: a 0-d tensor cannot be chunked");
  const int64_t d = normalize_dim(dim, this->dim(), "chunk"), n = size(d);
  if (n == 0) return split(std::vector<int64_t>(static_cast<size_t>(chunks), 0), d);  // torch: `chunks` empty pieces
  return split_size(n / chunks + (n % chunks != 0), d);  // ceil(n / chunks), without overflow for huge `chunks`
}

std::vector<Tensor> Tensor::unbind(int64_t dim) const {
  detail::check_defined(*this, "unbind");
  OXM_CHECK(this->dim() > 0, InvalidArgument, "unbind: a 0-d tensor has no dim to unbind");
  const int64_t d = normalize_dim(dim, this->dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < size(d); ++i) out.push_back(select(d, i));
  return out;
}

Tensor Tensor::flip(const Dims& dims) const {
  check_values_dtype(*this, "flip");
  const int64_t rank = dim();
  const uint64_t mask = dims.empty() ? 0 : ops::reduce_mask(dims, rank, "flip");
  Tensor out = *this;
  for (int64_t d = 0; d < rank; ++d) {
    if (!(mask >> d & 1) || size(d) <= 1) continue;
    std::vector<int64_t> idx(static_cast<size_t>(size(d)));
    for (int64_t i = 0; i < size(d); ++i) idx[static_cast<size_t>(i)] = size(d) - 1 - i;
    out = out.index_select(d, index_on_device_of(idx, *this));
  }
  return out.is_same(*this) ? clone() : out;  // always a copy, as torch
}

Tensor Tensor::roll(const Dims& shifts, const Dims& dims) const {
  check_values_dtype(*this, "roll");
  if (dims.empty()) {
    OXM_CHECK(shifts.size() == 1, InvalidArgument, "roll: without dims one shift (of the flattened tensor) is ",
              "expected, got shifts ", shifts);
    return flatten().roll(shifts, {0}).reshape(shape());
  }
  OXM_CHECK(shifts.size() == dims.size(), InvalidArgument, "roll: shifts ", shifts, " and dims ", dims,
            " must have the same length");
  Tensor out = *this;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = normalize_dim(dims[k], dim(), "roll");
    const int64_t n = dim() == 0 ? 1 : size(d);
    if (n <= 1) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;
    if (s == 0) continue;
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = (i - s + n) % n;
    out = out.index_select(d, index_on_device_of(idx, *this));
  }
  return out.is_same(*this) ? clone() : out;
}

Tensor Tensor::repeat(const Shape& repeats) const {
  check_values_dtype(*this, "repeat");
  const size_t rank = static_cast<size_t>(dim());
  OXM_CHECK(repeats.size() >= rank, InvalidArgument, "repeat: ", repeats.size(), " repeats ", repeats,
            " for a tensor of shape ", shape(), "; give at least one per dim (tile pads them with 1s)");
  for (int64_t r : repeats)
    OXM_CHECK(r >= 0, InvalidArgument, "repeat: repeats ", repeats, " contain a negative count");
  Shape padded(repeats.size() - rank, 1);
  for (int64_t s : shape()) padded.push_back(s);
  // [r0, s0, r1, s1, ...] as a stride-0 broadcast of [1, s0, 1, s1, ...], copied once, then merged pairwise.
  Shape unsq, expanded, result;
  for (size_t i = 0; i < repeats.size(); ++i) {
    unsq.push_back(1);
    unsq.push_back(padded[i]);
    expanded.push_back(repeats[i]);
    expanded.push_back(padded[i]);
    int64_t size = 0;
    OXM_CHECK(!__builtin_mul_overflow(repeats[i], padded[i], &size), InvalidArgument, "repeat: repeats ", repeats,
              " of shape ", shape(), " give a dim larger than 2^63 - 1; use smaller repeats");
    result.push_back(size);
  }
  return reshape(unsq).broadcast_to(expanded).clone().reshape(result);
}

Tensor Tensor::tile(const Shape& repeats) const {
  check_values_dtype(*this, "tile");
  const size_t rank = static_cast<size_t>(dim());
  if (repeats.size() >= rank) return repeat(repeats);
  Shape padded(rank - repeats.size(), 1);
  for (int64_t r : repeats) padded.push_back(r);
  return repeat(padded);
}

}  // namespace oxmera
