// The research workload ("stacked seeds"); see research.hpp and ../shared/spec/research-workload.md.
// Public oxmera API only.
#include "research.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "batch_order.hpp"
#include "oxmera/oxmera.hpp"

namespace oxmera::workloads {
namespace {

using Clock = std::chrono::steady_clock;

double uniform(Generator& g, double bound) { return (2.0 * g.next_double() - 1.0) * bound; }

// Initial values: replica r of a fit draws all its parameters, in order, from one Generator(seed_base + r);
// parameter k of the list is stacked over the replicas on a new dim 0.
struct ParamSpec {
  std::string name;
  Shape shape;  // per replica
  enum Kind { Uniform, Normal, Zero } kind;
  double scale;  // uniform bound or normal standard deviation
};

template <class T>
std::vector<std::pair<std::string, Tensor>> init_stacked(int R, uint64_t seed_base,
                                                         const std::vector<ParamSpec>& specs) {
  std::vector<std::vector<Tensor>> parts(specs.size());
  for (int r = 0; r < R; ++r) {
    Generator g(seed_base + static_cast<uint64_t>(r));
    for (size_t k = 0; k < specs.size(); ++k) {
      std::vector<T> v(static_cast<size_t>(specs[k].shape.product()));
      for (auto& x : v)
        x = static_cast<T>(specs[k].kind == ParamSpec::Uniform  ? uniform(g, specs[k].scale)
                           : specs[k].kind == ParamSpec::Normal ? specs[k].scale * g.next_normal()
                                                                : 0.0);
      parts[k].push_back(from_vector(v, specs[k].shape));
    }
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < specs.size(); ++k) out.push_back({specs[k].name, stack(parts[k], 0)});
  return out;
}

// ---- data
struct MlpData {
  Tensor x, y;  // [N, 8] f32, [N, 1] f32
  int64_t n_train = 0, n_test = 0;
};

MlpData make_mlp_data(uint64_t seed) {
  Generator g(seed + 1000);
  const int N = kMlpRows, D = kMlpFeatures;
  std::vector<float> x(static_cast<size_t>(N * D)), y(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) {
    double v[kMlpFeatures];
    for (int d = 0; d < D; ++d) v[d] = g.next_normal();
    const double eps = g.next_normal();
    const double s = v[0] * v[1] + std::sin(v[2]) - 0.5 * v[3] + 0.3 * v[4] * v[4] + 0.1 * eps;
    for (int d = 0; d < D; ++d) x[static_cast<size_t>(i * D + d)] = static_cast<float>(v[d]);
    y[static_cast<size_t>(i)] = s > 0.3 ? 1.0f : 0.0f;
  }
  MlpData m;
  m.x = from_vector(x, Shape{N, D});
  m.y = from_vector(y, Shape{N, 1});
  m.n_test = N / 5;
  m.n_train = N - m.n_test;
  return m;
}

struct DppData {
  Tensor F;                // [S, 16, 5] f64: last 5 values (oldest first) of each series at step t
  Tensor Y;                // [S, 4] i64: the k items with the largest next value, ascending
  std::vector<int64_t> y;  // Y on the host
  int64_t n_train = 0, n_test = 0;
};

DppData make_dpp_data(uint64_t seed) {
  Generator g(seed + 2000);
  const int M = kSeries, T = kSteps;
  std::vector<double> s(static_cast<size_t>(M * T));  // s[i * T + t]
  double c = g.next_normal();
  for (int i = 0; i < M; ++i) s[static_cast<size_t>(i * T)] = 0.2 * c + 0.3 * g.next_normal();
  for (int t = 1; t < T; ++t) {
    c = 0.9 * c + g.next_normal();
    for (int i = 0; i < M; ++i)
      s[static_cast<size_t>(i * T + t)] = 0.8 * s[static_cast<size_t>(i * T + t - 1)] + 0.2 * c + 0.3 * g.next_normal();
  }
  std::vector<double> F;
  std::vector<int64_t> Y;
  int64_t S = 0;
  for (int t = 5; t + 1 < T; ++t, ++S) {
    for (int i = 0; i < M; ++i)
      for (int l = 0; l < kLags; ++l) F.push_back(s[static_cast<size_t>(i * T + t - (kLags - 1) + l)]);
    std::vector<int> idx(M);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + kSetSize, idx.end(), [&](int a, int b) {
      return s[static_cast<size_t>(a * T + t + 1)] > s[static_cast<size_t>(b * T + t + 1)];
    });
    std::sort(idx.begin(), idx.begin() + kSetSize);
    for (int j = 0; j < kSetSize; ++j) Y.push_back(idx[static_cast<size_t>(j)]);
  }
  DppData d;
  d.F = from_vector(F, Shape{S, M, kLags});
  d.Y = from_vector(Y, Shape{S, kSetSize});
  d.y = Y;
  d.n_test = S / 5;
  d.n_train = S - d.n_test;
  return d;
}

// ---- parameters (initial values; replica r of fit f is drawn from Generator(seed + 1000 f + 1 + r))
struct Params {
  std::vector<std::pair<std::string, Tensor>> named;  // in a fixed order
  Tensor get(const std::string& n) const {
    for (auto& [k, v] : named)
      if (k == n) return v;
    throw std::logic_error("no parameter " + n);
  }
};

Params init_mlp(int R, uint64_t seed) {
  const double b1 = 1.0 / std::sqrt(double(kMlpFeatures)), b2 = 1.0 / std::sqrt(double(kMlpHidden));
  Params p;
  p.named = init_stacked<float>(R, seed + 1000 + 1,
                                {{"W1", Shape{kMlpFeatures, kMlpHidden}, ParamSpec::Uniform, b1},
                                 {"b1", Shape{1, kMlpHidden}, ParamSpec::Uniform, b1},
                                 {"W2", Shape{kMlpHidden, 1}, ParamSpec::Uniform, b2},
                                 {"b2", Shape{1, 1}, ParamSpec::Uniform, b2}});
  return p;
}

Params init_lag(int R, uint64_t seed) {
  Params p;
  p.named = init_stacked<double>(R, seed + 2000 + 1,
                                 {{"w", Shape{kLags, 1}, ParamSpec::Normal, 0.1},
                                  {"b", Shape{1, 1, 1}, ParamSpec::Zero, 0.0},
                                  {"V", Shape{kSeries, kSetSize}, ParamSpec::Normal, 0.5}});
  return p;
}

Params init_ds(int R, uint64_t seed) {
  const double ba = 1.0 / std::sqrt(double(kLags)), bc = 1.0 / std::sqrt(2.0 * kDsHidden);
  Params p;
  p.named = init_stacked<double>(R, seed + 3000 + 1,
                                 {{"A", Shape{kLags, kDsHidden}, ParamSpec::Uniform, ba},
                                  {"a", Shape{1, 1, kDsHidden}, ParamSpec::Uniform, ba},
                                  {"C", Shape{2 * kDsHidden, 1}, ParamSpec::Uniform, bc},
                                  {"d", Shape{1, 1, 1}, ParamSpec::Zero, 0.0},
                                  {"V", Shape{kSeries, kSetSize}, ParamSpec::Normal, 0.5}});
  return p;
}

// The values of a tensor of any floating dtype on any device, as f64 on the host.
std::vector<double> host(const Tensor& t) {
  return t.detach().to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
}

// Per-epoch bookkeeping of the per-replica batch losses for the first and the last epoch.
struct LossLog {
  int R;
  std::vector<double> first, last;
  int first_n = 0, last_n = 0;
  explicit LossLog(int r) : R(r), first(static_cast<size_t>(r), 0.0), last(static_cast<size_t>(r), 0.0) {}
  void add(bool is_first, bool is_last, const std::vector<double>& per) {
    if (is_first) {
      for (int r = 0; r < R; ++r) first[static_cast<size_t>(r)] += per[static_cast<size_t>(r)];
      ++first_n;
    }
    if (is_last) {
      for (int r = 0; r < R; ++r) last[static_cast<size_t>(r)] += per[static_cast<size_t>(r)];
      ++last_n;
    }
  }
  void finish(FitResult& res) {
    for (auto& v : first) v /= first_n;
    for (auto& v : last) v /= last_n;
    res.first_epoch_loss = first;
    res.train_loss = last;
  }
};

// --graph: a full-batch training step captured as a CUDA graph and replayed (as `oxmera train --graph`). The first
// full batch runs eagerly (the optimizer creates its state), the second is captured and replayed, every later one
// replayed with its rows copied into a static device index tensor. Short batches run eagerly.
class CapturedStep {
 public:
  CapturedStep(bool enabled, Device dev) : enabled_(enabled), dev_(dev) {}
  // `step(rows)` zeroes the gradients, computes the per-replica batch losses [R] of the training rows `rows` (an
  // i64 index tensor: `rows_cpu` eagerly, a device tensor when captured), backpropagates, steps the optimizer and
  // returns the losses.
  template <class Step>
  Tensor run(const Tensor& rows_cpu, Step&& step) {
    const bool full = rows_cpu.numel() == kBatch;
    if (!enabled_ || !full || !warmed_) {
      warmed_ = warmed_ || full;
      return step(rows_cpu);
    }
    if (!graph_.captured()) {
      rows_ = rows_cpu.to(dev_).clone();
      cuda::GraphCapture capture(graph_, dev_);
      per_ = step(rows_).detach();
    } else {
      rows_.copy_(rows_cpu.to(dev_));
    }
    graph_.replay();
    return per_.clone();  // the next replay rewrites per_
  }

