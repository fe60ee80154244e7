// One data-parallel training step of nn::DistributedDataParallel, the twin of bench/ddp_torch.py (same initial
// weights and global batch, written by `ddp_torch.py init FILE MODEL`); run under mpirun (bench/ddp_compare.sh).
//   MODEL mlp: 2-32-32-2 tanh MLP; wide: 784-1024-1024-10 relu MLP. Global batch 256 split evenly over the
//   ranks, cross entropy, SGD lr 0.05; one step = forward + loss + zero_grad + backward (with the reduction) + step.
// Then the overlap: forward+backward under no_sync() (no communication) up to a barrier (so that it is the slowest
// rank's, as the synced phase's reduction waits for it), the same with DDP's reduction, and the all-reduce of the
// DDP's buckets alone (each rep starts after a barrier); hidden = (local + allreduce - ddp) / allreduce
// is the share of the all-reduce that backward hid (1: all, 0: none; below 0: DDP costs more than its all-reduce).
// Usage: mpirun -np 2 oxmera_ddp_step FILE STEPS THREADS MODEL; rank 0 prints the lines ddp_torch.py prints.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "oxmera/distributed.hpp"
#include "oxmera/io.hpp"
#include "oxmera/nn.hpp"
#include "oxmera/nn/data_parallel.hpp"
#include "oxmera/optim.hpp"
#include "oxmera/oxmera.hpp"

using namespace oxmera;
namespace dist = oxmera::distributed;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<nn::Sequential> make_model(const std::string& name) {
  const bool wide = name == "wide";
  const std::vector<int64_t> sizes =
      wide ? std::vector<int64_t>{784, 1024, 1024, 10} : std::vector<int64_t>{2, 32, 32, 2};
  auto net = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    net->push_back(nn::AnyModule(std::make_shared<nn::Linear>(sizes[i], sizes[i + 1])));
    if (i + 2 < sizes.size()) {
      if (wide)
        net->push_back(nn::AnyModule(std::make_shared<nn::ReLU>()));
      else
        net->push_back(nn::AnyModule(std::make_shared<nn::Tanh>()));
    }
  }
  return net;
}

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: mpirun -np 2 %s FILE STEPS THREADS mlp|wide\n", argv[0]);
    return 2;
  }
  const int steps = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  const std::string name = argv[4];
  if (name != "mlp" && name != "wide") {
    std::fprintf(stderr, "%s: MODEL must be mlp or wide, got '%s'\n", argv[0], name.c_str());
    return 2;
  }
  set_num_threads(threads);
  dist::init();
  const int rank = dist::rank(), world = dist::world_size();
  std::map<std::string, Tensor> file = load_safetensors(argv[1]);
  const Tensor gx = file["data.x"], gy = file["data.y"].to(DType::I64);
  file.erase("data.x");
  file.erase("data.y");
  const int64_t per = gx.shape()[0] / world;
  const Tensor x = gx.narrow(0, rank * per, per).contiguous(), y = gy.narrow(0, rank * per, per).contiguous();
  auto net = make_model(name);
  net->load_state_dict(file);
  // BUCKET_MB (both sides, default 25: torch's bucket_cap_mb) sets the bucket size, to see the overlap.
  const char* bucket_mb = std::getenv("BUCKET_MB");
  nn::DistributedDataParallelOptions options;
  if (bucket_mb != nullptr) options.bucket_cap_bytes = static_cast<int64_t>(std::atof(bucket_mb) * 1024 * 1024);
  // GRAD_AS_BUCKET_VIEW=1 (both sides): gradient_as_bucket_view.
  const char* as_view = std::getenv("GRAD_AS_BUCKET_VIEW");
  options.gradient_as_bucket_view = as_view != nullptr && std::string(as_view) == "1";
  nn::DistributedDataParallel ddp(net, {}, options);
  optim::SGD opt(net->parameters(), {.lr = 0.05});
  const int warmup = 5;
  std::vector<double> times, losses;
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = Clock::now();
    Tensor loss = nn::cross_entropy(ddp(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    const double us = us_since(t0);
    losses.push_back(loss.item<float>());
    if (s >= warmup) times.push_back(us);
  }

  // The all-reduce alone: one buffer per bucket, started together and waited, as DDP's hooks do.
  std::map<std::string, int64_t> numel;
  for (auto& [n, t] : net->named_parameters()) numel[n] = t.numel();
  std::vector<Tensor> flats;
  for (const auto& bucket : ddp.buckets()) {
    int64_t total = 0;
    for (const auto& n : bucket) total += numel[n];
    flats.push_back(zeros({total}));
  }
  std::vector<double> local, synced, reduce;
  auto timed = [](std::vector<double>& into, auto&& fn) {
    dist::barrier();
    const auto t0 = Clock::now();
    fn();
    into.push_back(us_since(t0));
  };
  for (int s = 0; s < warmup + steps; ++s) {
    timed(local, [&] {
      auto guard = ddp.no_sync();
      opt.zero_grad();
      nn::cross_entropy(ddp(x), y).backward();
      dist::barrier();  // the slowest rank's backward: the synced phase waits for it too
    });
    timed(synced, [&] {
      opt.zero_grad();
      nn::cross_entropy(ddp(x), y).backward();
    });
    timed(reduce, [&] {
      std::vector<dist::Work> work;
      for (Tensor& f : flats) work.push_back(dist::all_reduce_async(f, dist::ReduceOp::Avg));
      for (auto& w : work) w.wait();
    });
  }
  if (rank == 0) {
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    std::printf("ddp-%s threads=%d ranks=%d steps=%zu median_us=%.2f p10_us=%.2f p90_us=%.2f loss=%.6f\n", name.c_str(),
                threads, world, n, sorted[n / 2], sorted[n / 10], sorted[n * 9 / 10], losses.back());
    std::printf("losses");
    for (double v : losses) std::printf(" %.7f", v);
    std::printf("\n");
    auto tail = [&](const std::vector<double>& v) { return median(std::vector<double>(v.begin() + warmup, v.end())); };
    const double l = tail(local), d = tail(synced), a = tail(reduce);
    std::printf("overlap local_us=%.2f ddp_us=%.2f allreduce_us=%.2f hidden=%.3f buckets=%zu\n", l, d, a,
                (l + a - d) / a, flats.size());
    std::fflush(stdout);
  }
  dist::finalize();
  return 0;
}
