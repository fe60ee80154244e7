// Anomaly mode: after each backward node runs, the engine (run_task) hands its gradients here while the mode is
// on; the first one holding NaN or infinity is an error naming the node, i.e. the forward op that created it.
#include "autograd/node.hpp"
#include "oxmera/autograd.hpp"

namespace oxmera {
namespace detail {

constinit thread_local bool t_anomaly_enabled = false;

void check_anomaly(const Node& n, const Tensor* grad_in, size_t count) {
  NoGradGuard no_grad;  // the check itself is never part of a graph (create_graph or not)
  for (size_t i = 0; i < count; ++i) {
    const Tensor& g = grad_in[i];
    if (!g.defined() || !is_floating(g.dtype()) || g.numel() == 0) continue;
    if (g.isfinite().all().to(DType::F64).item<double>() != 0.0) continue;
    const Edge& e = n.next[i];
    const std::string to = e.node ? std::string("node '") + e.node->name() + "'"
                                  : detail::concat("a leaf of shape ", e.leaf.defined() ? e.leaf.shape() : Shape{});
    const bool nan = g.isnan().any().to(DType::F64).item<double>() != 0.0;
    OXM_FAIL(InvalidArgument, "detect_anomaly: backward of '", n.name(), "' returned ", nan ? "NaN" : "infinity",
             " in its gradient for input ", i, " (shape ", g.shape(), ", flowing to ", to, "); the forward op '",
             n.name(),
             "' was evaluated where its derivative is not finite (log or sqrt of 0, division by 0, overflow): "
             "check its inputs");
  }
}

}  // namespace detail

void autograd::set_detect_anomaly(bool enabled) noexcept { detail::t_anomaly_enabled = enabled; }
bool autograd::is_anomaly_enabled() noexcept { return detail::t_anomaly_enabled; }

}  // namespace oxmera
