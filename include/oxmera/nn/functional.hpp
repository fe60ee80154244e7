#pragma once
// Functional forms of the nn layers. They work for f32 and f64 (so they can be gradchecked in f64);
// the Module classes hold f32 parameters and call these.
#include <array>
#include <tuple>

#include "oxmera/random.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::nn::functional {

// An (h, w) pair, as torch's int-or-tuple arguments: an integer means {n, n}, so Conv2dOptions{.padding = 1}
// is {1, 1} (with a plain std::array it was {1, 0}); {h, w} gives both. Still a std::array underneath.
struct Pair : std::array<int64_t, 2> {
  constexpr Pair() noexcept : std::array<int64_t, 2>{{0, 0}} {}
  constexpr Pair(int64_t n) noexcept : std::array<int64_t, 2>{{n, n}} {}  // NOLINT: implicit on purpose
  constexpr Pair(int64_t h, int64_t w) noexcept : std::array<int64_t, 2>{{h, w}} {}
  constexpr Pair(const std::array<int64_t, 2>& a) noexcept : std::array<int64_t, 2>(a) {}  // NOLINT
};

// Sliding 2-d blocks of x [N, C, H, W] as columns: [N, C*kh*kw, L] (torch.nn.functional.unfold).
Tensor unfold(const Tensor& x, Pair kernel, Pair dilation = {1, 1}, Pair padding = {0, 0}, Pair stride = {1, 1});
// x [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Pair stride = {1, 1},
              Pair padding = {0, 0}, Pair dilation = {1, 1}, int64_t groups = 1);
// stride {0, 0} means stride = kernel (torch's default). Padding is implicit -inf (max) or 0 (avg).
Tensor max_pool2d(const Tensor& x, Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0}, Pair dilation = {1, 1});
// As torch's max_pool2d(..., return_indices=True): the output and, per output, the flat position h * W + w of its
// max in the input plane (I64, [N, C, oh, ow]). Ties take the first in window order (row-major), a NaN in the
// window is the max (the last NaN's position); a window entirely in the padding (possible with dilation) gives
// -inf and index -1. The indices are not differentiable.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Pair kernel, Pair stride = {0, 0},
                                                   Pair padding = {0, 0}, Pair dilation = {1, 1});
Tensor avg_pool2d(const Tensor& x, Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0},
                  bool count_include_pad = true);
// y = x W^T + b with weight [out, in] (torch layout). Stacked replicas (nn::Linear's {.replicas = R}): weight
// [R, out, in], bias [R, out] and x [R, ..., in] -> [R, ..., out], replica r of x through replica r's weights (what
// torch.vmap(F.linear) over stacked weights computes); x may be a broadcast view (x.unsqueeze(0).expand(...)).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// Normalises over the trailing dims `normalized_shape` (biased variance).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// x [N, C] or [N, C, H, W]. In training, normalises with the batch statistics (biased variance) and, when
// running stats are given, updates them in place: r = (1 - momentum) r + momentum * batch (unbiased variance
// for running_var), as torch does. In eval, normalises with the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
// Inverted dropout: zeroes each element with probability p, scales the rest by 1/(1-p); identity when
// not training. The mask is drawn from `gen`.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
// Rows of weight [V, D] for I64 indices of any shape: [..., D].
Tensor embedding(const Tensor& indices, const Tensor& weight);
// As above; the row padding_idx (in [0, V)) gets no gradient (torch's padding_idx; the output is unchanged).
Tensor embedding(const Tensor& indices, const Tensor& weight, int64_t padding_idx);

// Activations as torch.nn.functional names them (the Tensor methods of the op registry, f32 and f64).
// approximate: "none" (exact, the default) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor mish(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);

}  // namespace oxmera::nn::functional
