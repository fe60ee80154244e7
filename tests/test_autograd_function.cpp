// Autograd for research (issue #14, part): custom autograd::Function<Derived> as libtorch users write them,
// module forward pre/post hooks, and anomaly mode.
#include <memory>

#include "autograd/node.hpp"
#include "tensor/tensor_impl.hpp"
#include "test_util.hpp"

using namespace oxmera;
using autograd::AutogradContext;
using autograd::variable_list;
using oxt::values;

namespace {

Tensor leaf(std::vector<double> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector(v, shape).requires_grad_();
}

// exp that saves its output (the classic case: the node must not own a tensor whose grad_fn is the node).
struct MyExp : autograd::Function<MyExp> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor y = x.exp();
    ctx->save_for_backward({y});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Tensor y = ctx->get_saved_variables()[0];
    return {g[0] * y};
  }
};

// f(a, b, k) = k a b + a, with a double passed through (its gradient position holds an undefined tensor).
struct MulAdd : autograd::Function<MulAdd> {
  static constexpr const char* name = "MulAdd";
  static Tensor forward(AutogradContext* ctx, Tensor a, Tensor b, double k) {
    ctx->save_for_backward({a, b});
    ctx->saved_data["k"] = k;
    return a * b * k + a;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto s = ctx->get_saved_variables();
    const double k = ctx->saved_data["k"].toDouble();
    Tensor ga = ctx->needs_input_grad(0) ? g[0] * s[1] * k + g[0] : Tensor();
    Tensor gb = ctx->needs_input_grad(1) ? g[0] * s[0] * k : Tensor();  // a's shape: summed back to b's
    return {ga, gb, Tensor()};
  }
};

// Three outputs: y = x * mask (differentiable), the mask (marked non-differentiable) and argmax (i64, never
// differentiable). backward records what it received.
struct MaskedWithIndex : autograd::Function<MaskedWithIndex> {
  static inline std::vector<std::vector<double>> seen;  // the gradients backward received
  static variable_list forward(AutogradContext* ctx, const Tensor& x) {
    Tensor mask = x.gt(0.0);
    Tensor idx = x.argmax(0);
    ctx->mark_non_differentiable({mask});
    ctx->save_for_backward({mask});
    return {x * mask, mask, idx};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    seen.clear();
    for (const Tensor& t : g) seen.push_back(t.defined() ? values(t) : std::vector<double>{-1});
    return {g[0] * ctx->get_saved_variables()[0]};
  }
};

// Records needs_input_grad in forward and in backward.
struct NeedsGrad : autograd::Function<NeedsGrad> {
  static inline std::vector<bool> in_forward, in_backward;
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    in_forward = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    return a * b;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    in_backward = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    return {g[0], g[0]};  // a gradient for an input that needs none is dropped
  }
};

// Returns its input unchanged: the output must be a new tensor (the input, a leaf, keeps no history).
struct Identity : autograd::Function<Identity> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0] * 3.0}; }
};

struct WrongCount : autograd::Function<WrongCount> {
  static constexpr const char* name = "WrongCount";
  static Tensor forward(AutogradContext*, const Tensor& x, double k) { return x * k; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }  // the double's is missing
};

struct WrongShape : autograd::Function<WrongShape> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 2.0; }
  static variable_list backward(AutogradContext*, variable_list) { return {zeros({5}, DType::F64)}; }
};

struct GradForDouble : autograd::Function<GradForDouble> {
  static constexpr const char* name = "GradForDouble";
  static Tensor forward(AutogradContext*, const Tensor& x, double k) { return x * k; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], g[0]}; }
};

// Keeps an intermediate alive only through save_for_backward, and a token in saved_data.
struct SavesAux : autograd::Function<SavesAux> {
  static inline Tensor aux;  // a second handle to the saved intermediate, to observe its reference count
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    aux = x * 2.0;
    ctx->save_for_backward({aux});
    return x * x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {g[0] * ctx->get_saved_variables()[0]};  // 2x
  }
};

struct NanGrad : autograd::Function<NanGrad> {
  static constexpr const char* name = "NanGrad";
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 1.0; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0] * NAN}; }
};

// Saves its output and keeps a token in saved_data (which lives as long as the node).
struct Keeper : autograd::Function<Keeper> {
  static inline std::shared_ptr<int> t;
  static Tensor forward(AutogradContext* ctx, const Tensor& v) {
    Tensor y = v.exp();
    ctx->save_for_backward({y});
    ctx->saved_data["token"] = t;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {g[0] * ctx->get_saved_variables()[0]};
  }
};

