#pragma once
// Recurrent layers with torch's options, parameter names and layout, so torch state dicts load by name:
// RNN (tanh / relu), LSTM (gates i, f, g, o) and GRU (gates r, z, n). Per layer and direction `l{k}` (plus
// "_reverse" for the backward direction): weight_ih_l{k} [G*H, in], weight_hh_l{k} [G*H, H], bias_ih_l{k},
// bias_hh_l{k} [G*H] (G = 4 for LSTM, 3 for GRU, 1 for RNN), every one initialised uniform(-1/sqrt(H),
// 1/sqrt(H)) as torch. Input [T, B, in] ([B, T, in] with batch_first, or unbatched [T, in]); output
// [T, B, D*H] (D = 2 when bidirectional); h_n (and LSTM's c_n) [num_layers*D, B, H]. Missing initial states
// are zeros. The input projection of all time steps is one matrix product per layer and direction.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "oxmera/nn/module.hpp"
#include "oxmera/random.hpp"

namespace oxmera::nn {

// One LSTM step's gate math after the matrix products, as one fused kernel forward and one backward (the
// backend's offering, else the composite): gates [B, 4H] (pre-activations, order i, f, g, o), c_prev [B, H] ->
// (h, c) with c = sigmoid(f) c_prev + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c). Differentiable to any order
// (create_graph differentiates the composite).
std::tuple<Tensor, Tensor> lstm_cell_gates(const Tensor& gates, const Tensor& c_prev);
// The same with the pre-activations as two summands, gates = gates_x + gates_h (the input projection and the
// recurrent product, each [B, 4H]; torch's fused cell takes them so), added inside the kernel: no separate add pass.
std::tuple<Tensor, Tensor> lstm_cell_gates(const Tensor& gates_x, const Tensor& gates_h, const Tensor& c_prev);
// One GRU step's gate math after the two matrix products, one fused kernel forward and one backward: gi = x W_ih^T +
// b_ih and gh = h_prev W_hh^T + b_hh ([B, 3H], torch's order r, z, n), h_prev [B, H] -> h = (1 - z) n + z h_prev with
// r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r gh_n). Differentiable to any order.
Tensor gru_cell_gates(const Tensor& gi, const Tensor& gh, const Tensor& h_prev);
// One plain RNN step after the two matrix products, one fused kernel forward: xt = x W_ih^T + b_ih (+ b_hh) and
// hh = h_prev W_hh^T, both [B, H] -> h = tanh(xt + hh), or relu(xt + hh) with nonlinearity "relu" (torch's
// nn.RNN). Its backward is the activation's from h; differentiable to any order.
Tensor rnn_cell_gates(const Tensor& xt, const Tensor& hh, const std::string& nonlinearity = "tanh");

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0;  // on each layer's output but the last, in training mode only (as torch)
  bool bidirectional = false;
  std::string nonlinearity = "tanh";  // RNN only: "tanh" or "relu"
  DType dtype = DType::F32;           // the parameters' dtype (f64 models: DType::F64)
};

// What RNN, LSTM and GRU share: the parameters and the sequence loop.
class RNNBase : public Module {
 public:
  enum class Mode { RnnTanh, RnnRelu, LSTM, GRU };
  RNNBase(Mode mode, int64_t input_size, int64_t hidden_size, RNNOptions options, Generator& gen);
  std::string extra_repr() const override;
  // All weights of one layer and direction: {w_ih, w_hh, b_ih, b_hh} (biases undefined without bias).
  std::vector<Tensor> layer_weights(int64_t layer, bool reverse) const;

  int64_t input_size, hidden_size;
  RNNOptions options;

 protected:
  // (output, h_n, c_n); c0 and c_n only for LSTM; undefined h0 / c0 are zeros.
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& x, const Tensor& h0, const Tensor& c0);
  Mode mode_;
  std::vector<Tensor> weights_;  // torch's order: per layer, per direction: w_ih, w_hh, [b_ih, b_hh]
};

class RNN : public Cloneable<RNN, RNNBase> {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {}, Generator& gen = default_generator());
  // (output, h_n)
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& h0 = Tensor());
  std::string name() const override { return "RNN"; }
};

class LSTM : public Cloneable<LSTM, RNNBase> {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {}, Generator& gen = default_generator());
  // (output, (h_n, c_n)); state: (h0, c0), both given or both undefined.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& x, const std::tuple<Tensor, Tensor>& state = {});
  std::string name() const override { return "LSTM"; }
};

class GRU : public Cloneable<GRU, RNNBase> {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {}, Generator& gen = default_generator());
  // (output, h_n)
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& h0 = Tensor());
  std::string name() const override { return "GRU"; }
};

}  // namespace oxmera::nn
