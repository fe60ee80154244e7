// torch.autograd.functional on top of autograd::grad: every product here is one or more reverse-mode passes,
// recorded (create_graph) where a later pass has to differentiate them.
#include "oxmera/autograd_functional.hpp"

#include "oxmera/autograd.hpp"
#include "oxmera/error.hpp"

namespace oxmera::autograd::functional {

namespace {

// torch's _grad_preprocess: with create_graph an input that requires grad is used as is (the results stay
// connected to it); otherwise a detached alias that requires grad, so f's graph starts here.
std::vector<Tensor> prepare(const std::vector<Tensor>& inputs, bool create_graph, const char* op) {
  OXM_CHECK(!inputs.empty(), InvalidArgument, op, ": no inputs given; pass the tensors f is a function of");
  std::vector<Tensor> xs;
  xs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    OXM_CHECK(x.defined(), InvalidArgument, op, ": input ", i, " is an undefined tensor");
    OXM_CHECK(is_floating(x.dtype()), UnsupportedDType, op, ": input ", i, " has dtype ", x.dtype(),
              "; only f32 and f64 inputs can be differentiated");
    if (create_graph && x.requires_grad())
      xs.push_back(x);
    else
      xs.push_back(x.detach().requires_grad_(true));
  }
  return xs;
}

Tensor call(const Function& f, const std::vector<Tensor>& xs, const char* op) {
  Tensor out = f(xs);
  OXM_CHECK(out.defined(), InvalidArgument, op, ": f returned an undefined tensor");
  OXM_CHECK(is_floating(out.dtype()), UnsupportedDType, op, ": f returned a tensor of dtype ", out.dtype(),
            "; only f32 and f64 outputs can be differentiated");
  return out;
}

void check_one_element(const Tensor& out, const char* op) {
  OXM_CHECK(out.numel() == 1, ShapeMismatch, op, ": f must return a one-element tensor (a scalar loss); it returned ",
            "shape ", out.shape());
}

void check_like(const Tensor& v, const Tensor& like, const char* op, const char* what, size_t i) {
  OXM_CHECK(v.defined(), InvalidArgument, op, ": v[", i, "] is undefined; pass one tensor per ", what);
  OXM_CHECK(v.shape() == like.shape(), ShapeMismatch, op, ": v[", i, "] has shape ", v.shape(), " but ", what, " ", i,
            " has shape ", like.shape(), "; v must match it");
  OXM_CHECK(v.dtype() == like.dtype(), DTypeMismatch, op, ": v[", i, "] has dtype ", v.dtype(), " but ", what, " ", i,
            " has dtype ", like.dtype());
  OXM_CHECK(v.device() == like.device(), DeviceMismatch, op, ": v[", i, "] is on ", v.device(), " but ", what, " ", i,
            " is on ", like.device());
}

// The vector v of a product with the inputs: one tensor per input, or none when every input has one element.
std::vector<Tensor> input_vectors(const std::vector<Tensor>& v, const std::vector<Tensor>& xs, const char* op) {
  if (v.empty()) {
    for (size_t i = 0; i < xs.size(); ++i)
      OXM_CHECK(xs[i].numel() == 1, InvalidArgument, op, ": v can be omitted only when every input has one element; ",
                "input ", i, " has shape ", xs[i].shape(), ", so pass v (one tensor per input, shaped like it)");
    std::vector<Tensor> ones_v;
    for (const Tensor& x : xs) ones_v.push_back(ones_like(x));
    return ones_v;
  }
  OXM_CHECK(v.size() == xs.size(), InvalidArgument, op, ": ", v.size(), " tensors in v for ", xs.size(),
            " inputs; pass one per input");
  for (size_t i = 0; i < v.size(); ++i) check_like(v[i], xs[i], op, "input", i);
  return v;
}

// Undefined gradients (inputs f does not use) become zeros, as torch's strict = false.
std::vector<Tensor> zeros_for_unused(std::vector<Tensor> g, const std::vector<Tensor>& like) {
  for (size_t i = 0; i < g.size(); ++i)
    if (!g[i].defined()) g[i] = zeros_like(like[i]);
  return g;
}

std::vector<Tensor> all_zeros(const std::vector<Tensor>& like) {
  return zeros_for_unused(std::vector<Tensor>(like.size()), like);
}

// grad of <seeds, outputs> with respect to `inputs`, over the outputs that have a history (the others contribute
// nothing: they do not depend on any input). Undefined entries for unused inputs.
std::vector<Tensor> grad_of_used(const std::vector<Tensor>& outputs, const std::vector<Tensor>& seeds,
                                 const std::vector<Tensor>& inputs, bool retain_graph, bool create_graph) {
  std::vector<Tensor> outs, ss;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined() && outputs[i].requires_grad()) {
      outs.push_back(outputs[i]);
      ss.push_back(seeds[i]);
    }
  if (outs.empty()) return std::vector<Tensor>(inputs.size());
  return grad(outs, inputs, ss, retain_graph, create_graph, /*allow_unused=*/true);
}

