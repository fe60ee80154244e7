#pragma once
// Functional higher-order autograd, as torch.autograd.functional (torch 1.13): vector-Jacobian and
// Jacobian-vector products, Hessian-vector products, full Jacobians and Hessians of a function of tensors.
//
// Conventions shared by every function here (torch's):
// - The inputs are taken as values: with create_graph = false they are detached and the results have no history.
//   With create_graph = true an input that requires grad is used as is, so the results can be differentiated
//   again with respect to it (and to whatever it was computed from); one that does not is detached.
// - The returned function output is detached unless create_graph.
// - An input the output does not depend on contributes zeros (torch's strict = false; `strict` is not offered).
// - f returns one tensor (torch also accepts a tuple of outputs).
// - Every product is computed by reverse mode: jvp by the double-vjp trick (the vjp u -> J^T u is linear in a
//   dummy u, so J v is its vjp with v), hvp likewise from the gradient (three backward passes, as torch); vhp
//   needs two and gives the same values for a twice continuously differentiable f (its Hessian is symmetric).
#include <functional>
#include <utility>
#include <vector>

#include "oxmera/tensor.hpp"

namespace oxmera::autograd::functional {

using Function = std::function<Tensor(const std::vector<Tensor>&)>;
using UnaryFunction = std::function<Tensor(const Tensor&)>;

// (f(inputs), v^T J): one gradient per input, shaped like it. v has f's output shape; it may be undefined when the
// output has one element (then 1).
std::pair<Tensor, std::vector<Tensor>> vjp(const Function& f, const std::vector<Tensor>& inputs,
                                           const Tensor& v = Tensor(), bool create_graph = false);
std::pair<Tensor, Tensor> vjp(const UnaryFunction& f, const Tensor& input, const Tensor& v = Tensor(),
                              bool create_graph = false);

// (f(inputs), J v) with J v shaped like the output. v holds one tensor per input, shaped like it; it may be empty
// when every input has one element (then all ones).
std::pair<Tensor, Tensor> jvp(const Function& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v = {},
                              bool create_graph = false);
std::pair<Tensor, Tensor> jvp(const UnaryFunction& f, const Tensor& input, const Tensor& v = Tensor(),
                              bool create_graph = false);

// For f with a one-element output: (f(inputs), H v) and (f(inputs), v^T H), one tensor per input. v as for jvp.
std::pair<Tensor, std::vector<Tensor>> hvp(const Function& f, const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& v = {}, bool create_graph = false);
std::pair<Tensor, Tensor> hvp(const UnaryFunction& f, const Tensor& input, const Tensor& v = Tensor(),
                              bool create_graph = false);
std::pair<Tensor, std::vector<Tensor>> vhp(const Function& f, const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& v = {}, bool create_graph = false);
std::pair<Tensor, Tensor> vhp(const UnaryFunction& f, const Tensor& input, const Tensor& v = Tensor(),
                              bool create_graph = false);

// The Jacobian of f with respect to each input, shaped output.shape + input.shape; built row by row, one backward
// per output element.
std::vector<Tensor> jacobian(const Function& f, const std::vector<Tensor>& inputs, bool create_graph = false);
Tensor jacobian(const UnaryFunction& f, const Tensor& input, bool create_graph = false);

// The Hessian of f (one-element output): H[i][j] = d^2 f / d inputs[i] d inputs[j], shaped
// inputs[i].shape + inputs[j].shape; the Jacobian of the gradient.
std::vector<std::vector<Tensor>> hessian(const Function& f, const std::vector<Tensor>& inputs,
                                         bool create_graph = false);
Tensor hessian(const UnaryFunction& f, const Tensor& input, bool create_graph = false);

}  // namespace oxmera::autograd::functional