int32_t refs(const Tensor& t) { return t.impl()->refcount.load(); }

}  // namespace

TEST(AutogradFunction, CustomExpSavesItsOutput) {
  Tensor x = leaf({-1.0, 0.0, 0.5, 2.0});
  Tensor y = MyExp::apply(x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_NE(y.grad_fn_name().find("MyExp"), std::string::npos) << y.grad_fn_name();
  oxt::expect_close(values(y), values(x.detach().exp()), 0, 0, "forward");
  (y * 2.0).sum().backward();
  std::vector<double> want = values(x.detach().exp() * 2.0);
  oxt::expect_close(values(x.grad()), want, 1e-15, 0, "d/dx 2 exp(x)");
  // In a chain between ordinary ops.
  Tensor z = leaf({0.3, -0.2});
  MyExp::apply(z * 2.0).sum().backward();
  oxt::expect_close(values(z.grad()), values((z.detach() * 2.0).exp() * 2.0), 1e-15, 0, "d/dz exp(2z)");
}

TEST(AutogradFunction, SavedOutputMakesNoReferenceCycle) {
  // A token in saved_data lives as long as the node: when the output goes, the node must go too.
  auto token = std::make_shared<int>(7);
  Tensor x = leaf({1.0, 2.0});
  {
    Keeper::t = token;
    Tensor y = Keeper::apply(x);
    Keeper::t.reset();
    EXPECT_EQ(token.use_count(), 2);  // here and in the node's context
  }
  EXPECT_EQ(token.use_count(), 1) << "the node outlived its only output: a reference cycle";
}

TEST(AutogradFunction, TwoTensorInputsAndADouble) {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({0.5, -1, 2}, {1, 3});  // broadcast: backward's gradient of a's shape is summed back
  Tensor y = MulAdd::apply(a, b, 3.0);
  EXPECT_EQ(y.grad_fn_name(), "MulAdd");
  oxt::expect_close(values(y), values(a.detach() * b.detach() * 3.0 + a.detach()), 0, 0, "forward");
  y.sum().backward();
  oxt::expect_close(values(a.grad()), {2.5, -2, 7, 2.5, -2, 7}, 1e-15, 0, "da = 3b + 1");
  oxt::expect_close(values(b.grad()), {15, 21, 27}, 1e-15, 0, "db = 3 sum_rows(a)");
  EXPECT_EQ(b.grad().shape(), (Shape{1, 3}));
}

TEST(AutogradFunction, GradcheckPassesOnCustomFunctions) {
  Tensor a = leaf({0.3, -0.7, 1.1, 0.2, -1.5, 0.9}, {2, 3});
  Tensor b = leaf({0.5, -1.2, 2.0}, {1, 3});
  auto r = gradcheck([](const std::vector<Tensor>& in) { return MulAdd::apply(in[0], in[1], -1.5); }, {a, b});
  EXPECT_TRUE(r.ok) << r.message;
  auto r2 = gradcheck([](const std::vector<Tensor>& in) { return MyExp::apply(in[0] * 0.5).sin(); }, {a});
  EXPECT_TRUE(r2.ok) << r2.message;
  // gradcheck can fail: a backward with the wrong factor is caught.
  struct BadExp : autograd::Function<BadExp> {
    static Tensor forward(AutogradContext*, const Tensor& x) { return x.exp(); }
    static variable_list backward(AutogradContext*, variable_list g) { return {g[0] * 1.01}; }
  };
  auto bad = gradcheck([](const std::vector<Tensor>& in) { return BadExp::apply(in[0]); }, {a});
  EXPECT_FALSE(bad.ok);
}

TEST(AutogradFunction, NonDifferentiableOutputs) {
  Tensor x = leaf({-1.0, 3.0, 0.5, -2.0});
  variable_list out = MaskedWithIndex::apply(x);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad()) << "marked non-differentiable";
  EXPECT_FALSE(out[2].requires_grad()) << "an i64 output is never differentiable";
  EXPECT_EQ(out[2].item<int64_t>(), 1);
  EXPECT_EQ(values(out[1]), (std::vector<double>{0, 1, 1, 0}));
  out[0].sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 1, 0}));
  // Outputs no gradient reached arrive as zeros (materialized, torch's default).
  ASSERT_EQ(MaskedWithIndex::seen.size(), 3u);
  EXPECT_EQ(MaskedWithIndex::seen[0], (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(MaskedWithIndex::seen[1], (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(MaskedWithIndex::seen[2], (std::vector<double>{0}));
}

TEST(AutogradFunction, NeedsInputGrad) {
  Tensor a = leaf({1, 2});
  Tensor b = from_vector(std::vector<double>{3, 4}, {2});  // no grad
  Tensor y = NeedsGrad::apply(a, b);
  EXPECT_EQ(NeedsGrad::in_forward, (std::vector<bool>{true, false}));
  y.sum().backward();
  EXPECT_EQ(NeedsGrad::in_backward, (std::vector<bool>{true, false}));
  EXPECT_EQ(values(a.grad()), (std::vector<double>{1, 1}));
  EXPECT_FALSE(b.grad().defined());
  // Under NoGradGuard nothing needs a gradient and nothing is recorded.
  {
    NoGradGuard ng;
    Tensor z = NeedsGrad::apply(a, b);
    EXPECT_EQ(NeedsGrad::in_forward, (std::vector<bool>{false, false}));
    EXPECT_FALSE(z.requires_grad());
  }
  // Nor when no input requires grad.
  EXPECT_FALSE(NeedsGrad::apply(b, b).requires_grad());
}

TEST(AutogradFunction, OutputThatIsAnInputGetsItsOwnHistory) {
  Tensor x = leaf({1, 2});
  Tensor y = Identity::apply(x);
  EXPECT_TRUE(x.is_leaf()) << "the input must keep no history";
  EXPECT_FALSE(y.is_leaf());
  EXPECT_NE(y.impl(), x.impl());
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3, 3}));
}

