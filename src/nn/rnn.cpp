// RNN / LSTM / GRU: torch's parameters and sequence semantics over ordinary tensor ops. Per layer and
// direction the input projection of every time step is one matrix product ([T*B, in] x [in, G*H]); each step
// then adds h @ w_hh^T and applies the gate math.
#include "oxmera/nn/rnn.hpp"

#include <cmath>
#include <sstream>

#include "autograd/node.hpp"
#include "ops/fused.hpp"
#include "ops/ops_internal.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/error.hpp"
#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/init.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::nn {

namespace {

int64_t gates_of(RNNBase::Mode m) {
  switch (m) {
    case RNNBase::Mode::LSTM:
      return 4;
    case RNNBase::Mode::GRU:
      return 3;
    default:
      return 1;
  }
}

const char* mode_name(RNNBase::Mode m) {
  switch (m) {
    case RNNBase::Mode::LSTM:
      return "LSTM";
    case RNNBase::Mode::GRU:
      return "GRU";
    default:
      return "RNN";
  }
}

RNNBase::Mode rnn_mode(const RNNOptions& o) {
  OXM_CHECK(o.nonlinearity == "tanh" || o.nonlinearity == "relu", InvalidArgument,
            "RNN: nonlinearity must be \"tanh\" or \"relu\", got \"", o.nonlinearity, "\"");
  return o.nonlinearity == "tanh" ? RNNBase::Mode::RnnTanh : RNNBase::Mode::RnnRelu;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

// One node per step for the fused gate math: inputs (gates, c_prev), outputs (h, c). Saves the inputs (for a
// create_graph backward through the composite) and the kernel's activations and c.
struct LstmCellNode final : detail::Node {
  LstmCellNode() { num_outputs = 2; }
  detail::SavedTensor gates, c_prev, gates2;  // gates2: the second summand of the pre-activations (input 2), if any
  Tensor acts, c;
  int64_t batch = 0, hidden = 0;
  bool release_saved() override {
    const bool had = acts.defined();
    gates.reset();
    c_prev.reset();
    gates2.reset();
    acts = Tensor();
    c = Tensor();
    return had;
  }
  const char* name() const override { return "lstm_cell"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    if (grad_enabled()) {
      const Tensor cv = c_prev.get(name());
      const Tensor gv = gates2.defined() ? gates.get(name()) + gates2.get(name()) : gates.get(name());
      // The backward formulas as recorded ops of the re-attached inputs, so the gradient is differentiable.
      const std::vector<Tensor> g = gv.chunk(4, 1);
      const Tensor i = g[0].sigmoid(), f = g[1].sigmoid(), gg = g[2].tanh(), o = g[3].sigmoid();
      const Tensor tc = (f * cv + i * gg).tanh();
      const Tensor gh = gout[0].defined() ? gout[0] : zeros_like(tc), gc = gout[1].defined() ? gout[1] : zeros_like(tc);
      const Tensor dc = gc + gh * o * (1.0 - tc * tc);
      if (needs_grad(0) || (next.size() > 2 && needs_grad(2))) {
        const Tensor dg = cat(
            {dc * gg * i * (1.0 - i), dc * cv * f * (1.0 - f), dc * i * (1.0 - gg * gg), gh * tc * o * (1.0 - o)}, 1);
        if (needs_grad(0)) gin[0] = dg;
        if (next.size() > 2 && needs_grad(2)) gin[2] = dg;
      }
      if (needs_grad(1)) gin[1] = dc * f;
      return;
    }
    const Tensor cp = c_prev.get(name());
    const Tensor gh = gout[0].defined() ? gout[0].contiguous() : Tensor();
    const Tensor gc = gout[1].defined() ? gout[1].contiguous() : Tensor();
    const DType dt = acts.dtype();
    const Device dev = acts.device();
    Tensor dg = detail::make_empty({batch, 4 * hidden}, dt, dev, "lstm_cell backward");
    Tensor dcp = detail::make_empty({batch, hidden}, dt, dev, "lstm_cell backward");
    ops::FusedCall call = ops::LstmCellBackwardCall{acts.impl(),
                                                    cp.impl(),
                                                    c.impl(),
                                                    gh.defined() ? gh.impl() : nullptr,
                                                    gc.defined() ? gc.impl() : nullptr,
                                                    batch,
                                                    hidden,
                                                    dg.impl(),
                                                    dcp.impl()};
    ops::run_fused(call, dev);
    if (needs_grad(0)) gin[0] = dg;
    if (needs_grad(1)) gin[1] = dcp;
    if (next.size() > 2 && needs_grad(2)) gin[2] = dg;  // the same gradient for both summands
  }
};

detail::Edge edge_or_none(const Tensor& t) { return t.defined() ? detail::edge_of(t) : detail::Edge{}; }

// The plain RNN step's backward: the activation's gradient from the output (as tanh's and relu's own nodes), the
// same for both summands.
struct RnnCellNode final : detail::Node {
  detail::SavedTensor h;
  bool relu = false;
  bool release_saved() override {
    const bool had = h.defined();
    h.reset();
    return had;
  }
  const char* name() const override { return "rnn_cell"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    const Tensor& g = gout[0];
    const Tensor y = h.get(name());
    Tensor d;
    if (grad_enabled())  // recorded ops of the re-attached output, so the gradient is differentiable
      d = relu ? ops::defs::Relu::grad_graph<Tensor>(g, y, y, {}) : ops::defs::Tanh::grad_graph<Tensor>(g, y, y, {});
    else
      d = ops::unary_grad(relu ? ops::UnaryOp::Relu : ops::UnaryOp::Tanh, g, y, y, {});
    if (needs_grad(0)) gin[0] = d;
    if (needs_grad(1)) gin[1] = d;
  }
};

struct GruCellNode final : detail::Node {
  detail::SavedTensor gi, gh, h_prev;
  Tensor acts;
  int64_t batch = 0, hidden = 0;
  bool release_saved() override {
    const bool had = acts.defined();
    gi.reset();
    gh.reset();
    h_prev.reset();
    acts = Tensor();
    return had;
  }
  const char* name() const override { return "gru_cell"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    const Tensor& g = gout[0];
    if (grad_enabled()) {
      // The backward formulas as recorded ops of the re-attached inputs, so the gradient is differentiable.
      const std::vector<Tensor> i = gi.get(name()).chunk(3, 1), h = gh.get(name()).chunk(3, 1);
      const Tensor hp = h_prev.get(name());
      const Tensor r = (i[0] + h[0]).sigmoid(), z = (i[1] + h[1]).sigmoid();
      const Tensor n = (i[2] + r * h[2]).tanh();
      const Tensor dn = g * (1.0 - z) * (1.0 - n * n);
      const Tensor dz = g * (hp - n) * z * (1.0 - z);
      const Tensor dr = dn * h[2] * r * (1.0 - r);
      if (needs_grad(0)) gin[0] = cat({dr, dz, dn}, 1);
      if (needs_grad(1)) gin[1] = cat({dr, dz, dn * r}, 1);
      if (needs_grad(2)) gin[2] = g * z;
      return;
    }
    const Tensor hp = h_prev.get(name()), gc = g.contiguous();
    const DType dt = acts.dtype();
    const Device dev = acts.device();
    Tensor dgi = detail::make_empty({batch, 3 * hidden}, dt, dev, "gru_cell backward");
    Tensor dgh = detail::make_empty({batch, 3 * hidden}, dt, dev, "gru_cell backward");
    Tensor dhp = detail::make_empty({batch, hidden}, dt, dev, "gru_cell backward");
    ops::FusedCall call =
        ops::GruCellBackwardCall{acts.impl(), hp.impl(), gc.impl(), batch, hidden, dgi.impl(), dgh.impl(), dhp.impl()};
    ops::run_fused(call, dev);
    if (needs_grad(0)) gin[0] = dgi;
    if (needs_grad(1)) gin[1] = dgh;
    if (needs_grad(2)) gin[2] = dhp;
  }
};

// The per-step slices of the input projection [T, B, G] as one node with T outputs: its backward stacks the T
// step gradients once (O(T)), where T select nodes would each scatter into a zero-filled [T, B, G] (O(T^2)).
struct SeqUnbindNode final : detail::Node {
  explicit SeqUnbindNode(int64_t steps) { num_outputs = static_cast<uint32_t>(steps); }
  const char* name() const override { return "rnn_sequence_unbind"; }
  bool differentiable_backward() const override { return true; }
  void apply(Tensor* gout, Tensor* gin) override {
    if (!needs_grad(0)) return;
    const Tensor* any = nullptr;
    for (uint32_t t = 0; t < num_outputs && !any; ++t)
      if (gout[t].defined()) any = &gout[t];
    if (!any) return;
    std::vector<Tensor> g(num_outputs);
    for (uint32_t t = 0; t < num_outputs; ++t) g[t] = gout[t].defined() ? gout[t] : zeros_like(*any);
    gin[0] = stack(g, 0);
  }
};

std::vector<Tensor> sequence_unbind(const Tensor& xp) {
  const int64_t T = xp.size(0);
  if (!(grad_enabled() && xp.requires_grad())) return xp.unbind(0);
  const Tensor base = xp.detach();
  std::vector<Tensor> out(static_cast<size_t>(T));
  auto* node = new SeqUnbindNode(T);
  node->next.push_back(detail::edge_of(xp));
  node->refcount.fetch_add(static_cast<int32_t>(T) - 1);  // T outputs hold it
  for (int64_t t = 0; t < T; ++t) {
    out[static_cast<size_t>(t)] = base.select(0, t);  // a view (contiguous rows; nothing writes it): no copy
    detail::set_history(out[static_cast<size_t>(t)], node, static_cast<uint32_t>(t));
  }
  return out;
}

}  // namespace

namespace {

// lstm_cell_gates with the pre-activations given whole (gates2_in null) or as two summands.
std::tuple<Tensor, Tensor> lstm_cell_impl(const Tensor& gates_in, const Tensor* gates2_in, const Tensor& c_prev_in) {
  detail::check_defined(gates_in, "lstm_cell_gates", "gates");
  detail::check_defined(c_prev_in, "lstm_cell_gates", "c_prev");
  OXM_CHECK(gates_in.dim() == 2 && gates_in.size(1) % 4 == 0, ShapeMismatch,
            "lstm_cell_gates: gates must be [B, 4*H], got ", shape_str(gates_in.shape()));
  const int64_t B = gates_in.size(0), H = gates_in.size(1) / 4;
  OXM_CHECK(c_prev_in.shape() == Shape({B, H}), ShapeMismatch, "lstm_cell_gates: c_prev must be [", B, ", ", H,
            "] for gates ", shape_str(gates_in.shape()), ", got ", shape_str(c_prev_in.shape()));
  OXM_CHECK(is_floating(gates_in.dtype()) && c_prev_in.dtype() == gates_in.dtype(), DTypeMismatch,
            "lstm_cell_gates: gates (", gates_in.dtype(), ") and c_prev (", c_prev_in.dtype(),
            ") must share one float dtype");
  OXM_CHECK(c_prev_in.device() == gates_in.device(), DeviceMismatch,
            "lstm_cell_gates: gates and c_prev must be on one device");
  if (gates2_in) {
    detail::check_defined(*gates2_in, "lstm_cell_gates", "gates_h");
    OXM_CHECK(gates2_in->shape() == gates_in.shape(), ShapeMismatch, "lstm_cell_gates: gates_x ",
              shape_str(gates_in.shape()), " and gates_h ", shape_str(gates2_in->shape()), " must have one shape");
    OXM_CHECK(gates2_in->dtype() == gates_in.dtype(), DTypeMismatch, "lstm_cell_gates: gates_x (", gates_in.dtype(),
              ") and gates_h (", gates2_in->dtype(), ") must share one float dtype");
    OXM_CHECK(gates2_in->device() == gates_in.device(), DeviceMismatch,
              "lstm_cell_gates: gates_x and gates_h must be on one device");
  }
  const Tensor gates = gates_in.contiguous(), c_prev = c_prev_in.contiguous();
  const Tensor gates2 = gates2_in ? gates2_in->contiguous() : Tensor();
  const DType dt = gates.dtype();
  const Device dev = gates.device();
  Tensor acts = detail::make_empty({B, 4 * H}, dt, dev, "lstm_cell");
  Tensor h = detail::make_empty({B, H}, dt, dev, "lstm_cell");
  Tensor c = detail::make_empty({B, H}, dt, dev, "lstm_cell");
  if (B * H > 0) {
    ops::FusedCall call = ops::LstmCellCall{
        gates.impl(), c_prev.impl(), B, H, acts.impl(), h.impl(), c.impl(), gates2.defined() ? gates2.impl() : nullptr};
    ops::run_fused(call, dev);
  }
  const bool grad2 = gates2.defined() && gates2.requires_grad();
  if (grad_enabled() && (gates.requires_grad() || c_prev.requires_grad() || grad2)) {
    auto* node = new LstmCellNode();
    node->next.push_back(edge_or_none(gates));
    node->next.push_back(edge_or_none(c_prev));
    if (gates2.defined()) node->next.push_back(edge_or_none(gates2));
    node->gates.save(gates, false);
    node->c_prev.save(c_prev, false);
    if (gates2.defined()) node->gates2.save(gates2, false);
    node->acts = acts;
    node->c = c.detach();
    node->batch = B;
    node->hidden = H;
    node->refcount.fetch_add(1);  // two outputs hold it
    detail::set_history(h, node, 0);
    detail::set_history(c, node, 1);
  }
  return {h, c};
}

}  // namespace

std::tuple<Tensor, Tensor> lstm_cell_gates(const Tensor& gates, const Tensor& c_prev) {
  return lstm_cell_impl(gates, nullptr, c_prev);
}
std::tuple<Tensor, Tensor> lstm_cell_gates(const Tensor& gates_x, const Tensor& gates_h, const Tensor& c_prev) {
  return lstm_cell_impl(gates_x, &gates_h, c_prev);
}

Tensor gru_cell_gates(const Tensor& gi_in, const Tensor& gh_in, const Tensor& h_prev_in) {
  detail::check_defined(gi_in, "gru_cell_gates", "gi");
  detail::check_defined(gh_in, "gru_cell_gates", "gh");
  detail::check_defined(h_prev_in, "gru_cell_gates", "h_prev");
  OXM_CHECK(gi_in.dim() == 2 && gi_in.size(1) % 3 == 0 && gh_in.shape() == gi_in.shape(), ShapeMismatch,
            "gru_cell_gates: gi and gh must both be [B, 3*H], got ", shape_str(gi_in.shape()), " and ",
            shape_str(gh_in.shape()));
  const int64_t B = gi_in.size(0), H = gi_in.size(1) / 3;
  OXM_CHECK(h_prev_in.shape() == Shape({B, H}), ShapeMismatch, "gru_cell_gates: h_prev must be [", B, ", ", H,
            "] for gates ", shape_str(gi_in.shape()), ", got ", shape_str(h_prev_in.shape()));
  OXM_CHECK(is_floating(gi_in.dtype()) && gh_in.dtype() == gi_in.dtype() && h_prev_in.dtype() == gi_in.dtype(),
            DTypeMismatch, "gru_cell_gates: gi (", gi_in.dtype(), "), gh (", gh_in.dtype(), ") and h_prev (",
            h_prev_in.dtype(), ") must share one float dtype");
  OXM_CHECK(gh_in.device() == gi_in.device() && h_prev_in.device() == gi_in.device(), DeviceMismatch,
            "gru_cell_gates: gi, gh and h_prev must be on one device");
  const Tensor gi = gi_in.contiguous(), gh = gh_in.contiguous(), h_prev = h_prev_in.contiguous();
  const DType dt = gi.dtype();
  const Device dev = gi.device();
  Tensor acts = detail::make_empty({B, 4 * H}, dt, dev, "gru_cell");
  Tensor h = detail::make_empty({B, H}, dt, dev, "gru_cell");
  if (B * H > 0) {
    ops::FusedCall call = ops::GruCellCall{gi.impl(), gh.impl(), h_prev.impl(), B, H, acts.impl(), h.impl()};
    ops::run_fused(call, dev);
  }
  if (grad_enabled() && (gi.requires_grad() || gh.requires_grad() || h_prev.requires_grad())) {
    auto* node = new GruCellNode();
    node->next.push_back(edge_or_none(gi));
    node->next.push_back(edge_or_none(gh));
    node->next.push_back(edge_or_none(h_prev));
    node->gi.save(gi, false);
    node->gh.save(gh, false);
    node->h_prev.save(h_prev, false);
    node->acts = acts;
    node->batch = B;
    node->hidden = H;
    detail::set_history(h, node, 0);
  }
  return h;
}

Tensor rnn_cell_gates(const Tensor& xt_in, const Tensor& hh_in, const std::string& nonlinearity) {
  const char* op = "rnn_cell_gates";
  detail::check_defined(xt_in, op, "xt");
  detail::check_defined(hh_in, op, "hh");
  OXM_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", InvalidArgument, op,
            ": nonlinearity must be \"tanh\" or \"relu\", got \"", nonlinearity, "\"");
  OXM_CHECK(xt_in.dim() == 2 && hh_in.shape() == xt_in.shape(), ShapeMismatch, op,
            ": xt and hh must both be [B, H], got ", shape_str(xt_in.shape()), " and ", shape_str(hh_in.shape()));
  OXM_CHECK(is_floating(xt_in.dtype()) && hh_in.dtype() == xt_in.dtype(), DTypeMismatch, op, ": xt (", xt_in.dtype(),
            ") and hh (", hh_in.dtype(), ") must share one float dtype");
  OXM_CHECK(hh_in.device() == xt_in.device(), DeviceMismatch, op, ": xt is on ", xt_in.device(), " but hh on ",
            hh_in.device());
  const bool relu = nonlinearity == "relu";
  const Tensor xt = xt_in.contiguous(), hh = hh_in.contiguous();
  Tensor h = detail::make_empty(xt.shape(), xt.dtype(), xt.device(), op);
  if (xt.numel() > 0) {
    ops::FusedCall call = ops::RnnCellCall{xt.impl(), hh.impl(), xt.numel(), relu, h.impl()};
    ops::run_fused(call, xt.device());
  }
  if (grad_enabled() && (xt.requires_grad() || hh.requires_grad())) {
    auto* node = new RnnCellNode();
    node->next.push_back(edge_or_none(xt));
    node->next.push_back(edge_or_none(hh));
    node->relu = relu;
    node->h.save(h, true);
    detail::set_history(h, node, 0);
  }
  return h;
}

