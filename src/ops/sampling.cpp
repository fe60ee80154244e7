// Sampling from tensors of probabilities: multinomial and bernoulli. Both draw on the host from a Generator (the
// same stream on every device and thread count) and put the result on the input's device.
#include <cmath>

#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/random.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera {

namespace {
// Index of the category u * total falls into, scanning the running sums of `w` (the n weights of one row).
int64_t pick(const double* w, int64_t n, double target) {
  double run = 0;
  int64_t last_positive = -1;
  for (int64_t j = 0; j < n; ++j) {
    if (w[j] <= 0) continue;
    run += w[j];
    last_positive = j;
    if (target < run) return j;
  }
  return last_positive;  // rounding left target at the very end
}
}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator& gen) {
  const char* op = "multinomial";
  detail::check_defined(probs, op);
  OXM_CHECK(is_floating(probs.dtype()), UnsupportedDType, op, ": probabilities have dtype ", probs.dtype(),
            "; pass f32 or f64 weights");
  OXM_CHECK(probs.dim() == 1 || probs.dim() == 2, InvalidArgument, op, ": probabilities must be 1-d or 2-d, got shape ",
            probs.shape());
  OXM_CHECK(num_samples > 0, InvalidArgument, op, ": num_samples must be positive, got ", num_samples);
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1, n = probs.size(-1);
  OXM_CHECK(n > 0, InvalidArgument, op, ": there are no categories (shape ", probs.shape(), ")");
  OXM_CHECK(replacement || num_samples <= n, InvalidArgument, op, ": cannot draw ", num_samples,
            " samples without replacement from ", n, " categories; pass replacement = true");
  std::vector<double> w;
  {
    NoGradGuard ng;
    w = probs.detach().to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
  }
  std::vector<int64_t> out(static_cast<size_t>(rows * num_samples));
  for (int64_t r = 0; r < rows; ++r) {
    double* row = w.data() + r * n;
    double total = 0;
    int64_t positive = 0;
    for (int64_t j = 0; j < n; ++j) {
      OXM_CHECK(std::isfinite(row[j]) && row[j] >= 0, InvalidArgument, op, ": row ", r, " holds the weight ", row[j],
                " at category ", j, "; weights must be finite and non-negative");
      total += row[j];
      positive += row[j] > 0;
    }
    OXM_CHECK(total > 0, InvalidArgument, op, ": row ", r, " has no positive weight");
    OXM_CHECK(replacement || num_samples <= positive, InvalidArgument, op, ": row ", r, " has ", positive,
              " categories of positive weight, fewer than the ", num_samples,
              " samples drawn without replacement; pass replacement = true");
    for (int64_t s = 0; s < num_samples; ++s) {
      const int64_t j = pick(row, n, gen.next_double() * total);
      out[r * num_samples + s] = j;
      if (!replacement) {  // remove the category drawn, then renormalise by summing again (no drift)
        row[j] = 0;
        total = 0;
        for (int64_t q = 0; q < n; ++q) total += row[q];
      }
    }
  }
  Shape shape = probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples};
  return from_vector(out, shape).to(probs.device());
}
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed) {
  Generator g(seed);
  return multinomial(probs, num_samples, replacement, g);
}

Tensor bernoulli(const Tensor& p, Generator& gen) {
  const char* op = "bernoulli";
  detail::check_defined(p, op);
  OXM_CHECK(is_floating(p.dtype()), UnsupportedDType, op, ": probabilities have dtype ", p.dtype(),
            "; pass f32 or f64 probabilities");
  std::vector<double> v;
  {
    NoGradGuard ng;
    v = p.detach().to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
  }
  for (size_t i = 0; i < v.size(); ++i) {
    OXM_CHECK(v[i] >= 0 && v[i] <= 1, InvalidArgument, op, ": probability ", v[i], " at flat position ", i,
              " is outside [0, 1]");
    v[i] = gen.next_double() < v[i] ? 1.0 : 0.0;
  }
  return from_vector(v, p.shape()).to(p.dtype()).to(p.device());
}
Tensor bernoulli(const Tensor& p, uint64_t seed) {
  Generator g(seed);
  return bernoulli(p, g);
}

}  // namespace oxmera
