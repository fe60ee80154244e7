// Runs one optimizer configuration for a fixed number of steps on deterministic parameters and gradients
// and prints the parameters after every step, for test_optim_torch.py to compare with torch.optim.
//
// Usage: optim_torch_driver f32|f64 SGD|Adam|AdamW|RMSprop [key=value ...]
//   keys: the option names of the optimizer (lr, momentum, dampening, weight_decay, nesterov, maximize,
//   beta1, beta2, eps, amsgrad, alpha, centered), steps (default 20), group2_lr (second parameter in its own
//   group with this lr), sched=step|cos|warmup, clip=<max_norm>, clip_norm=<norm_type|inf>.
// Output: "step T v v v ..." per step, parameters concatenated, values printed with %.17g.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <oxmera/oxmera.hpp>

using namespace oxmera;

namespace {
// The formulas are repeated in test_optim_torch.py.
double init_value(int k, int i) { return 2.0 * std::cos(0.3 * i + k); }
double grad_value(int k, int i, int t) { return std::sin(0.37 * i + 1.1 * t + 0.5 * k) * (0.5 + 0.1 * i); }
bool has_grad(int k, int t) { return !(k == 1 && t % 7 == 3); }  // param 1 skips some steps

template <class G>
std::unique_ptr<optim::Optimizer> make(const std::vector<Tensor>& ps, const G& o, double group2_lr) {
  using Opt = std::conditional_t<
      std::is_same_v<G, optim::SGDOptions>, optim::SGD,
      std::conditional_t<std::is_same_v<G, optim::AdamOptions>, optim::Adam,
                         std::conditional_t<std::is_same_v<G, optim::AdamWOptions>, optim::AdamW, optim::RMSprop>>>;
  if (group2_lr < 0) return std::make_unique<Opt>(ps, o);
  G o2 = o;
  o2.lr = group2_lr;
  return std::make_unique<Opt>(std::vector<optim::ParamGroup<G>>{{{ps[0]}, o}, {{ps[1]}, o2}});
}
}  // namespace

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(stderr, "usage: optim_torch_driver f32|f64 SGD|Adam|AdamW|RMSprop [key=value ...]\n");
    return 2;
  }
  const DType dt = std::string(argv[1]) == "f64" ? DType::F64 : DType::F32;
  const std::string kind = argv[2];
  std::map<std::string, std::string> kv;
  for (int a = 3; a < argc; ++a) {
    std::string s = argv[a];
    auto eq = s.find('=');
    if (eq == std::string::npos) throw std::runtime_error("bad argument " + s);
    kv[s.substr(0, eq)] = s.substr(eq + 1);
  }
  auto num = [&](const char* k, double d) { return kv.count(k) ? std::stod(kv[k]) : d; };
  auto flag = [&](const char* k) { return kv.count(k) && kv[k] == "1"; };

  const std::vector<Shape> shapes = {Shape{7}, Shape{3, 4}};
  std::vector<Tensor> ps;
  for (int k = 0; k < 2; ++k) {
    int64_t n = 1;
    for (int64_t d : shapes[k]) n *= d;
    std::vector<double> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = init_value(k, static_cast<int>(i));
    ps.push_back(from_vector<double>(v, shapes[k]).to(dt).requires_grad_());
  }
  const double g2 = num("group2_lr", -1);
  std::unique_ptr<optim::Optimizer> opt;
  if (kind == "SGD") {
    opt = make(ps,
               optim::SGDOptions{num("lr", 0.1), num("momentum", 0), num("dampening", 0), num("weight_decay", 0),
                                 flag("nesterov"), flag("maximize")},
               g2);
  } else if (kind == "Adam") {
    opt = make(ps,
               optim::AdamOptions{num("lr", 1e-3),
                                  {num("beta1", 0.9), num("beta2", 0.999)},
                                  num("eps", 1e-8),
                                  num("weight_decay", 0),
                                  flag("amsgrad"),
                                  flag("maximize")},
               g2);
  } else if (kind == "AdamW") {
    opt = make(ps,
               optim::AdamWOptions{num("lr", 1e-3),
                                   {num("beta1", 0.9), num("beta2", 0.999)},
                                   num("eps", 1e-8),
                                   num("weight_decay", 1e-2),
                                   flag("amsgrad"),
                                   flag("maximize")},
               g2);
  } else if (kind == "RMSprop") {
    opt = make(ps,
               optim::RMSpropOptions{num("lr", 1e-2), num("alpha", 0.99), num("eps", 1e-8), num("weight_decay", 0),
                                     num("momentum", 0), flag("centered"), flag("maximize")},
               g2);
  } else {
    throw std::runtime_error("unknown optimizer " + kind);
  }
  std::unique_ptr<optim::LRScheduler> sched;
  const std::string sk = kv.count("sched") ? kv["sched"] : "";
  if (sk == "step") sched = std::make_unique<optim::StepLR>(*opt, 5, 0.5);
  if (sk == "cos") sched = std::make_unique<optim::CosineAnnealingLR>(*opt, 20, 1e-4);
  if (sk == "warmup") sched = std::make_unique<optim::LinearWarmup>(*opt, 6, 0.2);
  const double clip = num("clip", -1);
  const double clip_norm = kv.count("clip_norm") && kv["clip_norm"] == "inf" ? INFINITY : num("clip_norm", 2.0);

  const int steps = static_cast<int>(num("steps", 20));
  for (int t = 1; t <= steps; ++t) {
    opt->zero_grad();
    for (int k = 0; k < 2; ++k) {
      if (!has_grad(k, t)) continue;
      std::vector<double> g(static_cast<size_t>(ps[k].numel()));
      for (size_t i = 0; i < g.size(); ++i) g[i] = grad_value(k, static_cast<int>(i), t);
      ps[k].set_grad(from_vector<double>(g, ps[k].shape()).to(dt));
    }
    if (clip > 0) optim::clip_grad_norm_(ps, clip, clip_norm);
    opt->step();
    if (sched) sched->step();
    std::printf("step %d", t);
    for (auto& p : ps)
      for (double v : p.to(DType::F64).to_vector<double>()) std::printf(" %.17g", v);
    std::printf("\n");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "optim_torch_driver: %s\n", e.what());
  return 1;
}