RNNBase::RNNBase(Mode mode, int64_t input_size_, int64_t hidden_size_, RNNOptions opts, Generator& gen)
    : input_size(input_size_), hidden_size(hidden_size_), options(std::move(opts)), mode_(mode) {
  const char* nm = mode_name(mode);
  OXM_CHECK(input_size > 0 && hidden_size > 0, InvalidArgument, nm, ": input_size (", input_size, ") and hidden_size (",
            hidden_size, ") must be positive");
  OXM_CHECK(options.num_layers >= 1, InvalidArgument, nm, ": num_layers must be >= 1, got ", options.num_layers);
  OXM_CHECK(options.dropout >= 0 && options.dropout <= 1, InvalidArgument, nm, ": dropout must be in [0, 1], got ",
            options.dropout);
  OXM_CHECK(options.dtype == DType::F32 || options.dtype == DType::F64, DTypeMismatch, nm,
            ": parameters must be f32 or f64, got ", options.dtype);
  const int64_t G = gates_of(mode) * hidden_size, D = options.bidirectional ? 2 : 1;
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (int64_t l = 0; l < options.num_layers; ++l) {
    const int64_t in = l == 0 ? input_size : hidden_size * D;
    for (int64_t d = 0; d < D; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      std::vector<std::pair<std::string, Shape>> ps = {{"weight_ih" + sfx, {G, in}},
                                                       {"weight_hh" + sfx, {G, hidden_size}}};
      if (options.bias) {
        ps.push_back({"bias_ih" + sfx, {G}});
        ps.push_back({"bias_hh" + sfx, {G}});
      }
      for (auto& [name, shape] : ps) {
        Tensor t = zeros(shape, options.dtype);
        init::uniform_(t, -k, k, gen);
        weights_.push_back(register_parameter(name, t));
      }
    }
  }
}