 private:
  bool enabled_, warmed_ = false;
  Device dev_;
  cuda::Graph graph_;
  Tensor rows_, per_;
};

void check_graph_option(const ResearchOptions& o, Device dev) {
  if (o.graph && dev.is_cpu())
    throw std::invalid_argument(
        "--graph captures the training step as a CUDA graph: use it with --device cuda (the CPU runs its steps "
        "directly)");
}

// The fits' linear maps are stacked nn::Linear layers (R replicas each, replica dim first): one model written once,
// trained as R independent replicas in the same ops. Their initial values are the spec's (init_mlp, init_lag,
// init_ds: each replica's weight drawn as [in, out], the order the PyTorch twin follows), copied in transposed to the
// layer's [R, out, in]; the layer's own initialisation draws from a scratch generator and is overwritten.
std::shared_ptr<nn::Linear> stacked_linear(const Tensor& w_in_out, const Tensor& bias, DType dtype, Device dev) {
  const int64_t R = w_in_out.shape()[0], in = w_in_out.shape()[1], out = w_in_out.shape()[2];
  Generator scratch(0);
  auto layer = std::make_shared<nn::Linear>(in, out, nn::LinearOptions{.bias = true, .replicas = R}, scratch);
  {
    NoGradGuard ng;
    layer->weight.copy_(w_in_out.transpose(1, 2));
    layer->bias.copy_(bias.reshape(Shape{R, out}));
  }
  layer->to(dtype);
  layer->to(dev);
  return layer;
}

// The same rows for every replica: x [..., in] as a broadcast view [R, ..., in] (no copy).
Tensor for_every_replica(const Tensor& x, int64_t R) {
  Shape shape = x.shape();
  shape.insert(0, R);
  return x.unsqueeze(0).expand(shape);
}

// ---- fit 1: mlp-h16
FitResult fit_mlp(const MlpData& data, const Params& init, const ResearchOptions& o, Device dev) {
  const int R = o.replicas;
  const int64_t ntr = data.n_train, nte = data.n_test;
  Tensor xtr = data.x.narrow(0, 0, ntr).contiguous().to(dev), ytr = data.y.narrow(0, 0, ntr).contiguous().to(dev);
  Tensor xte = data.x.narrow(0, ntr, nte).contiguous().to(dev);
  std::vector<double> yte = host(data.y.narrow(0, ntr, nte));
  nn::Sequential mlp{stacked_linear(init.get("W1"), init.get("b1"), DType::F32, dev), std::make_shared<nn::Tanh>(),
                     stacked_linear(init.get("W2"), init.get("b2"), DType::F32, dev)};
  const std::vector<Tensor> params = mlp.parameters();
  FitResult res;
  res.name = "mlp-h16";
  res.metric_name = "accuracy";
  const auto t0 = Clock::now();
  optim::Adam opt(params, {.lr = 1e-2});
  LossLog log(R);
  CapturedStep captured(o.graph, dev);
  for (int e = 0; e < o.epochs; ++e) {
    // Index tensors stay on the CPU whatever the device: validated on the host, copied to a GPU
    // asynchronously (a device index would be read back to be validated: one synchronisation per op).
    const Tensor order = from_vector(shuffled_order(ntr, o.seed + static_cast<uint64_t>(e)), Shape{ntr});
    const bool first = e == 0, last = e == o.epochs - 1;
    for (int64_t s = 0; s < ntr; s += kBatch) {
      const int64_t B = std::min<int64_t>(kBatch, ntr - s);
      Tensor per = captured.run(order.narrow(0, s, B), [&](const Tensor& bi) {
        Tensor xb = xtr.index_select(0, bi), yb = ytr.index_select(0, bi);
        Tensor logits = mlp.forward(for_every_replica(xb, R));  // [R, B, 1]
        Tensor p = nn::binary_cross_entropy_with_logits(logits, yb.expand(Shape{R, B, 1}), {}, {}, nn::Reduction::None)
                       .mean({1, 2});  // [R]
        opt.zero_grad();
        p.sum().backward();
        opt.step();
        return p;
      });
      if (first || last) log.add(first, last, host(per));
    }
  }
  log.finish(res);
  {
    NoGradGuard ng;
    Tensor logits = mlp.forward(for_every_replica(xte, R));  // [R, nte, 1]
    std::vector<double> lg = host(logits);
    for (int r = 0; r < R; ++r) {
      int64_t correct = 0;
      for (int64_t i = 0; i < nte; ++i)
        correct += ((lg[static_cast<size_t>(r * nte + i)] > 0.0) == (yte[static_cast<size_t>(i)] > 0.5));
      res.metric.push_back(double(correct) / double(nte));
    }
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

// ---- fits 2 and 3: DPP set likelihood
// Flat indices into L viewed as [R, B*16*16] selecting the principal 4x4 submatrices on Y (per step).
std::vector<int64_t> pair_index(const DppData& d, const int64_t* steps, int64_t B) {
  std::vector<int64_t> idx(static_cast<size_t>(B * kSetSize * kSetSize));
  size_t p = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* y = d.y.data() + steps[b] * kSetSize;
    for (int i = 0; i < kSetSize; ++i)
      for (int j = 0; j < kSetSize; ++j) idx[p++] = b * kSeries * kSeries + y[i] * kSeries + y[j];
  }
  return idx;
}

// L [R, B, 16, 16] from the quality [R, B, 16, 1] and V [R, 16, 4]: diag(q) (V V^T + 1e-3 I) diag(q).
Tensor dpp_kernel(const Tensor& q, const Tensor& V, const Tensor& eye_m) {
  Tensor S = matmul(V, V.transpose(-1, -2)) + eye_m * 1e-3;  // [R, 16, 16]
  return q * S.unsqueeze(1) * q.transpose(-1, -2);
}

using Quality = std::function<Tensor(const Tensor& F)>;  // F [B, 16, 5] -> q [R, B, 16, 1]

struct DppRun {
  const DppData& data;
  Device dev;
  int R;
  Tensor Ftr, Fte, eye_m;
  Tensor Ydev;  // with --graph, the sets on the device: a captured step builds its pair indices there
  std::vector<int64_t> test_steps;
  DppRun(const DppData& d, Device dv, int r, DType dtype, bool graph)  // dtype: of the training
      : data(d), dev(dv), R(r) {
    Ftr = d.F.narrow(0, 0, d.n_train).contiguous().to(dtype).to(dv);
    Fte = d.F.narrow(0, d.n_train, d.n_test).contiguous().to(dtype).to(dv);
    eye_m = eye(kSeries, dtype, dv);
    if (graph) Ydev = d.Y.to(dv);
    test_steps.resize(static_cast<size_t>(d.n_test));
    std::iota(test_steps.begin(), test_steps.end(), d.n_train);
  }

  // Per-replica batch-mean NLL [R] of a batch (features Fb [B, 16, 5]; `pairs`: its pair_index, [B * 16]).
  Tensor nll(const Tensor& Fb, const Tensor& pairs, int64_t B, const Tensor& V, const Quality& quality) const {
    Tensor L = dpp_kernel(quality(Fb), V, eye_m);  // [R, B, 16, 16]
    Tensor logZ = linalg::logdet(L + eye_m);       // [R, B]
    Tensor LY = L.reshape(Shape{R, B * kSeries * kSeries}).index_select(1, pairs).view(Shape{R, B, kSetSize, kSetSize});
    return (logZ - linalg::logdet(LY)).mean({1});
  }
  // pair_index of the training steps `rows`: on the host for host rows, with device ops for device rows (a
  // captured step, whose rows change between replays).
  Tensor pairs_of(const Tensor& rows, const int64_t* host_rows) const {
    const int64_t B = rows.numel();
    if (rows.device().is_cpu()) return from_vector(pair_index(data, host_rows, B), Shape{B * kSetSize * kSetSize});
    Tensor Yb = Ydev.index_select(0, rows);                                             // [B, 4]
    Tensor base = arange(B, DType::I64, dev) * static_cast<double>(kSeries * kSeries);  // [B]
    return (base.view(Shape{B, 1, 1}) + Yb.view(Shape{B, kSetSize, 1}) * static_cast<double>(kSeries) +
            Yb.view(Shape{B, 1, kSetSize}))
        .reshape(Shape{B * kSetSize * kSetSize});
  }

  template <class Opt>
  void train(Opt& opt, const Tensor& V, const Quality& quality, const ResearchOptions& o, FitResult& res) const {
    LossLog log(R);
    CapturedStep captured(o.graph, dev);
    const int64_t ntr = data.n_train;
    for (int e = 0; e < o.epochs; ++e) {
      const std::vector<int64_t> order = shuffled_order(ntr, o.seed + static_cast<uint64_t>(e));
      const Tensor order_t = from_vector(order, Shape{ntr});  // on the CPU, as every index here
      const bool first = e == 0, last = e == o.epochs - 1;
      for (int64_t s = 0; s < ntr; s += kBatch) {
        const int64_t B = std::min<int64_t>(kBatch, ntr - s);
        Tensor per = captured.run(order_t.narrow(0, s, B), [&](const Tensor& bi) {
          Tensor p = nll(Ftr.index_select(0, bi), pairs_of(bi, order.data() + s), B, V, quality);
          opt.zero_grad();
          p.sum().backward();
          opt.step();
          return p;
        });
        if (first || last) log.add(first, last, host(per));
      }
    }
    log.finish(res);
  }

  // Held-out k-DPP NLL per replica, f64 on the host: -logdet(L_Y) + log e_k(eigh(L)), mean over held-out
  // steps. L is built in the training dtype on the device, then widened to f64 on the CPU.
  std::vector<double> metric(const Tensor& V, const Quality& quality) const {
    NoGradGuard ng;
    const int64_t B = data.n_test;
    Tensor L = dpp_kernel(quality(Fte), V, eye_m).to(Device::cpu()).to(DType::F64);
    Tensor LY =
        L.reshape(Shape{R, B * kSeries * kSeries})
            .index_select(1, from_vector(pair_index(data, test_steps.data(), B), Shape{B * kSetSize * kSetSize}))
            .view(Shape{R, B, kSetSize, kSetSize});
    std::vector<double> ldY = host(linalg::logdet(LY));           // [R, B]
    std::vector<double> lam = host(linalg::eigh(L).eigenvalues);  // [R, B, 16]
    std::vector<double> out(static_cast<size_t>(R), 0.0);
    std::vector<double> l16(kSeries);
    for (int r = 0; r < R; ++r) {
      double acc = 0;
      for (int64_t b = 0; b < B; ++b) {
        const size_t rb = static_cast<size_t>(r * B + b);
        std::copy_n(lam.begin() + static_cast<std::ptrdiff_t>(rb * kSeries), kSeries, l16.begin());
        acc += -ldY[rb] + std::log(elementary_symmetric(l16, kSetSize));
      }
      out[static_cast<size_t>(r)] = acc / double(B);
    }
    return out;
  }
};

FitResult fit_lag(const DppData& data, const Params& init, const ResearchOptions& o, Device dev, DType dtype) {
  const int R = o.replicas;
  DppRun run(data, dev, R, dtype, o.graph);
  const std::shared_ptr<nn::Linear> lin = stacked_linear(init.get("w"), init.get("b"), dtype, dev);  // 5 -> 1
  const Tensor V = init.get("V").to(dtype).to(dev).clone().requires_grad_(true);
  std::vector<Tensor> params = {lin->weight, lin->bias, V};
  Quality quality = [&](const Tensor& F) {
    const int64_t B = F.size(0);
    // [R, B*16, 5] (the same rows for every replica) -> [R, B*16, 1] -> [R, B, 16, 1]
    Tensor z = lin->forward(for_every_replica(F.reshape(Shape{B * kSeries, kLags}), R)).view(Shape{R, B, kSeries, 1});
    return (z * 0.5).exp();
  };
  FitResult res;
  res.name = "linear-lag5";
  res.metric_name = "kdpp_nll";
  const auto t0 = Clock::now();
  optim::Adam opt(params, {.lr = 1e-2});
  run.train(opt, V, quality, o, res);
  res.metric = run.metric(V, quality);
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

FitResult fit_ds(const DppData& data, const Params& init, const ResearchOptions& o, Device dev, DType dtype) {
  const int R = o.replicas;
  DppRun run(data, dev, R, dtype, o.graph);
  const std::shared_ptr<nn::Linear> phi_map = stacked_linear(init.get("A"), init.get("a"), dtype, dev);  // 5 -> 30
  const std::shared_ptr<nn::Linear> out_map = stacked_linear(init.get("C"), init.get("d"), dtype, dev);  // 60 -> 1
  const Tensor V = init.get("V").to(dtype).to(dev).clone().requires_grad_(true);
  Quality quality = [&](const Tensor& F) {
    const int64_t B = F.size(0);
    Tensor phi = phi_map->forward(for_every_replica(F, R)).relu();  // [R, B, 16, 30]
    Tensor ctx = phi.mean({2}, true).expand(Shape{R, B, kSeries, kDsHidden});
    return (out_map->forward(cat({phi, ctx}, -1)) * 0.5).exp();  // [R, B, 16, 1]
  };
  FitResult res;
  res.name = "deepsets-H30";
  res.metric_name = "kdpp_nll";
  const auto t0 = Clock::now();
  optim::AdamWOptions decay{.lr = 1e-2, .weight_decay = 1e-4}, no_decay{.lr = 1e-2, .weight_decay = 0.0};
  std::vector<optim::ParamGroup<optim::AdamWOptions>> groups(2);
  groups[0].params = {phi_map->weight, out_map->weight, V};
  groups[0].options = decay;
  groups[1].params = {phi_map->bias, out_map->bias};
  groups[1].options = no_decay;
  optim::AdamW opt(std::move(groups));
  run.train(opt, V, quality, o, res);
  res.metric = run.metric(V, quality);
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

// Training dtype of the DPP fits: --dtype auto is f64 on the CPU and f32 on a GPU.
DType research_dtype(const ResearchOptions& o) {
  const bool cpu = Device::parse(o.device).is_cpu();
  if (o.dtype == "auto") return cpu ? DType::F64 : DType::F32;
  if (o.dtype == "f32") return DType::F32;
  if (o.dtype == "f64") {
    if (!cpu)
      throw std::invalid_argument("--dtype f64 runs on the CPU only (f64 tensors never go to a GPU); use " +
                                  std::string("--dtype f32 with --device ") + o.device);
    return DType::F64;
  }
  throw std::invalid_argument("unknown dtype '" + o.dtype + "' (expected auto, f32 or f64)");
}

bool wants(const ResearchOptions& o, const char* name) { return o.fit == "all" || o.fit == name; }

void write_dump(const ResearchOptions& o, const MlpData& m, const DppData& d, const Params& p1, const Params& p2,
                const Params& p3) {
  auto orders = [&](int64_t n) {
    std::vector<int64_t> all;
    for (int e = 0; e < o.epochs; ++e) {
      auto p = shuffled_order(n, o.seed + static_cast<uint64_t>(e));
      all.insert(all.end(), p.begin(), p.end());
    }
    return from_vector(all, Shape{o.epochs, n});
  };
  std::vector<std::pair<std::string, Tensor>> t = {{"mlp.x", m.x}, {"mlp.y", m.y}, {"mlp.order", orders(m.n_train)},
                                                   {"dpp.F", d.F}, {"dpp.Y", d.Y}, {"dpp.order", orders(d.n_train)}};
  for (auto& [n, v] : p1.named) t.push_back({"mlp-h16." + n, v});
  for (auto& [n, v] : p2.named) t.push_back({"linear-lag5." + n, v});
  for (auto& [n, v] : p3.named) t.push_back({"deepsets-H30." + n, v});
  std::map<std::string, std::string> meta = {{"epochs", std::to_string(o.epochs)},
                                             {"replicas", std::to_string(o.replicas)},
                                             {"seed", std::to_string(o.seed)},
                                             {"batch", std::to_string(kBatch)},
                                             {"k", std::to_string(kSetSize)},
                                             {"mlp.n_train", std::to_string(m.n_train)},
                                             {"dpp.n_train", std::to_string(d.n_train)},
                                             {"lr", "0.01"},
                                             {"weight_decay", "0.0001"}};
  save_safetensors(o.dump, t, meta);
}

}  // namespace

double elementary_symmetric(const std::vector<double>& lambda, int k) {
  std::vector<double> E(static_cast<size_t>(k + 1), 0.0);
  E[0] = 1.0;
  for (double l : lambda)
    for (int j = k; j >= 1; --j) E[static_cast<size_t>(j)] += l * E[static_cast<size_t>(j - 1)];
  return E[static_cast<size_t>(k)];
}

std::vector<FitResult> research_fits(const ResearchOptions& o) {
  if (o.epochs < 1) throw std::invalid_argument("--epochs must be >= 1");
  if (o.replicas < 1) throw std::invalid_argument("--replicas must be >= 1");
  if (!(o.fit == "all" || o.fit == "mlp-h16" || o.fit == "linear-lag5" || o.fit == "deepsets-H30"))
    throw std::invalid_argument("unknown fit '" + o.fit + "' (expected all, mlp-h16, linear-lag5, deepsets-H30)");
  const DType dtype = research_dtype(o);
  init();
  const Device dev = Device::parse(o.device);
  check_graph_option(o, dev);
  (void)zeros(Shape{1}).to(dev);  // BackendUnavailable here, before any work, when the device has no backend

  // Data and initial parameters (not timed).
  const MlpData mlp = make_mlp_data(o.seed);
  const DppData dpp = make_dpp_data(o.seed);
  const Params p1 = init_mlp(o.replicas, o.seed), p2 = init_lag(o.replicas, o.seed), p3 = init_ds(o.replicas, o.seed);
  if (!o.dump.empty()) write_dump(o, mlp, dpp, p1, p2, p3);

  std::vector<FitResult> out;
  if (wants(o, "mlp-h16")) out.push_back(fit_mlp(mlp, p1, o, dev));
  if (wants(o, "linear-lag5")) out.push_back(fit_lag(dpp, p2, o, dev, dtype));
  if (wants(o, "deepsets-H30")) out.push_back(fit_ds(dpp, p3, o, dev, dtype));
  return out;
}

int run_research(const ResearchOptions& o, std::ostream& out) {
  const std::vector<FitResult> fits = research_fits(o);
  const int threads = get_num_threads();
  const std::string dtype = dtype_name(research_dtype(o));
  out << "oxmera bench research: device " << o.device << (o.graph ? " (CUDA graph)" : "") << ", dtype " << dtype
      << ", epochs " << o.epochs << ", replicas " << o.replicas << ", seed " << o.seed << ", threads " << threads
      << "\n";
  auto list = [](const std::vector<double>& v) {
    std::ostringstream s;
    s << std::setprecision(9) << "[";
    for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
    return s.str() + "]";
  };
  double total = 0;
  for (const auto& f : fits) {
    total += f.seconds;
    out << std::left << std::setw(13) << f.name << " time " << std::fixed << std::setprecision(3) << f.seconds
        << " s  train_loss " << std::defaultfloat << list(f.train_loss) << "  " << f.metric_name << " "
        << list(f.metric) << "\n";
  }
  out << std::left << std::setw(13) << "total"
      << " time " << std::fixed << std::setprecision(3) << total << " s\n"
      << std::defaultfloat;
  if (!o.out.empty()) {
    nlohmann::json j;
    j["implementation"] = "oxmera";
    j["device"] = o.device;
    j["graph"] = o.graph;
    j["dtype"] = dtype;
    j["epochs"] = o.epochs;
    j["replicas"] = o.replicas;
    j["seed"] = o.seed;
    j["threads"] = threads;
    j["total_seconds"] = total;
    j["fits"] = nlohmann::json::array();
    for (const auto& f : fits)
      j["fits"].push_back({{"name", f.name},
                           {"seconds", f.seconds},
                           {"first_epoch_loss", f.first_epoch_loss},
                           {"train_loss", f.train_loss},
                           {"metric_name", f.metric_name},
                           {"metric", f.metric}});
    std::ofstream f(o.out);
    f << j.dump(2) << "\n";
    if (!f) throw Error(ErrorKind::Io, "bench research: cannot write " + o.out);
  }
  return 0;
}

}  // namespace oxmera::workloads