TEST(AutogradFunction, WrongGradientsAreTypedErrors) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_OXM_ERROR(WrongCount::apply(x, 2.0).sum().backward(), InvalidArgument,
                   "WrongCount::backward returned 1 gradient(s); expected 2");
  EXPECT_OXM_ERROR(WrongShape::apply(x).sum().backward(), InvalidArgument,
                   "WrongShape::backward returned a gradient of shape");
  EXPECT_OXM_ERROR(GradForDouble::apply(x, 2.0).sum().backward(), InvalidArgument,
                   "GradForDouble::backward returned a defined gradient at position 1");
}

TEST(AutogradFunction, SavedTensorsAreReleasedWithoutRetainGraph) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = SavesAux::apply(x).sum();
  EXPECT_EQ(refs(SavesAux::aux), 2);  // ours and the node's
  y.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(refs(SavesAux::aux), 2) << "retain_graph keeps what the node saved";
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{4, 8, 12}));  // 2x, twice
  EXPECT_EQ(refs(SavesAux::aux), 1) << "a backward without retain_graph frees what the node saved";
  EXPECT_OXM_ERROR(y.backward(), InvalidArgument, "SavesAux");
  SavesAux::aux = Tensor();
  // A function that saved nothing may be run backward again (accumulating), as in torch.
  Tensor z = leaf({1, 2});
  Tensor w = Identity::apply(z).sum();
  w.backward();
  w.backward();
  EXPECT_EQ(values(z.grad()), (std::vector<double>{6, 6}));
}

TEST(AutogradFunction, BackwardIsRecordedWhenTheEngineRunsItWithGradModeOn) {
  // The node does not turn grad mode off around the user's backward: under create_graph (grad mode on) its
  // ops are recorded. Called directly here, as the engine will.
  Tensor x = leaf({0.5, 1.5});
  Tensor y = MyExp::apply(x);
  detail::Node* node = y.impl()->grad_fn.get();
  ASSERT_NE(node, nullptr);
  Tensor g = ones({2}, DType::F64).requires_grad_();
  Tensor gin[1];
  node->apply(&g, gin);
  EXPECT_TRUE(gin[0].requires_grad()) << "grad mode on: the backward's ops are recorded";
  oxt::expect_close(values(gin[0]), values(x.detach().exp()), 1e-15, 0, "g * exp(x)");
  {
    NoGradGuard ng;
    node->apply(&g, gin);
    EXPECT_FALSE(gin[0].requires_grad());
  }
}

