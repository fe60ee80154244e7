// Second-order autograd in a few lines: MAML (model-agnostic meta-learning) on sine-wave regression tasks, and a
// Hessian-vector product of the trained model's loss.
//
// MAML learns an initialisation theta from which one gradient step on a new task's few "support" points fits that
// task: theta' = theta - alpha grad L_support(theta), and the meta-loss L_query(theta') is differentiated back
// to theta *through* the inner step, which needs the inner gradient's own derivative (create_graph = true).
// Runs in about a second; ctest's `example_second_order` checks that meta-training helps and that the
// Hessian-vector product agrees with finite differences (exit status 1 otherwise).
#include <cmath>
#include <cstdio>
#include <vector>

#include <oxmera/oxmera.hpp>

using namespace oxmera;
namespace fx = oxmera::autograd::functional;

namespace {

// 1-32-32-1 tanh MLP; p = {W1, b1, W2, b2, W3, b3}.
Tensor mlp(const std::vector<Tensor>& p, const Tensor& x) {
  Tensor h = (x.matmul(p[0]) + p[1]).tanh();
  h = (h.matmul(p[2]) + p[3]).tanh();
  return h.matmul(p[4]) + p[5];
}

Tensor mse(const std::vector<Tensor>& p, const Tensor& x, const Tensor& y) { return (mlp(p, x) - y).square().mean(); }

struct Task {
  Tensor xs, ys, xq, yq;  // support and query points, [k, 1]
};

// y = a sin(x + phase), a in [0.5, 2], phase in [0, pi], x in [-5, 5].
Task sample_task(Generator& gen, int64_t k) {
  const double a = 0.5 + 1.5 * gen.next_double(), phase = M_PI * gen.next_double();
  auto points = [&](Tensor& x, Tensor& y) {
    x = rand({k, 1}, gen, DType::F64) * 10.0 - 5.0;
    y = (x + phase).sin() * a;
  };
  Task t;
  points(t.xs, t.ys);
  points(t.xq, t.yq);
  return t;
}

// One inner step from theta; with create_graph the adapted parameters remember how they depend on theta.
std::vector<Tensor> adapt(const std::vector<Tensor>& theta, const Task& t, double alpha, bool create_graph) {
  std::vector<Tensor> g = autograd::grad({mse(theta, t.xs, t.ys)}, theta, {}, false, create_graph);
  std::vector<Tensor> out;
  for (size_t i = 0; i < theta.size(); ++i) out.push_back(theta[i] - alpha * g[i]);
  return out;
}

// Mean query loss after one adaptation step, over `tasks` (no meta-gradient).
double evaluate(const std::vector<Tensor>& theta, const std::vector<Task>& tasks, double alpha) {
  double s = 0;
  for (const Task& t : tasks) s += mse(adapt(theta, t, alpha, false), t.xq, t.yq).item<double>();
  return s / static_cast<double>(tasks.size());
}

}  // namespace

int main(int argc, char** argv) {
  const int meta_steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const int64_t k = 10;       // support / query points per task
  const int meta_batch = 4;   // tasks per meta-step
  const double alpha = 0.05;  // inner learning rate
  Generator gen(2026);
  auto init = [&](int64_t in, int64_t out) {
    return (randn({in, out}, gen, DType::F64) * std::sqrt(1.0 / static_cast<double>(in))).requires_grad_(true);
  };
  std::vector<Tensor> theta = {init(1, 32),  zeros({32}, DType::F64).requires_grad_(true),
                               init(32, 32), zeros({32}, DType::F64).requires_grad_(true),
                               init(32, 1),  zeros({1}, DType::F64).requires_grad_(true)};
  optim::Adam meta_opt(theta, {.lr = 3e-3});
  std::vector<Task> held_out;
  for (int i = 0; i < 32; ++i) held_out.push_back(sample_task(gen, k));

  const double before = evaluate(theta, held_out, alpha);
  std::printf("MAML on sine tasks: held-out query loss after one inner step, before meta-training: %.4f\n", before);
  for (int step = 1; step <= meta_steps; ++step) {
    meta_opt.zero_grad();
    Tensor meta_loss = zeros({}, DType::F64);
    for (int b = 0; b < meta_batch; ++b) {
      Task t = sample_task(gen, k);
      meta_loss = meta_loss + mse(adapt(theta, t, alpha, /*create_graph=*/true), t.xq, t.yq);
    }
    meta_loss = meta_loss / static_cast<double>(meta_batch);
    meta_loss.backward();  // through the inner step: second derivatives of the support loss
    meta_opt.step();
    if (step % 100 == 0) std::printf("  meta-step %4d  meta-loss %.4f\n", step, meta_loss.item<double>());
  }
  const double after = evaluate(theta, held_out, alpha);
  std::printf("after %d meta-steps: %.4f\n", meta_steps, after);

  // Curvature of one task's support loss at the learned initialisation: H v by autograd::functional::hvp
  // (exact, two reverse passes through a recorded gradient) against central differences of the gradient.
  const Task& t = held_out[0];
  auto loss = [&](const std::vector<Tensor>& p) { return mse(p, t.xs, t.ys); };
  std::vector<Tensor> p0, v;
  for (const Tensor& p : theta) {
    p0.push_back(p.detach());
    v.push_back(randn(p.shape(), gen, DType::F64));
  }
  auto [l0, hv] = fx::hvp(loss, p0, v);
  const double e = 1e-5;
  auto grad_at = [&](double s) {
    std::vector<Tensor> p;
    for (size_t i = 0; i < p0.size(); ++i) p.push_back((p0[i] + v[i] * s).requires_grad_(true));
    return autograd::grad({loss(p)}, p);
  };
  std::vector<Tensor> gp = grad_at(e), gm = grad_at(-e);
  double vhv = 0, max_err = 0, max_abs = 0;
  for (size_t i = 0; i < p0.size(); ++i) {
    vhv += (hv[i] * v[i]).sum().item<double>();
    Tensor fd = (gp[i] - gm[i]) / (2 * e);
    max_err = std::max(max_err, (hv[i] - fd).abs().max().item<double>());
    max_abs = std::max(max_abs, hv[i].abs().max().item<double>());
  }
  std::printf(
      "Hessian-vector product of a support loss (%.4f): v^T H v = %.6f, max |H v| = %.4f, "
      "max |H v - finite differences| = %.2e\n",
      l0.item<double>(), vhv, max_abs, max_err);

  const bool ok = after < 0.5 * before && max_err <= 1e-6 * std::max(1.0, max_abs);
  if (!ok) std::printf("FAILED: meta-training should halve the adapted loss and H v match finite differences\n");
  return ok ? 0 : 1;
}
