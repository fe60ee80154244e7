#pragma once
// What the normalisation layers with stacked replicas share: the parameters' broadcast view, BatchNorm1d and
// BatchNorm2d's registered state, and their stacked forward (BatchNormOptions::replicas: x [R, N, C, *] through R
// independent batch norms). Internal (src/nn only).
#include <cstdint>

#include "oxmera/error.hpp"
#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/layers.hpp"
#include "oxmera/tensor.hpp"

namespace oxmera::nn::functional {

// Stacked parameters [R, *trailing] as a view that broadcasts over an input of `dims` dims, [R, 1, ..., 1, *trailing]:
// replica r's scale / shift for replica r's rows (the replicated LayerNorm, GroupNorm, RMSNorm).
inline Tensor replica_view(const Tensor& p, int64_t dims) {
  Shape s(static_cast<size_t>(dims), 1);
  s[0] = p.shape()[0];
  for (int64_t i = 1; i < p.dim(); ++i) s[static_cast<size_t>(dims - i)] = p.shape()[static_cast<size_t>(p.dim() - i)];
  return p.view(s);
}

// The state BatchNorm1d and BatchNorm2d register, with torch's names and initial values: [C], or [R, C] with replicas.
template <class M>
void register_batch_norm_state(M& m, const char* layer, int64_t c, const BatchNormOptions& opt) {
  OXM_CHECK(opt.replicas >= 0, InvalidArgument, layer, ": replicas must be >= 0 (0: not stacked), got ", opt.replicas);
  const Shape s = opt.replicas > 0 ? Shape{opt.replicas, c} : Shape{c};
  const bool track = opt.track_running_stats;
  m.register_parameter("weight", &M::weight, opt.affine ? ones(s) : Tensor());
  m.register_parameter("bias", &M::bias, opt.affine ? zeros(s) : Tensor());
  m.register_buffer("running_mean", &M::running_mean, track ? zeros(s) : Tensor());
  m.register_buffer("running_var", &M::running_var, track ? ones(s) : Tensor());
  m.register_buffer("num_batches_tracked", &M::num_batches_tracked, track ? zeros({}, DType::I64) : Tensor());
}

// x [R, N, C, *] (* = 0 to 2 trailing dims) as [N, R * C, *] (one copy), through one batch_norm whose per-channel
// weight, bias and running statistics are the [R, C] tensors' contiguous views (so the running statistics are
// updated in place, replica by replica), and back as an [R, N, C, *] view: each replica's statistics come from its
// own batch only.
inline Tensor stacked_batch_norm(const Tensor& x, int64_t R, const Tensor& running_mean, const Tensor& running_var,
                                 const Tensor& weight, const Tensor& bias, bool use_batch, double momentum,
                                 double eps) {
  const int64_t N = x.size(1), C = x.size(2);
  Shape merged{N, R * C}, back{N, R, C};
  for (int64_t d = 3; d < x.dim(); ++d) {
    merged.push_back(x.size(d));
    back.push_back(x.size(d));
  }
  auto flat = [&](const Tensor& t) { return t.defined() ? t.view({R * C}) : Tensor(); };
  Tensor xs = x.transpose(0, 1).reshape(merged);
  const bool three = xs.dim() == 3;  // [N, C, L] as [N, C, L, 1]: batch_norm's 4-d form reduces over N and L
  Tensor y = batch_norm(three ? xs.unsqueeze(3) : xs, flat(running_mean), flat(running_var), flat(weight), flat(bias),
                        use_batch, momentum, eps);
  if (three) y = y.squeeze(3);
  return y.reshape(back).transpose(0, 1);
}

}  // namespace oxmera::nn::functional
