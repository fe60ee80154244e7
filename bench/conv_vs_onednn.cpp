// oxmera's convolution (im2col + GEMM forward, GEMM + col2im backward) against oneDNN 2.6's (Debian libdnnl-dev,
// the library PyTorch's CPU convolutions run on), per layer of the small CNNs: forward, backward to the input and
// backward to the weight and bias, f32, 1 thread, NCHW tensors in and out as oxmera holds them. oneDNN runs twice:
// on plain NCHW / OIHW memory (what oxmera could hand it without a layout of its own), and with the layouts it
// chooses ("any", its blocked formats) plus the reorders from and to NCHW that oxmera would need, counted in.
// Medians of ROUNDS batches of REPS calls, alternating the three. Built only where libdnnl-dev is installed.
// Usage: conv_vs_onednn [rounds] [reps]; env OXMERA_ONLY=1: oxmera's side only (for perf record)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "oxmera/oxmera.hpp"

namespace ox = oxmera;
namespace F = oxmera::nn::functional;
using Clock = std::chrono::steady_clock;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

struct Layer {
  const char* name;
  int64_t n, c, h, w, o, k, pad;
  bool input_grad;  // the first layer's input needs no gradient
};

double median_us(const std::function<void()>& fn, int rounds, int reps, std::vector<double>& out) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) fn();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps);
  }
  std::sort(t.begin(), t.end());
  out.push_back(t[t.size() / 2]);
  return t[t.size() / 2];
}