std::vector<Tensor> RNNBase::layer_weights(int64_t layer, bool reverse) const {
  const int64_t per = options.bias ? 4 : 2, D = options.bidirectional ? 2 : 1;
  const size_t at = static_cast<size_t>((layer * D + (reverse ? 1 : 0)) * per);
  std::vector<Tensor> w(weights_.begin() + static_cast<std::ptrdiff_t>(at),
                        weights_.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(per)));
  w.resize(4);
  return w;
}

std::string RNNBase::extra_repr() const {
  std::ostringstream os;
  os << input_size << ", " << hidden_size;
  if (options.num_layers != 1) os << ", num_layers=" << options.num_layers;
  if (mode_ == Mode::RnnRelu) os << ", nonlinearity=relu";
  if (!options.bias) os << ", bias=false";
  if (options.batch_first) os << ", batch_first=true";
  if (options.dropout != 0) os << ", dropout=" << options.dropout;
  if (options.bidirectional) os << ", bidirectional=true";
  return os.str();
}

std::tuple<Tensor, Tensor, Tensor> RNNBase::run(const Tensor& x_in, const Tensor& h0_in, const Tensor& c0_in) {
  const char* nm = mode_name(mode_);
  ::oxmera::detail::check_defined(x_in, nm);
  OXM_CHECK(x_in.dtype() == options.dtype, DTypeMismatch, nm, ": input has dtype ", x_in.dtype(),
            " but the layer's parameters are ", options.dtype, "; cast the input with .to(", options.dtype,
            ") or build the layer with RNNOptions{.dtype = ...}");
  OXM_CHECK(
      x_in.dim() == 2 || x_in.dim() == 3, ShapeMismatch, nm,
      ": input must be [T, B, input_size] ([B, T, input_size] with batch_first) or unbatched [T, input_size], got ",
      shape_str(x_in.shape()));
  OXM_CHECK(x_in.size(-1) == input_size, ShapeMismatch, nm, ": input ", shape_str(x_in.shape()), " has last dim ",
            x_in.size(-1), " but input_size is ", input_size);
  const bool unbatched = x_in.dim() == 2;
  Tensor x = unbatched ? x_in.unsqueeze(1) : (options.batch_first ? x_in.transpose(0, 1) : x_in);
  const int64_t T = x.size(0), B = x.size(1), H = hidden_size, D = options.bidirectional ? 2 : 1;
  const int64_t L = options.num_layers;
  const Shape state_shape = unbatched ? Shape{L * D, H} : Shape{L * D, B, H};
  auto prep_state = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return zeros({L * D, B, H}, options.dtype, x.device());  // on the input's device
    OXM_CHECK(s.dtype() == options.dtype, DTypeMismatch, nm, ": ", what, " has dtype ", s.dtype(),
              " but the parameters are ", options.dtype);
    OXM_CHECK(s.shape() == state_shape, ShapeMismatch, nm, ": ", what, " must be ", shape_str(state_shape),
              " (num_layers * directions, batch, hidden_size), got ", shape_str(s.shape()));
    return unbatched ? s.unsqueeze(1) : s;
  };
  const bool lstm = mode_ == Mode::LSTM;
  OXM_CHECK(lstm || !c0_in.defined(), InvalidArgument, nm, ": only LSTM takes a cell state");
  const Tensor h0 = prep_state(h0_in, "h0");
  const Tensor c0 = lstm ? prep_state(c0_in, "c0") : Tensor();
  OXM_CHECK(T >= 1, ShapeMismatch, nm, ": the sequence is empty (input ", shape_str(x_in.shape()), ")");

  std::vector<Tensor> hn, cn;
  Tensor layer_in = x;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Tensor> dir_out;
    for (int64_t d = 0; d < D; ++d) {
      const std::vector<Tensor> w = layer_weights(l, d == 1);
      const Tensor& w_ih = w[0];
      const Tensor w_hhT = w[1].transpose(0, 1);
      // One GEMM for the input projection of every step, written over the bias rows (b_ih + b_hh summed once:
      // a [gates] add instead of two passes over [T * B, gates]).
      Tensor bias = w[2];
      if (w[3].defined() && mode_ != Mode::GRU)  // GRU keeps b_hn inside r * (...)
        bias = bias.defined() ? bias + w[3] : w[3];
      Tensor xp = functional::linear(layer_in.reshape({T * B, layer_in.size(2)}), w_ih, bias);
      xp = xp.reshape({T, B, xp.size(1)});
      Tensor h = h0.select(0, l * D + d);
      Tensor c = lstm ? c0.select(0, l * D + d) : Tensor();
      std::vector<Tensor> outs(static_cast<size_t>(T));
      const std::vector<Tensor> xsteps = sequence_unbind(xp);
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = d == 0 ? s : T - 1 - s;
        const Tensor& xt = xsteps[static_cast<size_t>(t)];
        // GRU's b_hh stays inside r * (...): its recurrent product is the fused linear over it.
        Tensor hh = mode_ == Mode::GRU ? functional::linear(h, w[1], w[3]) : h.matmul(w_hhT);
        switch (mode_) {
          case Mode::RnnTanh:
            h = rnn_cell_gates(xt, hh, "tanh");
            break;
          case Mode::RnnRelu:
            h = rnn_cell_gates(xt, hh, "relu");
            break;
          case Mode::LSTM: {
            std::tie(h, c) = lstm_cell_gates(xt, hh, c);  // the sum formed in the cell's kernel
            break;
          }
          case Mode::GRU: {
            h = gru_cell_gates(xt, hh, h);
            break;
          }
        }
        outs[static_cast<size_t>(t)] = h;
      }
      dir_out.push_back(stack(outs, 0));
      hn.push_back(h);
      if (lstm) cn.push_back(c);
    }
    layer_in = D == 1 ? dir_out[0] : cat(dir_out, 2);
    if (l + 1 < L && options.dropout > 0 && is_training())
      layer_in = functional::dropout(layer_in, options.dropout, true, default_generator());
  }
  Tensor out = layer_in, h_n = stack(hn, 0), c_n = lstm ? stack(cn, 0) : Tensor();
  if (unbatched) {
    out = out.squeeze(1);
    h_n = h_n.squeeze(1);
    if (lstm) c_n = c_n.squeeze(1);
  } else if (options.batch_first) {
    out = out.transpose(0, 1);
  }
  return {out, h_n, c_n};
}

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions options, Generator& gen)
    : Cloneable(rnn_mode(options), input_size, hidden_size, options, gen) {}
std::tuple<Tensor, Tensor> RNN::forward(const Tensor& x, const Tensor& h0) {
  auto [out, h, c] = run(x, h0, Tensor());
  return {out, h};
}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options, Generator& gen)
    : Cloneable(Mode::LSTM, input_size, hidden_size, options, gen) {}
std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(const Tensor& x, const std::tuple<Tensor, Tensor>& state) {
  const auto& [h0, c0] = state;
  OXM_CHECK(h0.defined() == c0.defined(), InvalidArgument,
            "LSTM: the initial state (h0, c0) must give both tensors or neither");
  auto [out, h, c] = run(x, h0, c0);
  return {out, {h, c}};
}

GRU::GRU(int64_t input_size, int64_t hidden_size, RNNOptions options, Generator& gen)
    : Cloneable(Mode::GRU, input_size, hidden_size, options, gen) {}
std::tuple<Tensor, Tensor> GRU::forward(const Tensor& x, const Tensor& h0) {
  auto [out, h, c] = run(x, h0, Tensor());
  return {out, h};
}

}  // namespace oxmera::nn
