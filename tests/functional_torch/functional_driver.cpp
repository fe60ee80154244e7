// Driver of test_functional_parity.py: reads named f64 tensors from stdin, computes autograd::functional products
// and second / third derivatives of a small tanh MLP (its loss, a WGAN-GP critic loss, a MAML meta-gradient) and
// prints every result for the script to compare with torch.
//
// Input, one tensor per line: <name> <rank> <dims...> <values...>. Names: W1 b1 W2 b2 W3 b3 (the MLP, in -> out
// layout: x W + b, tanh between layers), X Y (mse data), labels (class ids as numbers), v.<param> (a direction per
// parameter), vout (a direction in the logits' shape), w.<param> (the third-order direction), critic C1 c1 C2 c2
// (a 1-output critic), real fake eps (interpolation weights, [batch, 1]), Xs Ys Xq Yq (MAML support and query).
// Output, one result per line: <name> <rank> <dims...> <n> <values...>, or `ERROR <what>` and exit 1.
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../parity_common/driver.hpp"
#include "oxmera/oxmera.hpp"

using namespace oxmera;
namespace fx = oxmera::autograd::functional;

namespace {

std::map<std::string, Tensor> g_in;

const Tensor& in(const std::string& name) {
  auto it = g_in.find(name);
  if (it == g_in.end()) throw std::runtime_error("missing input " + name);
  return it->second;
}

void print(const std::string& name, const Tensor& t) {
  std::cout << name << ' ' << t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) std::cout << ' ' << t.size(d);
  std::vector<double> v = t.contiguous().to_vector<double>();
  std::cout << ' ' << v.size();
  for (double x : v) std::cout << ' ' << x;
  std::cout << '\n';
}

void print_all(const std::string& name, const std::vector<Tensor>& ts) {
  for (size_t i = 0; i < ts.size(); ++i) print(name + "." + std::to_string(i), ts[i]);
}

// x W1 + b1 -> tanh -> ... -> x Wk + bk (no activation on the last layer).
Tensor mlp(const std::vector<Tensor>& p, const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i + 1 < p.size(); i += 2) {
    h = h.matmul(p[i]) + p[i + 1];
    if (i + 2 < p.size()) h = h.tanh();
  }
  return h;
}

Tensor mse(const std::vector<Tensor>& p, const Tensor& x, const Tensor& y) { return (mlp(p, x) - y).square().mean(); }

// Negative log likelihood from log_softmax + gather (twice differentiable, unlike the fused cross entropy).
Tensor nll(const std::vector<Tensor>& p, const Tensor& x, const Tensor& labels) {
  return -mlp(p, x).log_softmax(1).gather(1, labels.to(DType::I64).unsqueeze(1)).mean();
}

std::vector<Tensor> named(const std::vector<std::string>& names, const std::string& prefix = "") {
  std::vector<Tensor> r;
  for (const auto& n : names) r.push_back(in(prefix + n));
  return r;
}