// Two outputs (sin x, cos x), saving the second: under create_graph it must come back as output 1, not 0.
struct SinCos : autograd::Function<SinCos> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x) {
    Tensor s = x.sin(), c = x.cos();
    ctx->save_for_backward({c, s});
    return {s, c};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    return {g[0] * saved[0] - g[1] * saved[1]};
  }
};

TEST(AutogradFunction, GradgradcheckOfFunctionsWhoseBackwardIsBuiltFromOps) {
  Tensor x = from_vector<double>({0.3, -0.7, 1.2}, Shape{3}).requires_grad_(true);
  Tensor b = from_vector<double>({0.5, 0.2, -0.4}, Shape{3}).requires_grad_(true);
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& v) { return MyExp::apply(v[0] * 0.5); }, {x}).ok);
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& v) { return MulAdd::apply(v[0], v[1], 1.5); }, {x, b}).ok);
  auto sincos = [](const std::vector<Tensor>& v) {
    auto o = SinCos::apply(v[0]);
    return o[0] * 2.0 + o[1] * o[1] * o[1];
  };
  GradcheckResult r = gradgradcheck(sincos, {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(AutogradFunction, SavedData) {
  autograd::SavedValue d = 2.5, i = 7, s = "name", t = ones({2});
  EXPECT_EQ(d.toDouble(), 2.5);
  EXPECT_EQ(i.toInt(), 7);
  EXPECT_EQ(i.toDouble(), 7.0);
  EXPECT_EQ(s.toStringRef(), "name");
  EXPECT_EQ(values(t.toTensor()), (std::vector<double>{1, 1}));
  EXPECT_OXM_ERROR(d.toInt(), InvalidArgument, "holds double");
  EXPECT_OXM_ERROR(s.toDouble(), InvalidArgument, "read as double");
  EXPECT_TRUE(autograd::SavedValue().isNone());
  std::vector<int64_t> dims{1, 2};
  autograd::SavedValue v = dims;
  EXPECT_EQ(v.get<std::vector<int64_t>>(), dims);
}

// ---------------------------------------------------------------- anomaly mode
TEST(AutogradAnomaly, NamesTheNodeThatProducedNaNOrInf) {
  EXPECT_FALSE(autograd::is_anomaly_enabled());
  {
    Tensor x = leaf({0.0, 1.0});
    x.log().sum().backward();  // off: inf flows into .grad silently
    EXPECT_TRUE(std::isinf(values(x.grad())[0]));
  }
  {
    autograd::DetectAnomalyGuard guard;
    EXPECT_TRUE(autograd::is_anomaly_enabled());
    Tensor x = leaf({0.0, 1.0});
    EXPECT_OXM_ERROR(x.log().sum().backward(), InvalidArgument, "backward of 'log' returned infinity");
    Tensor z = leaf({1.0, 2.0});
    EXPECT_OXM_ERROR((NanGrad::apply(z) * 2.0).sum().backward(), InvalidArgument, "backward of 'NanGrad' returned NaN");
    // Finite gradients pass.
    Tensor w = leaf({1.0, 2.0});
    (w.log() * w).sum().backward();
    EXPECT_TRUE(w.grad().defined());
  }
  EXPECT_FALSE(autograd::is_anomaly_enabled());
  autograd::set_detect_anomaly(true);
  EXPECT_TRUE(autograd::is_anomaly_enabled());
  autograd::set_detect_anomaly(false);
}

// ---------------------------------------------------------------- module forward hooks
namespace {
// A user module written the ordinary way (overrides forward(const Tensor&)).
struct Triple : nn::Module {
  int calls = 0;
  Tensor forward(const Tensor& x) override {
    ++calls;
    return x * 3.0;
  }
};
}  // namespace

TEST(ModuleHooks, PreHookScalesTheInputPostHooksObserveAndReplace) {
  auto m = std::make_shared<Triple>();
  Tensor x = from_vector(std::vector<double>{1, 2}, {2});
  EXPECT_FALSE(m->has_forward_hooks());
  nn::ModuleHookHandle pre = m->register_forward_pre_hook([](nn::Module&, const Tensor& in) { return in * 2.0; });
  std::vector<double> seen_in, seen_out;
  nn::Module* seen_module = nullptr;
  nn::ModuleHookHandle observe =
      m->register_forward_hook([&](nn::Module& mod, const Tensor& in, const Tensor& out) {  // returns nothing
        seen_module = &mod;
        seen_in = values(in);
        seen_out = values(out);
      });
  EXPECT_TRUE(m->has_forward_hooks());
  EXPECT_EQ(values((*m)(x)), (std::vector<double>{6, 12}));
  EXPECT_EQ(seen_module, m.get());
  EXPECT_EQ(seen_in, (std::vector<double>{2, 4})) << "the forward hook sees the input forward received";
  EXPECT_EQ(seen_out, (std::vector<double>{6, 12}));
  nn::ModuleHookHandle replace =
      m->register_forward_hook([](nn::Module&, const Tensor&, const Tensor& out) { return out + 1.0; });
  EXPECT_EQ(values((*m)(x)), (std::vector<double>{7, 13}));
  // A pre-hook returning an undefined tensor keeps the input.
  nn::ModuleHookHandle keep = m->register_forward_pre_hook([](nn::Module&, const Tensor&) { return Tensor(); });
  EXPECT_EQ(values((*m)(x)), (std::vector<double>{7, 13}));
  // Removal.
  EXPECT_TRUE(pre.active());
  pre.remove();
  EXPECT_FALSE(pre.active());
  pre.remove();  // twice is fine
  EXPECT_EQ(values((*m)(x)), (std::vector<double>{4, 7}));
  replace.remove();
  observe.remove();
  keep.remove();
  EXPECT_FALSE(m->has_forward_hooks());
  EXPECT_EQ(values((*m)(x)), (std::vector<double>{3, 6}));
  // Calling forward directly skips hooks (as in torch).
  auto h = m->register_forward_pre_hook([](nn::Module&, const Tensor& in) { return in * 0.0; });
  EXPECT_EQ(values(m->forward(x)), (std::vector<double>{3, 6}));
  EXPECT_EQ(values((*m)(x)), (std::vector<double>{0, 0}));
  h.remove();
  // Gradients flow through what hooks return.
  Tensor p = from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  auto sq = m->register_forward_hook([](nn::Module&, const Tensor&, const Tensor& out) { return out * out; });
  (*m)(p).sum().backward();
  EXPECT_EQ(values(p.grad()), (std::vector<double>{18, 36}));  // d/dp (3p)^2
  sq.remove();
}

TEST(ModuleHooks, HooksOnAChildInsideSequentialRun) {
  auto a = std::make_shared<Triple>();
  auto b = std::make_shared<Triple>();
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{a, b});
  Tensor x = from_vector(std::vector<double>{1}, {1});
  int pre_calls = 0;
  auto h1 = b->register_forward_pre_hook([&](nn::Module&, const Tensor& in) {
    ++pre_calls;
    EXPECT_EQ(values(in), (std::vector<double>{30})) << "b receives what a's forward hook returned";
    return in + 1.0;
  });
  auto h2 = a->register_forward_hook([](nn::Module&, const Tensor&, const Tensor& out) { return out * 10.0; });
  EXPECT_EQ(values(seq->forward(x)), (std::vector<double>{(30 + 1) * 3}));
  EXPECT_EQ(pre_calls, 1);
  // A hook on the container runs around the whole chain.
  auto h3 = seq->register_forward_hook([](nn::Module&, const Tensor&, const Tensor& out) { return -out; });
  EXPECT_EQ(values((*seq)(x)), (std::vector<double>{-93}));
  h1.remove();
  h2.remove();
  h3.remove();
  EXPECT_EQ(values((*seq)(x)), (std::vector<double>{9}));
  // AnyModule runs them too.
  nn::AnyModule any(a);
  auto h4 = a->register_forward_pre_hook([](nn::Module&, const Tensor& in) { return in * 2.0; });
  EXPECT_EQ(values(any.forward(x)), (std::vector<double>{6}));
  h4.remove();
  EXPECT_EQ(values(any.forward(x)), (std::vector<double>{3}));
}

TEST(ModuleHooks, CloneCopiesHooksIntoItsOwnList) {
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{std::make_shared<nn::ReLU>()});
  auto h = seq->register_forward_hook([](nn::Module&, const Tensor&, const Tensor& out) { return out + 1.0; });
  auto copy = nn::clone(seq);
  Tensor x = from_vector(std::vector<float>{-1, 2}, {2});
  EXPECT_EQ(values((*copy)(x)), (std::vector<double>{1, 3}));
  h.remove();  // the original's
  EXPECT_EQ(values((*seq)(x)), (std::vector<double>{0, 2}));
  EXPECT_EQ(values((*copy)(x)), (std::vector<double>{1, 3}));
}
