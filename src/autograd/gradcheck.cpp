// Finite-difference check of the tape: for random output projections v, compares the gradient of
// <v, f(x)> from backward() with central differences of the same scalar.
#include <cmath>
#include <sstream>

#include "oxmera/autograd.hpp"
#include "oxmera/random.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  GradcheckResult res;
  Generator gen(opt.seed);
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) {
    detail::check_defined(x, "gradcheck");
    Tensor c = x.detach().clone();
    if (x.requires_grad()) c.requires_grad_(true);
    xs.push_back(c);
  }
  double worst_excess = -1.0;
  for (int proj = 0; proj < std::max(1, opt.projections); ++proj) {
    Tensor y0;
    {
      NoGradGuard ng;
      y0 = f(xs);
    }
    OXM_CHECK(is_floating(y0.dtype()), UnsupportedDType, "gradcheck: f must return a float tensor, got ", y0.dtype());
    Tensor v = randn(y0.shape(), gen, DType::F64).to(y0.dtype());
    auto objective = [&]() {
      NoGradGuard ng;
      return (f(xs).to(DType::F64) * v.to(DType::F64)).sum().item<double>();
    };
    for (auto& x : xs) x.zero_grad();
    Tensor y = f(xs);
    OXM_CHECK(y.requires_grad(), InvalidArgument,
              "gradcheck: f's output does not depend on any input that requires grad");
    y.backward(v);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i].requires_grad()) continue;
      OXM_CHECK(xs[i].dtype() == DType::F64, UnsupportedDType, "gradcheck: input ", i, " has dtype ", xs[i].dtype(),
                "; finite differences need f64 inputs");
      Tensor g = xs[i].grad();
      std::vector<double> analytic = g.defined() ? g.to(DType::F64).contiguous().to_vector<double>()
                                                 : std::vector<double>(static_cast<size_t>(xs[i].numel()), 0.0);
      // xs[i] is a contiguous clone, so flat index j is element j in logical order.
      double* p = xs[i].data_ptr<double>();
      for (int64_t j = 0; j < xs[i].numel(); ++j) {
        double orig = p[j];
        p[j] = orig + opt.eps;
        double fp = objective();
        p[j] = orig - opt.eps;
        double fm = objective();
        p[j] = orig;
        double numeric = (fp - fm) / (2 * opt.eps);
        double err = std::abs(analytic[j] - numeric);
        double excess = err - (opt.atol + opt.rtol * std::abs(numeric));
        if (err > res.max_abs_error) res.max_abs_error = err;
        if (excess > worst_excess) {
          worst_excess = excess;
          res.worst_input = static_cast<int>(i);
          res.worst_index = j;
          res.analytic = analytic[j];
          res.numeric = numeric;
        }
      }
    }
  }
  res.ok = worst_excess <= 0.0;
  std::ostringstream os;
  os << "gradcheck " << (res.ok ? "passed" : "FAILED") << ": max |analytic - numeric| = " << res.max_abs_error;
  if (res.worst_input >= 0)
    os << "; worst at input " << res.worst_input << " element " << res.worst_index << " (analytic " << res.analytic
       << ", numeric " << res.numeric << ")";
  res.message = os.str();
  return res;
}

GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                              const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  std::vector<Tensor> extended;
  for (const Tensor& x : inputs) {
    detail::check_defined(x, "gradgradcheck");
    extended.push_back(x);
  }
  Tensor y0;
  {
    NoGradGuard ng;
    y0 = f(inputs);
  }
  OXM_CHECK(is_floating(y0.dtype()), UnsupportedDType, "gradgradcheck: f must return a float tensor, got ", y0.dtype());
  Generator gen(opt.seed ^ 0x9e3779b97f4a7c15ULL);
  Tensor v = randn(y0.shape(), gen, DType::F64).to(y0.dtype());
  extended.push_back(v.requires_grad_(true));
  const size_t n = inputs.size();
  auto first_derivatives = [&](const std::vector<Tensor>& xv) {
    // The finite differences run this under NoGradGuard; the gradient itself needs the tape.
    const bool outer = grad_enabled();
    Tensor r;
    {
      AutoGradMode on(true);
      std::vector<Tensor> xs(xv.begin(), xv.begin() + static_cast<std::ptrdiff_t>(n)), diff;
      for (const Tensor& x : xs)
        if (x.requires_grad()) diff.push_back(x);
      OXM_CHECK(!diff.empty(), InvalidArgument, "gradgradcheck: no input requires grad");
      Tensor y = f(xs);
      OXM_CHECK(y.requires_grad(), InvalidArgument,
                "gradgradcheck: f's output does not depend on any input that requires grad");
      std::vector<Tensor> grads = autograd::grad({y}, diff, {xv[n]}, true, true, true);
      std::vector<Tensor> parts;
      for (size_t i = 0; i < grads.size(); ++i)
        parts.push_back(grads[i].defined() ? grads[i].reshape({-1}) : zeros({diff[i].numel()}, diff[i].dtype()));
      r = cat(parts, 0);
      // First derivatives that are constants (sign, floor, ...) have no history: their derivative is exactly 0,
      // which gradcheck can then compare with the finite differences.
      if (!r.requires_grad()) r = r + xv[n].sum() * 0.0;
    }
    return outer ? r : r.detach();
  };
  GradcheckResult res = gradcheck(first_derivatives, extended, opt);
  res.message = "grad" + res.message;
  if (res.worst_input == static_cast<int>(n)) res.message += " (the input is the output gradient v)";
  return res;
}

}  // namespace oxmera