Tensor finish_output(const Tensor& out, bool create_graph) { return create_graph ? out : out.detach(); }

// d out / d xs[i], shaped out.shape + xs[i].shape: one backward per element of out, seeded with a one-hot vector.
// The graph is kept (a Hessian differentiates several gradients that share it); it goes with the tensors.
std::vector<Tensor> jacobian_of(const Tensor& out, const std::vector<Tensor>& xs, bool create_graph) {
  const int64_t n = out.numel();
  std::vector<Tensor> result(xs.size());
  if (n == 0 || !out.requires_grad()) {
    for (size_t i = 0; i < xs.size(); ++i) {
      Shape s = out.shape();
      for (int64_t d : xs[i].shape()) s.push_back(d);
      result[i] = zeros(s, xs[i].dtype(), xs[i].device());
    }
    return result;
  }
  std::vector<std::vector<Tensor>> rows(xs.size());
  for (int64_t j = 0; j < n; ++j) {
    Tensor seed = one_hot(from_vector<int64_t>({j}, Shape{1}), n, out.dtype()).reshape(out.shape()).to(out.device());
    std::vector<Tensor> g = grad({out}, xs, {seed}, /*retain_graph=*/true, create_graph, /*allow_unused=*/true);
    for (size_t i = 0; i < xs.size(); ++i) rows[i].push_back(g[i].defined() ? g[i] : zeros_like(xs[i]));
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    Shape s = out.shape();
    for (int64_t d : xs[i].shape()) s.push_back(d);
    result[i] = stack(rows[i], 0).reshape(s);
  }
  return result;
}

Function lift(const UnaryFunction& f) {
  return [f](const std::vector<Tensor>& x) { return f(x[0]); };
}

}  // namespace

std::pair<Tensor, std::vector<Tensor>> vjp(const Function& f, const std::vector<Tensor>& inputs, const Tensor& v,
                                           bool create_graph) {
  const char* op = "autograd::functional::vjp";
  AutoGradMode on(true);
  std::vector<Tensor> xs = prepare(inputs, create_graph, op);
  Tensor out = call(f, xs, op);
  Tensor seed = v;
  if (!seed.defined()) {
    OXM_CHECK(out.numel() == 1, InvalidArgument, op, ": v can be omitted only for a one-element output; f returned ",
              "shape ", out.shape(), ", so pass v shaped like it");
    seed = ones_like(out);
  } else {
    check_like(seed, out, op, "output", 0);
  }
  std::vector<Tensor> g = grad_of_used({out}, {seed}, xs, create_graph, create_graph);
  return {finish_output(out, create_graph), zeros_for_unused(std::move(g), xs)};
}