// One oneDNN convolution layer: forward_training, backward data, backward weights (+ bias), on plain NCHW or on
// oneDNN's chosen layouts with reorders from / to NCHW.
struct OneDnnConv {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};
  bool blocked;
  dnnl::memory x_nchw, w_oihw, b, y_nchw, gy_nchw, gx_nchw, gw_oihw, gb;
  dnnl::memory x, w, y, gy, gx, gw;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_w;
  bool input_grad;
  std::vector<std::function<void()>> pre_fwd, post_fwd, pre_bwd, post_bwd;

  OneDnnConv(const Layer& l, bool blocked_layouts) : blocked(blocked_layouts), input_grad(l.input_grad) {
    const dnnl::memory::dims xd{l.n, l.c, l.h, l.w}, wd{l.o, l.c, l.k, l.k}, bd{l.o},
        yd{l.n, l.o, l.h + 2 * l.pad - l.k + 1, l.w + 2 * l.pad - l.k + 1}, st{1, 1}, pd{l.pad, l.pad};
    auto plain = [&](const dnnl::memory::dims& d, tag t) { return dnnl::memory::desc(d, dt::f32, t); };
    x_nchw = dnnl::memory(plain(xd, tag::nchw), eng);
    w_oihw = dnnl::memory(plain(wd, tag::oihw), eng);
    b = dnnl::memory(plain(bd, tag::x), eng);
    y_nchw = dnnl::memory(plain(yd, tag::nchw), eng);
    gy_nchw = dnnl::memory(plain(yd, tag::nchw), eng);
    gx_nchw = dnnl::memory(plain(xd, tag::nchw), eng);
    gw_oihw = dnnl::memory(plain(wd, tag::oihw), eng);
    gb = dnnl::memory(plain(bd, tag::x), eng);
    for (dnnl::memory* m : {&x_nchw, &w_oihw, &b, &gy_nchw}) {
      float* p = static_cast<float*>(m->get_data_handle());
      const size_t count = m->get_desc().get_size() / sizeof(float);
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    }
    const tag any = tag::any;
    auto md = [&](const dnnl::memory::dims& d, tag t) { return plain(d, blocked ? any : t); };
    auto fwd_d = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                 md(xd, tag::nchw), md(wd, tag::oihw), plain(bd, tag::x),
                                                 md(yd, tag::nchw), st, pd, pd);
    auto fwd_pd = dnnl::convolution_forward::primitive_desc(fwd_d, eng);
    auto bd_d = dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, md(xd, tag::nchw),
                                                      md(wd, tag::oihw), md(yd, tag::nchw), st, pd, pd);
    auto bd_pd = dnnl::convolution_backward_data::primitive_desc(bd_d, eng, fwd_pd);
    auto bw_d =
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, md(xd, tag::nchw),
                                                 md(wd, tag::oihw), plain(bd, tag::x), md(yd, tag::nchw), st, pd, pd);
    auto bw_pd = dnnl::convolution_backward_weights::primitive_desc(bw_d, eng, fwd_pd);
    fwd = dnnl::convolution_forward(fwd_pd);
    bwd_data = dnnl::convolution_backward_data(bd_pd);
    bwd_w = dnnl::convolution_backward_weights(bw_pd);
    // Memory in the primitives' layouts, with a reorder wherever that is not NCHW / OIHW.
    auto bind = [&](dnnl::memory& mine, const dnnl::memory::desc& want, dnnl::memory& user, bool to_mine,
                    std::vector<std::function<void()>>& where) {
      if (want == user.get_desc()) {
        mine = user;
        return;
      }
      mine = dnnl::memory(want, eng);
      auto r = to_mine ? dnnl::reorder(user, mine) : dnnl::reorder(mine, user);
      dnnl::memory src = to_mine ? user : mine, dst = to_mine ? mine : user;
      where.push_back([this, r, src, dst]() mutable { r.execute(s, src, dst); });
    };
    bind(x, fwd_pd.src_desc(), x_nchw, true, pre_fwd);
    bind(w, fwd_pd.weights_desc(), w_oihw, true, pre_fwd);
    bind(y, fwd_pd.dst_desc(), y_nchw, false, post_fwd);
    bind(gy, bd_pd.diff_dst_desc(), gy_nchw, true, pre_bwd);
    bind(gx, bd_pd.diff_src_desc(), gx_nchw, false, post_bwd);
    bind(gw, bw_pd.diff_weights_desc(), gw_oihw, false, post_bwd);
  }

  void step() {
    for (auto& f : pre_fwd) f();
    fwd.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
    for (auto& f : post_fwd) f();
    for (auto& f : pre_bwd) f();
    if (input_grad) bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, gx}});
    bwd_w.execute(s,
                  {{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_DIFF_WEIGHTS, gw}, {DNNL_ARG_DIFF_BIAS, gb}});
    for (auto& f : post_bwd) f();
    s.wait();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 11;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 50;
  ox::set_num_threads(1);
  const bool oxmera_only = std::getenv("OXMERA_ONLY") != nullptr;
  const Layer layers[] = {
      {"train_step conv1 (64x1x28x28 -> 8, 3x3 p1)", 64, 1, 28, 28, 8, 3, 1, false},
      {"train_step conv2 (64x8x14x14 -> 16, 3x3 p1)", 64, 8, 14, 14, 16, 3, 1, true},
      {"digits conv1 (32x1x8x8 -> 16, 3x3 p1)", 32, 1, 8, 8, 16, 3, 1, false},
      {"digits conv2 (32x16x4x4 -> 32, 3x3 p1)", 32, 16, 4, 4, 32, 3, 1, true},
  };
  std::printf(
      "# conv forward + backward (input grad where the layer has one, weight and bias grads), us per call, "
      "median of %d x %d, 1 thread\n",
      rounds, reps);
  for (const Layer& l : layers) {
    ox::Tensor x = ox::randn({l.n, l.c, l.h, l.w}, 1);
    if (l.input_grad) x.requires_grad_(true);
    ox::Tensor w = (ox::randn({l.o, l.c, l.k, l.k}, 2) * 0.1).requires_grad_(true);
    ox::Tensor bias = ox::zeros({l.o}).requires_grad_(true);
    ox::Tensor gy;
    auto ours = [&] {
      ox::Tensor y = F::conv2d(x, w, bias, {1, 1}, {l.pad, l.pad});
      if (!gy.defined()) gy = ox::randn(y.shape(), 3);
      y.backward(gy);
      w.zero_grad();
      bias.zero_grad();
      if (l.input_grad) x.zero_grad();
    };
    OneDnnConv plain(l, false), blocked(l, true);
    std::vector<double> t_ours, t_plain, t_blocked;
    for (int r = 0; r < 3; ++r) {  // alternate
      median_us(ours, rounds, reps, t_ours);
      if (oxmera_only) continue;
      median_us([&] { plain.step(); }, rounds, reps, t_plain);
      median_us([&] { blocked.step(); }, rounds, reps, t_blocked);
    }
    if (oxmera_only) {
      std::sort(t_ours.begin(), t_ours.end());
      std::printf("%-46s oxmera %8.1f\n", l.name, t_ours[t_ours.size() / 2]);
      continue;
    }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double o = med(t_ours), p = med(t_plain), b = med(t_blocked);
    std::printf("%-46s oxmera %8.1f  onednn nchw %8.1f (%.2fx)  onednn blocked+reorders %8.1f (%.2fx, %zu reorders)\n",
                l.name, o, p, p / o, b, b / o,
                blocked.pre_fwd.size() + blocked.post_fwd.size() + blocked.pre_bwd.size() + blocked.post_bwd.size());
  }
  return 0;
}
