#pragma once
// Loss functions matching torch.nn.functional (1.13): mse_loss, cross_entropy, nll_loss,
// binary_cross_entropy_with_logits, and their module forms. Every loss is composed of differentiable tensor
// ops (log_softmax, gather, where, ...), so backward needs no rule of its own; f32 and f64 are supported.
//
// Deliberate differences from torch (oxmera's "typed errors, never silent wrong answers"):
//  - Reduction::Mean over nothing is an EmptyReduction error where torch returns NaN: an empty batch, a batch
//    whose targets all equal ignore_index, or (weighted cross_entropy / nll_loss) a zero total target weight.
//    Reduction::Sum over nothing is 0 and Reduction::None an empty tensor, as in torch. No loss here returns
//    a NaN unless an input holds NaN/inf (or a weighted target picks a -inf log-probability: 0 * inf).
//  - mse_loss with input and target of different shapes is a ShapeMismatch (torch warns and broadcasts).
//  - Class targets are checked on the host: a value outside [0, C) other than ignore_index is
//    IndexOutOfBounds naming the value and its position. Exception: cross_entropy (no class weights, [N, C] or
//    [C] logits) with the targets on the logits' GPU checks them there, without a wait, and raises these errors
//    (IndexOutOfBounds naming the position; EmptyReduction for a mean over no target) at the device's next
//    read-back to the host; the loss meanwhile uses the nearest class (or is NaN).
// Errors name the loss ("cross_entropy: ..."), the shapes and the dtypes: a non-float input is
// UnsupportedDType, mixed float dtypes (input/target/weight) DTypeMismatch, a class target that is not i64
// DTypeMismatch, wrong shapes ShapeMismatch, an undefined input or label_smoothing outside [0, 1]
// InvalidArgument.
#include <cstdint>
#include <utility>

#include "oxmera/tensor.hpp"

namespace oxmera::nn {

enum class Reduction { Mean, Sum, None };

// (input - target)^2, reduced. input and target: same shape, same float dtype.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// Negative log-likelihood of class targets.
//   log_probs: [N, C] or [N, C, d1, ...] (or [C] with a 0-d target), f32/f64.
//   target:    i64 [N] or [N, d1, ...]: class indices in [0, C), or ignore_index.
//   weight:    optional [C] of log_probs' dtype: loss_i = -weight[t_i] * log_probs[i, t_i].
// Mean divides by the sum of weight[t_i] over the targets that are not ignored (their count without weight).
// Ignored targets contribute 0 (also under Reduction::None) and no gradient.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = {},
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);

struct CrossEntropyOptions {
  Tensor weight;                 // optional [C] class weights, of the logits' dtype
  double label_smoothing = 0.0;  // in [0, 1]
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;  // class targets only
};

// Cross entropy of logits [N, C] / [N, C, d1, ...] / [C] (class dim 1, or 0 for rank 1) against
//  - class targets: i64 of the logits' shape without the class dim. With label smoothing eps the loss is
//    torch's (1 - eps) * nll_loss(log_softmax(x), t, weight) + (eps / C) * smooth, where
//    smooth_i = -sum_c weight[c] * log_softmax(x)_ic (0 for ignored targets), reduced by sum, by the same
//    denominator as nll_loss under Mean (the total target weight, or the count of non-ignored targets);
//  - probability targets: a float tensor of the logits' shape and dtype: loss_i = -sum_c weight[c] *
//    p'_ic * log_softmax(x)_ic with p' = p * (1 - eps) + eps / C; Mean divides by the number of rows
//    (numel / C), not by the weights. ignore_index must then be negative (as in torch); the target is
//    differentiable.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});

// Numerically stable binary cross entropy on logits (no overflow for any finite x):
//   loss = (1 - t) * x + (1 + (pos_weight - 1) * t) * (log(exp(-m) + exp(-x - m)) + m),  m = max(-x, 0),
// times weight. target: input's shape and dtype. weight and pos_weight: optional, of the input's dtype,
// broadcastable to the input's shape (pos_weight typically [C] for input [N, C]).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);

// ---- module forms (plain classes holding their options)

class MSELoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }
  Reduction reduction;
};

class CrossEntropyLoss {
 public:
  CrossEntropyLoss() = default;
  explicit CrossEntropyLoss(CrossEntropyOptions options) : options(std::move(options)) {}
  Tensor forward(const Tensor& input, const Tensor& target) const { return cross_entropy(input, target, options); }
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }
  CrossEntropyOptions options;
};

class NLLLoss {
 public:
  explicit NLLLoss(Tensor weight = {}, Reduction reduction = Reduction::Mean, int64_t ignore_index = -100)
      : weight(std::move(weight)), reduction(reduction), ignore_index(ignore_index) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return nll_loss(input, target, weight, reduction, ignore_index);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }
  Tensor weight;
  Reduction reduction;
  int64_t ignore_index;
};

class BCEWithLogitsLoss {
 public:
  explicit BCEWithLogitsLoss(Tensor weight = {}, Reduction reduction = Reduction::Mean, Tensor pos_weight = {})
      : weight(std::move(weight)), reduction(reduction), pos_weight(std::move(pos_weight)) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy_with_logits(input, target, weight, pos_weight, reduction);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }
  Tensor weight;
  Reduction reduction;
  Tensor pos_weight;
};

}  // namespace oxmera::nn