std::pair<Tensor, Tensor> jvp(const Function& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v,
                              bool create_graph) {
  const char* op = "autograd::functional::jvp";
  AutoGradMode on(true);
  std::vector<Tensor> xs = prepare(inputs, create_graph, op);
  std::vector<Tensor> vs = input_vectors(v, xs, op);
  Tensor out = call(f, xs, op);
  if (!out.requires_grad()) return {finish_output(out, create_graph), zeros_like(out)};
  // Double vjp: g(u) = J^T u is linear in u, so the vjp of g with v is J v. u's value does not matter.
  Tensor u = zeros_like(out).requires_grad_(true);
  std::vector<Tensor> gu = grad({out}, xs, {u}, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
  Tensor jv = grad_of_used(gu, vs, {u}, create_graph, create_graph)[0];
  return {finish_output(out, create_graph), jv.defined() ? jv : zeros_like(out)};
}

namespace {
// hvp's and vhp's start: the prepared inputs, the checked vectors and f's one-element output (under grad mode).
struct ScalarAt {
  std::vector<Tensor> xs, vs;
  Tensor out;
};
ScalarAt scalar_function_at(const Function& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v,
                            bool create_graph, const char* op) {
  ScalarAt r;
  r.xs = prepare(inputs, create_graph, op);
  r.vs = input_vectors(v, r.xs, op);
  r.out = call(f, r.xs, op);
  check_one_element(r.out, op);
  return r;
}
}  // namespace

std::pair<Tensor, std::vector<Tensor>> hvp(const Function& f, const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& v, bool create_graph) {
  AutoGradMode on(true);
  auto [xs, vs, out] = scalar_function_at(f, inputs, v, create_graph, "autograd::functional::hvp");
  if (!out.requires_grad()) return {finish_output(out, create_graph), all_zeros(xs)};
  // As torch: gradient g, then d<u, g>/dx = H^T u (linear in the dummy u), and its vjp with v is H v.
  std::vector<Tensor> g = grad({out}, xs, {}, true, true, true);
  std::vector<Tensor> us;
  for (const Tensor& x : xs) us.push_back(zeros_like(x).requires_grad_(true));
  std::vector<Tensor> htu = grad_of_used(g, us, xs, true, true);
  std::vector<Tensor> hv = grad_of_used(htu, vs, us, create_graph, create_graph);
  return {finish_output(out, create_graph), zeros_for_unused(std::move(hv), xs)};
}

std::pair<Tensor, std::vector<Tensor>> vhp(const Function& f, const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& v, bool create_graph) {
  AutoGradMode on(true);
  auto [xs, vs, out] = scalar_function_at(f, inputs, v, create_graph, "autograd::functional::vhp");
  if (!out.requires_grad()) return {finish_output(out, create_graph), all_zeros(xs)};
  std::vector<Tensor> g = grad({out}, xs, {}, true, true, true);
  std::vector<Tensor> vh = grad_of_used(g, vs, xs, create_graph, create_graph);
  return {finish_output(out, create_graph), zeros_for_unused(std::move(vh), xs)};
}

std::vector<Tensor> jacobian(const Function& f, const std::vector<Tensor>& inputs, bool create_graph) {
  const char* op = "autograd::functional::jacobian";
  AutoGradMode on(true);
  std::vector<Tensor> xs = prepare(inputs, create_graph, op);
  Tensor out = call(f, xs, op);
  return jacobian_of(out, xs, create_graph);
}

std::vector<std::vector<Tensor>> hessian(const Function& f, const std::vector<Tensor>& inputs, bool create_graph) {
  const char* op = "autograd::functional::hessian";
  AutoGradMode on(true);
  std::vector<Tensor> xs = prepare(inputs, create_graph, op);
  Tensor out = call(f, xs, op);
  check_one_element(out, op);
  // The Jacobian of the gradient; the gradient of an input f does not use is zero (its rows are zeros).
  std::vector<Tensor> g = out.requires_grad() ? grad({out}, xs, {}, true, true, true) : std::vector<Tensor>(xs.size());
  std::vector<std::vector<Tensor>> h(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor gi = g[i].defined() ? g[i] : zeros_like(xs[i]);
    h[i] = jacobian_of(gi, xs, create_graph);
  }
  return h;
}

// ---------------------------------------------------------------- one-input forms
std::pair<Tensor, Tensor> vjp(const UnaryFunction& f, const Tensor& input, const Tensor& v, bool create_graph) {
  auto r = vjp(lift(f), std::vector<Tensor>{input}, v, create_graph);
  return {r.first, r.second[0]};
}
std::pair<Tensor, Tensor> jvp(const UnaryFunction& f, const Tensor& input, const Tensor& v, bool create_graph) {
  return jvp(lift(f), std::vector<Tensor>{input}, v.defined() ? std::vector<Tensor>{v} : std::vector<Tensor>{},
             create_graph);
}
std::pair<Tensor, Tensor> hvp(const UnaryFunction& f, const Tensor& input, const Tensor& v, bool create_graph) {
  auto r = hvp(lift(f), std::vector<Tensor>{input}, v.defined() ? std::vector<Tensor>{v} : std::vector<Tensor>{},
               create_graph);
  return {r.first, r.second[0]};
}
std::pair<Tensor, Tensor> vhp(const UnaryFunction& f, const Tensor& input, const Tensor& v, bool create_graph) {
  auto r = vhp(lift(f), std::vector<Tensor>{input}, v.defined() ? std::vector<Tensor>{v} : std::vector<Tensor>{},
               create_graph);
  return {r.first, r.second[0]};
}
Tensor jacobian(const UnaryFunction& f, const Tensor& input, bool create_graph) {
  return jacobian(lift(f), std::vector<Tensor>{input}, create_graph)[0];
}
Tensor hessian(const UnaryFunction& f, const Tensor& input, bool create_graph) {
  return hessian(lift(f), std::vector<Tensor>{input}, create_graph)[0][0];
}

}  // namespace oxmera::autograd::functional
