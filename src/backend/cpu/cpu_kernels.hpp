#pragma once
// The CPU kernel set. cpu_kernels.cpp is compiled once per instruction-set level (baseline x86-64, AVX2+FMA,
// AVX-512) into separate namespaces; the CPU backend picks the best table this CPU supports at start-up.
#include "ops/op_defs.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::ops {
struct LstmCellCall;
struct LstmCellBackwardCall;
struct GruCellCall;
struct GruCellBackwardCall;
struct RnnCellCall;
struct AttentionCall;
struct AttentionBackwardCall;
struct MaxPool2dCall;
struct MaxPool2dBackwardCall;
struct TensorListNormCall;
struct TensorListScaleCall;
}  // namespace oxmera::ops

namespace oxmera::detail {

struct OptimizerStep;

struct CpuKernels {
  const char* isa;
  void (*unary)(ops::UnaryOp, const TensorImpl&, TensorImpl&, const ops::OpParams&);
  void (*binary)(ops::BinaryOp, const TensorImpl&, const TensorImpl&, TensorImpl&);
  void (*binary_scalar)(ops::BinaryOp, const TensorImpl&, double, bool, TensorImpl&);
  void (*binary_grad)(ops::BinaryOp, int, const TensorImpl&, const TensorImpl&, const TensorImpl&, TensorImpl&);
  void (*unary_grad)(ops::UnaryOp, const TensorImpl&, const TensorImpl&, const TensorImpl&, TensorImpl&,
                     const ops::OpParams&);
  void (*where)(const TensorImpl&, const TensorImpl&, const TensorImpl&, TensorImpl&);
  void (*copy)(const TensorImpl&, TensorImpl&);
  void (*fill)(TensorImpl&, double);
  void (*reduce)(ops::ReduceOp, const TensorImpl&, TensorImpl&, uint64_t);
  bool (*arg_reduce)(ops::ArgReduceOp, const TensorImpl&, TensorImpl&, int64_t);
  void (*softmax)(const TensorImpl&, TensorImpl&, int64_t, bool);
  // softmax / log_softmax's gradient over contiguous rows of length n: y, g, grad_x contiguous, one shape
  void (*softmax_backward)(const TensorImpl& y, const TensorImpl& g, TensorImpl& grad_x, int64_t n, bool log);
  void (*matmul)(const TensorImpl&, const TensorImpl&, TensorImpl&);
  // layer_norm over contiguous rows of n (weight / bias may be null) and its gradient (ops/fused.hpp's contracts)
  void (*layer_norm)(const TensorImpl& x, const TensorImpl* weight, const TensorImpl* bias, double eps, int64_t n,
                     TensorImpl& y, TensorImpl& mean, TensorImpl& rstd);
  void (*layer_norm_backward)(const TensorImpl& x, const TensorImpl& g, const TensorImpl* weight,
                              const TensorImpl& mean, const TensorImpl& rstd, int64_t n, TensorImpl& grad_x,
                              TensorImpl* grad_weight, TensorImpl* grad_bias);
  void (*optimizer_step)(const OptimizerStep&, TensorImpl&, const TensorImpl&, TensorImpl*, TensorImpl*,
                         TensorImpl*);  // cpu_optim.cpp
  // cpu_loss.cpp: the fused cross entropy over rows of class scores and its backward
  void (*cross_entropy)(const TensorImpl& x, const TensorImpl& target, double label_smoothing, double scale,
                        TensorImpl& loss, TensorImpl& lse);
  void (*cross_entropy_backward)(const TensorImpl& x, const TensorImpl& target, const TensorImpl& lse,
                                 const TensorImpl& g, double label_smoothing, double scale, TensorImpl& grad_x);
  // rnn_kernels.cpp: one LSTM / GRU step's gate math and its backward (ops/fused.hpp's LstmCellCall and GruCellCall
  // contracts)
  void (*lstm_cell)(const ops::LstmCellCall&);
  void (*lstm_cell_backward)(const ops::LstmCellBackwardCall&);
  void (*gru_cell)(const ops::GruCellCall&);
  void (*gru_cell_backward)(const ops::GruCellBackwardCall&);
  // pool_kernels.cpp: max pooling with its indices, and the backward's scatter (ops/fused.hpp's MaxPool2dCall)
  void (*max_pool2d)(const ops::MaxPool2dCall&);
  void (*max_pool2d_backward)(const ops::MaxPool2dBackwardCall&);
  // rnn_kernels.cpp: a plain RNN step, h = tanh or relu of xt + hh (RnnCellCall)
  void (*rnn_cell)(const ops::RnnCellCall&);
  // attention_kernels.cpp: the fused scaled dot-product attention and its backward (AttentionCall,
  // AttentionBackwardCall: 4-d views with a unit last stride, f32 / f64)
  void (*attention)(const ops::AttentionCall&);
  void (*attention_backward)(const ops::AttentionBackwardCall&);
  // norm_kernels.cpp: clip_grad_norm_'s per-tensor sums of |x|^p (or max |x|) over a list of contiguous f32 / f64
  // tensors into an f32 or f64 out, and the list scaled in place (TensorListNormCall, TensorListScaleCall)
  void (*tensor_list_norm)(const ops::TensorListNormCall&);
  void (*tensor_list_scale)(const ops::TensorListScaleCall&);
  // LinearCall's GELU epilogue: u_then_grad (contiguous f32 / f64) holds u on entry and gelu'(u) on return; y (the
  // same shape, contiguous) gets gelu(u)
  void (*gelu_with_grad)(TensorImpl& u_then_grad, TensorImpl& y);
};

namespace isa_base {
const CpuKernels* kernels();
}
namespace isa_avx2 {
const CpuKernels* kernels();
}
namespace isa_avx512 {
const CpuKernels* kernels();
}

// Whether concurrent GEMM calls from several of our threads are safe with the loaded BLAS.
bool blas_reentrant();

}  // namespace oxmera::detail