void run() {
  const std::vector<std::string> pn = {"W1", "b1", "W2", "b2", "W3", "b3"};
  std::vector<Tensor> params = named(pn), vs = named(pn, "v."), ws = named(pn, "w.");
  const Tensor &X = in("X"), &Y = in("Y"), &labels = in("labels");
  auto logits = [&](const std::vector<Tensor>& p) { return mlp(p, X); };
  auto loss_mse = [&](const std::vector<Tensor>& p) { return mse(p, X, Y); };
  auto loss_nll = [&](const std::vector<Tensor>& p) { return nll(p, X, labels); };

  auto [o1, vj] = fx::vjp(logits, params, in("vout"));
  print("vjp.out", o1);
  print_all("vjp", vj);
  auto [o2, jv] = fx::jvp(logits, params, vs);
  print("jvp.out", o2);
  print("jvp", jv);
  print_all("jac", fx::jacobian(logits, params));
  for (const auto& [name, loss] :
       std::vector<std::pair<std::string, fx::Function>>{{"mse", loss_mse}, {"nll", loss_nll}}) {
    auto [o3, hv3] = fx::hvp(loss, params, vs);
    print(name + ".hvp.out", o3);
    print_all(name + ".hvp", hv3);
    print_all(name + ".vhp", fx::vhp(loss, params, vs).second);
    std::vector<std::vector<Tensor>> h = fx::hessian(loss, params);
    for (size_t i = 0; i < h.size(); ++i) print_all(name + ".hess." + std::to_string(i), h[i]);
  }
  // Third order: d/dtheta <w, H(theta) v> through hvp's create_graph.
  {
    std::vector<Tensor> p;
    for (const Tensor& t : params) p.push_back(t.detach().requires_grad_(true));
    std::vector<Tensor> hv = fx::hvp(loss_mse, p, vs, true).second;
    Tensor s = (hv[0] * ws[0]).sum();
    for (size_t i = 1; i < hv.size(); ++i) s = s + (hv[i] * ws[i]).sum();
    print_all("third", autograd::grad({s}, p));
  }
  // WGAN-GP critic loss: D(fake) - D(real) + 10 (||grad_x D(xhat)|| - 1)^2 at xhat = eps real + (1 - eps) fake,
  // backpropagated into the critic's weights; and the plain penalty ||grad_x D(x)||^2 alone.
  {
    std::vector<Tensor> c;
    for (const Tensor& t : named({"C1", "c1", "C2", "c2"})) c.push_back(t.detach().requires_grad_(true));
    const Tensor &real = in("real"), &fake = in("fake"), &eps = in("eps");
    Tensor xhat = (eps * real + (1.0 - eps) * fake).requires_grad_(true);
    Tensor gx = autograd::grad({mlp(c, xhat).sum()}, {xhat}, {}, false, true)[0];
    Tensor gp = (gx.norm(2.0, {1}) - 1.0).square().mean();
    Tensor loss = mlp(c, fake).mean() - mlp(c, real).mean() + 10.0 * gp;
    loss.backward();
    print("wgan.loss", loss.detach());
    for (size_t i = 0; i < c.size(); ++i) print("wgan.grad." + std::to_string(i), c[i].grad());
    for (Tensor& t : c) t.zero_grad();
    Tensor x2 = real.detach().requires_grad_(true);
    Tensor g2 = autograd::grad({mlp(c, x2).sum()}, {x2}, {}, false, true)[0];
    g2.square().sum().backward();
    // The last bias does not move grad_x D: no gradient (torch's None), printed as zeros on both sides.
    for (size_t i = 0; i < c.size(); ++i)
      print("penalty.grad." + std::to_string(i), c[i].grad().defined() ? c[i].grad() : zeros_like(c[i]));
  }
  // MAML: theta' = theta - 0.1 grad L_support(theta) (create_graph), meta-gradient of L_query(theta').
  {
    std::vector<Tensor> th;
    for (const Tensor& t : params) th.push_back(t.detach().requires_grad_(true));
    std::vector<Tensor> g = autograd::grad({mse(th, in("Xs"), in("Ys"))}, th, {}, false, true);
    std::vector<Tensor> th2;
    for (size_t i = 0; i < th.size(); ++i) th2.push_back(th[i] - 0.1 * g[i]);
    Tensor outer = mse(th2, in("Xq"), in("Yq"));
    print("maml.outer", outer.detach());
    print_all("maml.grad", autograd::grad({outer}, th));
  }
}

}  // namespace

int main() {
  std::cout << std::setprecision(17);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream ss(line);
    std::string name;
    if (!(ss >> name)) continue;
    g_in[name] = oxmera_parity::read_tensor(ss, DType::F64);  // "<name> <rank> <dims> <values>"
  }
  try {
    run();
  } catch (const std::exception& e) {
    std::cout << "ERROR " << e.what() << '\n';
    return 1;
  }
  return 0;
}
