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

}  // namespace oxmera
