// The module API as libtorch / PyTorch users write it: multi-input and multi-output forward, AnyModule,
// ModuleList / ModuleDict, weight tying, state_dict, clone, parameter counting, printing, the Pair trap, and
// today's single-input user modules still compiling and working.
#include <oxmera/checkpoint.hpp>
#include <oxmera/io.hpp>
#include <oxmera/nn.hpp>
#include <oxmera/optim.hpp>

#include <sstream>
#include <tuple>

#include "test_util.hpp"

using namespace oxt;
namespace nn = oxmera::nn;
namespace F = oxmera::nn::functional;

namespace {

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}
bool same_values(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.to(DType::F64).to_vector<double>() == b.to(DType::F64).to_vector<double>();
}

// ---- today's style: overrides forward(const Tensor&) and name(), registers by value, keeps its own handles.
class OldStyleNet : public nn::Module {
 public:
  explicit OldStyleNet(Generator& g) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(3, 5, true, g));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(5, 2, true, g));
    scale = register_parameter("scale", ones({2}));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(fc1->forward(x).relu()) * scale; }
  std::string name() const override { return "OldStyleNet"; }
  std::shared_ptr<nn::Linear> fc1, fc2;
  Tensor scale;
};

// ---- new style: several inputs, several outputs, members registered by member.
class MaskedLinear : public nn::Cloneable<MaskedLinear> {
 public:
  MaskedLinear(int64_t in, int64_t out, Generator& g) {
    register_module("fc", &MaskedLinear::fc, std::make_shared<nn::Linear>(in, out, true, g));
  }
  Tensor forward(const Tensor& x, const Tensor& mask) { return fc->forward(x) * mask; }
  std::shared_ptr<nn::Linear> fc;
};

class SplitHalves : public nn::Cloneable<SplitHalves> {
 public:
  std::tuple<Tensor, Tensor> forward(Tensor x) {  // (const Tensor&) would be the virtual, which returns Tensor
    const int64_t h = x.shape()[1] / 2;
    return {x.slice(1, 0, h), x.slice(1, h, x.shape()[1])};
  }
};

class Scaled : public nn::Cloneable<Scaled> {
 public:
  Tensor forward(const Tensor& x, double factor, const std::string& mode) {
    return mode == "neg" ? x * -factor : x * factor;
  }
};

// Tensor -> Tensor without overriding Module::forward (by value, const).
class Doubler : public nn::Cloneable<Doubler> {
 public:
  Tensor forward(Tensor x) const { return x * 2.0; }
};

// Takes its argument by mutable reference.
class Accumulate : public nn::Cloneable<Accumulate> {
 public:
  Tensor forward(Tensor& acc, const Tensor& x) {
    acc = acc + x;
    return acc;
  }
};

// Weight tying: the decoder's weight is the embedding's.
class TiedLM : public nn::Cloneable<TiedLM> {
 public:
  TiedLM(int64_t vocab, int64_t dim, Generator& g) {
    register_module("embed", &TiedLM::embed, std::make_shared<nn::Embedding>(vocab, dim, g));
    register_module("decoder", &TiedLM::decoder, std::make_shared<nn::Linear>(dim, vocab, true, g));
    decoder->weight = embed->weight;  // the natural line; the registry follows the member
  }
  Tensor forward(const Tensor& tokens) { return decoder->forward(embed->forward(tokens)); }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Linear> decoder;
};

}  // namespace

TEST(PairTrap, AnIntegerMeansBothSides) {
  EXPECT_EQ(nn::Pair(3), (nn::Pair{3, 3}));
  nn::Conv2dOptions one{.padding = 1};
  EXPECT_EQ(one.padding, (nn::Pair{1, 1}));
  nn::Conv2d conv(1, 2, 3, {.padding = 1});
  EXPECT_EQ(conv.forward(rand({1, 1, 8, 8}, 1)).shape(), Shape({1, 2, 8, 8}));
  nn::Conv2d asym(1, 2, {3, 3}, {.padding = {1, 2}});
  EXPECT_EQ(asym.forward(rand({1, 1, 8, 8}, 1)).shape(), Shape({1, 2, 8, 10}));
  nn::Conv2d strided(1, 2, 3, {.stride = 2, .padding = 1, .dilation = 1});
  EXPECT_EQ(strided.forward(rand({1, 1, 8, 8}, 1)).shape(), Shape({1, 2, 4, 4}));
  EXPECT_EQ(nn::MaxPool2d(2).forward(rand({1, 1, 8, 8}, 1)).shape(), Shape({1, 1, 4, 4}));
  EXPECT_EQ(nn::AvgPool2d(3, 1, 1).forward(rand({1, 1, 8, 8}, 1)).shape(), Shape({1, 1, 8, 8}));
  EXPECT_EQ(F::max_pool2d(rand({1, 1, 8, 8}, 1), 2, 2, 1).shape(), Shape({1, 1, 5, 5}));
  EXPECT_EQ(F::conv2d(rand({1, 1, 8, 8}, 1), rand({2, 1, 3, 3}, 2), {}, 1, 1, 1).shape(), Shape({1, 2, 8, 8}));
}

TEST(Modules, TodaysSingleInputUserModulesStillWork) {
  Generator g(1);
  auto net = std::make_shared<OldStyleNet>(g);
  EXPECT_EQ(names_of(net->named_parameters()),
            (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  Tensor x = rand({4, 3}, 2);
  Tensor y = (*net)(x);
  EXPECT_EQ(y.shape(), Shape({4, 2}));
  // In a Sequential, with an optimizer.
  nn::Sequential seq{net, std::make_shared<nn::Tanh>()};
  optim::SGD opt(seq.parameters(), {.lr = 0.1});
  const auto before = net->fc1->weight.to_vector<float>();
  seq.forward(x).sum().backward();
  opt.step();
  EXPECT_NE(net->fc1->weight.to_vector<float>(), before);
  EXPECT_EQ(seq[0].name(), "OldStyleNet");
  EXPECT_EQ(net->num_parameters(), 3 * 5 + 5 + 5 * 2 + 2 + 2);
  // Value-registered: clone() refuses with a typed error rather than sharing silently.
  EXPECT_OXM_ERROR(net->clone(), NotImplemented, "OldStyleNet");
}

TEST(Modules, MultiInputAndMultiOutputDirectAndThroughAnyModule) {
  Generator g(3);
  auto ml = std::make_shared<MaskedLinear>(4, 3, g);
  Tensor x = rand({2, 4}, 4), mask = from_vector<float>({1, 0, 1, 0, 1, 1}, {2, 3});
  Tensor direct = ml->forward(x, mask);
  EXPECT_EQ(direct.to_vector<float>()[1], 0.0f);
  EXPECT_EQ(ml->name(), "MaskedLinear");  // the default name is the class name

  nn::AnyModule any(ml);
  EXPECT_EQ(any.signature(), "Tensor(const Tensor&, const Tensor&)");
  EXPECT_TRUE(same_values(any.forward(x, mask), direct));
  EXPECT_TRUE(same_values(any(x, mask), direct));
  EXPECT_EQ(&any.get<MaskedLinear>(), ml.get());
  EXPECT_OXM_ERROR(any.get<nn::Linear>(), InvalidArgument, "not a Linear");
  // Wrong calls: count, type, return type; and the single-tensor entry point.
  EXPECT_OXM_ERROR(any.forward(x), InvalidArgument,
                   "AnyModule(MaskedLinear)::forward: forward takes 2 argument(s), 1 given");
  EXPECT_OXM_ERROR(any.forward(x, 2.0), InvalidArgument, "argument 2 is double, forward takes const Tensor&");
  EXPECT_OXM_ERROR(any.forward(1.0, mask), InvalidArgument, "argument 1 is double, forward takes const Tensor&");
  EXPECT_OXM_ERROR((any.forward<std::tuple<Tensor, Tensor>>(x, mask)), InvalidArgument,
                   "returns Tensor, not std::tuple<Tensor, Tensor>");
  EXPECT_OXM_ERROR((*ml)(x), InvalidArgument, "MaskedLinear: forward(const Tensor&) is not defined");

  auto split = std::make_shared<SplitHalves>();
  nn::AnyModule anys(split);
  auto [a, b] = anys.forward<std::tuple<Tensor, Tensor>>(x);
  EXPECT_EQ(a.shape(), Shape({2, 2}));
  EXPECT_EQ(b.to_vector<float>(), x.slice(1, 2, 4).to_vector<float>());
  EXPECT_OXM_ERROR(anys.forward(x), InvalidArgument, "call forward<std::tuple<Tensor, Tensor>>");

  // Arithmetic arguments convert (int -> double), string literals to std::string; floating never to integer.
  nn::AnyModule sc(std::make_shared<Scaled>());
  EXPECT_EQ(sc.forward(x, 2, "neg").to_vector<float>(), (x * -2.0).to_vector<float>());
  EXPECT_EQ(sc.forward(x, 0.5f, std::string("pos")).to_vector<float>(), (x * 0.5).to_vector<float>());
  EXPECT_OXM_ERROR(sc.forward(x, 2, 3), InvalidArgument, "argument 3 is int, forward takes const std::string&");
  EXPECT_OXM_ERROR(nn::AnyModule().forward(x), InvalidArgument, "empty");

  // Sequential takes Tensor -> Tensor modules only, and says so when given another.
  nn::Sequential seq;
  EXPECT_OXM_ERROR(seq.push_back(ml), InvalidArgument,
                   "Sequential: module 0 (MaskedLinear) has forward Tensor(const Tensor&, const Tensor&)");
  EXPECT_OXM_ERROR(seq.push_back(nn::ModulePtr()), InvalidArgument, "null module");
  seq.push_back(std::make_shared<Doubler>());
  seq.push_back(std::make_shared<nn::ReLU>());
  EXPECT_EQ(seq.forward(x - 0.5).to_vector<float>(), ((x - 0.5) * 2.0).relu().to_vector<float>());
  EXPECT_EQ(seq.size(), 2u);
  EXPECT_EQ(seq.any(0).signature(), "Tensor(Tensor)");
}

TEST(Modules, AnyModuleMutableReferencesAndRegistrationErrors) {
  nn::AnyModule acc(std::make_shared<Accumulate>());
  Tensor total = zeros({2});
  acc.forward(total, ones({2}));
  acc.forward(total, ones({2}));
  EXPECT_EQ(total.to_vector<float>(), std::vector<float>({2, 2}));  // the caller's handle was updated
  const Tensor fixed = zeros({2});
  EXPECT_OXM_ERROR(acc.forward(fixed, ones({2})), InvalidArgument, "argument 1 is const but forward takes Tensor&");

  nn::Module m;
  EXPECT_OXM_ERROR(m.register_parameter("a.b", zeros({1})), InvalidArgument, "without '.'");
  EXPECT_OXM_ERROR(m.register_module("x", nn::ModulePtr()), InvalidArgument, "is null");
  // children() can be called again inside a loop over it (the view is refreshed in place).
  m.register_module("a", std::make_shared<nn::ReLU>());
  m.register_module("b", std::make_shared<nn::Tanh>());
  size_t seen = 0;
  for (const auto& [n, c] : m.children()) seen += m.children().size() + (c ? 1 : 0);
  EXPECT_EQ(seen, 6u);
}

TEST(Modules, ModuleListHoldsAnyForward) {
  Generator g(5);
  nn::ModuleList layers;
  for (int i = 0; i < 3; ++i) layers.push_back(std::make_shared<MaskedLinear>(4, 4, g));
  EXPECT_EQ(layers.size(), 3u);
  EXPECT_EQ(names_of(layers.named_parameters()), (std::vector<std::string>{"0.fc.weight", "0.fc.bias", "1.fc.weight",
                                                                           "1.fc.bias", "2.fc.weight", "2.fc.bias"}));
  Tensor x = rand({2, 4}, 6), mask = ones({2, 4});
  Tensor h = x, want = x;
  for (auto& layer : layers) h = layer.forward(h, mask);
  for (int i = 0; i < 3; ++i) want = layers[i].get<MaskedLinear>().forward(want, mask);
  EXPECT_TRUE(same_values(h, want));
  EXPECT_EQ(&layers[-1].get<MaskedLinear>(), &layers[2].get<MaskedLinear>());
  EXPECT_OXM_ERROR(layers[3], IndexOutOfBounds, "index 3 out of range for 3");
  EXPECT_OXM_ERROR(layers[0].forward(x), InvalidArgument, "forward takes 2 argument(s)");
  // insert renumbers; extend shares.
  auto relu = std::make_shared<nn::ReLU>();
  layers.insert(1, relu);
  EXPECT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers.children()[1].first, "1");
  EXPECT_EQ(layers.children()[1].second.get(), relu.get());
  EXPECT_EQ(layers.children()[3].first, "3");
  EXPECT_EQ(layers[1].forward(x * -1.0).to_vector<float>(), std::vector<float>(8, 0.0f));
  nn::ModuleList more{std::make_shared<nn::Tanh>()};
  more.extend(layers);
  EXPECT_EQ(more.size(), 5u);
  EXPECT_EQ(more.num_parameters(), layers.num_parameters());
  EXPECT_OXM_ERROR(more.forward(x), InvalidArgument, "ModuleList: forward(const Tensor&) is not defined");
}

TEST(Modules, ModuleDictKeepsInsertionOrder) {
  Generator g(7);
  auto enc = std::make_shared<nn::Linear>(4, 4, true, g);
  nn::ModuleDict heads{{"enc", enc}, {"mask", std::make_shared<MaskedLinear>(4, 2, g)}};
  heads.insert("act", std::make_shared<nn::ReLU>());
  EXPECT_EQ(heads.keys(), (std::vector<std::string>{"enc", "mask", "act"}));
  EXPECT_EQ(names_of(heads.named_parameters()),
            (std::vector<std::string>{"enc.weight", "enc.bias", "mask.fc.weight", "mask.fc.bias"}));
  Tensor x = rand({3, 4}, 8);
  EXPECT_TRUE(same_values(heads["enc"].forward(x), enc->forward(x)));
  EXPECT_EQ(heads["mask"].forward(x, ones({3, 2})).shape(), Shape({3, 2}));
  // Replacing a key keeps its position; update inserts or replaces; pop removes.
  heads.update({{"enc", std::make_shared<nn::Tanh>()}, {"extra", std::make_shared<nn::Sigmoid>()}});
  EXPECT_EQ(heads.keys(), (std::vector<std::string>{"enc", "mask", "act", "extra"}));
  EXPECT_EQ(heads["enc"]->name(), "Tanh");
  EXPECT_TRUE(heads.contains("act"));
  heads.pop("act");
  EXPECT_FALSE(heads.contains("act"));
  EXPECT_EQ(names_of(heads.named_parameters()), (std::vector<std::string>{"mask.fc.weight", "mask.fc.bias"}));
  EXPECT_OXM_ERROR(heads["nope"], InvalidArgument, "no key 'nope' (keys: 'enc', 'mask', 'extra')");
  EXPECT_OXM_ERROR(heads.insert("a.b", enc), InvalidArgument, "without '.'");
}

class ModulesIo : public oxt::TempDirTest {};

TEST_F(ModulesIo, WeightTyingIsOneParameterEverywhere) {
  Generator g(11);
  auto lm = std::make_shared<TiedLM>(6, 4, g);
  ASSERT_TRUE(lm->decoder->weight.is_same(lm->embed->weight));
  EXPECT_EQ(names_of(lm->named_parameters()), (std::vector<std::string>{"embed.weight", "decoder.bias"}));
  EXPECT_EQ(lm->parameters().size(), 2u);
  EXPECT_EQ(names_of(lm->named_parameters(false)),
            (std::vector<std::string>{"embed.weight", "decoder.weight", "decoder.bias"}));
  EXPECT_EQ(lm->state_dict().keys(), (std::vector<std::string>{"embed.weight", "decoder.weight", "decoder.bias"}));
  EXPECT_EQ(lm->state_dict_deduplicated().keys(), (std::vector<std::string>{"embed.weight", "decoder.bias"}));
  EXPECT_EQ(lm->num_parameters(), 6 * 4 + 6);

  // One SGD step: the shared tensor gets the sum of both uses' gradients, applied once.
  optim::SGD opt(lm->parameters(), {.lr = 0.5});
  const Tensor tokens = from_vector<int64_t>({0, 3, 5, 3}, {4});
  const auto w0 = lm->embed->weight.to_vector<float>();
  lm->forward(tokens).square().sum().backward();
  const auto grad = lm->embed->weight.grad().to_vector<float>();
  opt.step();
  const auto w1 = lm->embed->weight.to_vector<float>();
  ASSERT_EQ(w1.size(), w0.size());
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f * grad[i]) << i;
  EXPECT_TRUE(lm->decoder->weight.is_same(lm->embed->weight));

  // Save / load keeps it tied: one tensor in the file, loaded into the one shared tensor.
  const std::string p = path("tied.safetensors");
  nn::save(*lm, p);
  auto file = load_safetensors(p);
  std::vector<std::string> keys;
  for (const auto& [k, t] : file) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"decoder.bias", "embed.weight"}));
  Generator g2(99);
  auto fresh = std::make_shared<TiedLM>(6, 4, g2);
  nn::load(*fresh, p);
  EXPECT_TRUE(fresh->decoder->weight.is_same(fresh->embed->weight));
  EXPECT_TRUE(same_values(fresh->decoder->weight, lm->embed->weight));
  EXPECT_TRUE(same_values(fresh->forward(tokens), lm->forward(tokens)));
  // An untied model needs decoder.weight, which the file does not hold.
  Generator g3(5);
  auto untied = std::make_shared<TiedLM>(6, 4, g3);
  untied->decoder->weight = zeros({6, 4}).requires_grad_();
  EXPECT_OXM_ERROR(nn::load(*untied, p), Io, "decoder.weight");

  // A training checkpoint keeps it tied too; the optimizer holds one state for the shared tensor.
  {
    Generator gc(21);
    auto model = std::make_shared<TiedLM>(6, 4, gc);
    optim::Adam adam(model->parameters(), {.lr = 1e-2});
    model->forward(tokens).square().sum().backward();
    adam.step();
    const std::string ck = path("tied-ckpt.safetensors");
    save_checkpoint(ck, *model, adam, 1);
    Generator gd(22);
    auto resumed = std::make_shared<TiedLM>(6, 4, gd);
    optim::Adam adam2(resumed->parameters(), {.lr = 1e-2});
    EXPECT_EQ(load_checkpoint(ck, *resumed, adam2), 1);
    EXPECT_TRUE(resumed->decoder->weight.is_same(resumed->embed->weight));
    EXPECT_TRUE(same_values(resumed->embed->weight, model->embed->weight));
    for (auto* m : {model.get(), resumed.get()}) {
      m->zero_grad();
      m->forward(tokens).square().sum().backward();
    }
    adam.step();
    adam2.step();
    EXPECT_TRUE(same_values(resumed->embed->weight, model->embed->weight));  // identical second step
  }

  // The full state_dict (both names) loads too, strictly.
  auto again = std::make_shared<TiedLM>(6, 4, g2);
  again->load_state_dict(lm->state_dict());
  EXPECT_TRUE(same_values(again->embed->weight, lm->embed->weight));

  // Value-registered parameters are re-pointed by registering the name again.
  nn::Module holder;
  Tensor a = holder.register_parameter("w", zeros({2}));
  Tensor b = ones({2});
  holder.register_parameter("w", b);
  ASSERT_EQ(holder.parameters().size(), 1u);
  EXPECT_TRUE(holder.parameters()[0].is_same(b));
  (void)a;
}

TEST(Modules, StateDictRoundTripsAndStrictness) {
  Generator g(13);
  auto make = [&](uint64_t seed) {
    Generator gg(seed);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Conv2d>(1, 2, 3, nn::Conv2dOptions{.padding = 1}, gg));
    m->push_back(std::make_shared<nn::BatchNorm2d>(2));
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(32, 3, true, gg));
    return m;
  };
  auto src = make(1), dst = make(2);
  // torch's order: each module's parameters, then its buffers, then its children.
  EXPECT_EQ(src->state_dict().keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                      "1.num_batches_tracked", "3.weight", "3.bias"}));
  src->forward(rand({2, 1, 4, 4}, 3));  // running statistics move
  const auto handles = dst->parameters();
  const auto result = dst->load_state_dict(src->state_dict());
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  for (const auto& [k, t] : src->state_dict()) EXPECT_TRUE(same_values(dst->state_dict().at(k), t)) << k;
  const auto after = dst->parameters();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(after[i].is_same(handles[i]));  // in place

  // Strict: missing and unexpected keys are listed; nothing changes.
  nn::StateDict partial;
  for (const auto& [k, t] : src->state_dict())
    if (k != "3.bias") partial.emplace_back(k, t * 0.0);
  partial.emplace_back("4.weight", zeros({1}));
  auto fresh = make(3);
  const auto before = fresh->state_dict().at("0.weight").to_vector<float>();
  EXPECT_OXM_ERROR(fresh->load_state_dict(partial), InvalidArgument,
                   "1 missing key(s) ('3.bias') and 1 unexpected key(s) ('4.weight')");
  EXPECT_EQ(fresh->state_dict().at("0.weight").to_vector<float>(), before);
  // Non-strict: loads the rest and returns the lists.
  const auto lists = fresh->load_state_dict(partial, false);
  EXPECT_EQ(lists.missing_keys, (std::vector<std::string>{"3.bias"}));
  EXPECT_EQ(lists.unexpected_keys, (std::vector<std::string>{"4.weight"}));
  EXPECT_EQ(fresh->state_dict().at("0.weight").to_vector<float>(), std::vector<float>(18, 0.0f));
  // Shape mismatches are errors in both modes.
  nn::StateDict bad = src->state_dict();
  bad[0].second = zeros({2, 1, 2, 2});
  const auto kept = fresh->state_dict().at("3.weight").to_vector<float>();
  EXPECT_OXM_ERROR(fresh->load_state_dict(bad, false), ShapeMismatch, "'0.weight': [2, 1, 2, 2] given, [2, 1, 3, 3]");
  EXPECT_EQ(fresh->state_dict().at("3.weight").to_vector<float>(), kept);  // all or nothing
  // A map works (what load_safetensors returns), and f64 values convert to the parameters' f32.
  std::map<std::string, Tensor> as_map;
  for (const auto& [k, t] : src->state_dict()) as_map[k] = t.to(DType::F64);
  fresh->load_state_dict(as_map);
  EXPECT_TRUE(same_values(fresh->state_dict().at("3.weight"), src->state_dict().at("3.weight")));
  EXPECT_EQ(fresh->state_dict().at("3.weight").dtype(), DType::F32);
  EXPECT_OXM_ERROR(nn::StateDict().at("x"), InvalidArgument, "no key 'x'");
}

TEST(Modules, CloneIsDeepAndKeepsSharing) {
  Generator g(17);
  auto seq = std::make_shared<nn::Sequential>(
      nn::Sequential{std::make_shared<nn::Linear>(3, 4, true, g), std::make_shared<nn::Tanh>()});
  seq->eval();
  auto copy = nn::clone(seq);
  EXPECT_FALSE(copy->is_training());
  const auto p = seq->named_parameters(), q = copy->named_parameters();
  ASSERT_EQ(names_of(p), names_of(q));
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_FALSE(p[i].second.is_same(q[i].second));
    EXPECT_TRUE(same_values(p[i].second, q[i].second));
    EXPECT_TRUE(q[i].second.requires_grad());
  }
  Tensor x = rand({2, 3}, 18);
  EXPECT_TRUE(same_values(copy->forward(x), seq->forward(x)));
  {
    NoGradGuard ng;
    copy->parameters()[0].mul_(0.0);
  }
  EXPECT_FALSE(same_values(copy->forward(x), seq->forward(x)));  // the clone's forward uses the clone's tensors
  EXPECT_NE(seq->parameters()[0].to_vector<float>(), std::vector<float>(12, 0.0f));

  // Tied weights stay tied in the clone, and typed members point into the clone.
  auto lm = std::make_shared<TiedLM>(5, 3, g);
  auto lm2 = nn::clone(lm);
  EXPECT_NE(lm2->embed.get(), lm->embed.get());
  EXPECT_TRUE(lm2->decoder->weight.is_same(lm2->embed->weight));
  EXPECT_FALSE(lm2->embed->weight.is_same(lm->embed->weight));
  EXPECT_EQ(lm2->parameters().size(), 2u);
  EXPECT_EQ(lm2->children()[0].second.get(), lm2->embed.get());

  // A ModuleList of multi-input modules: the clone's AnyModules call the clone's modules.
  nn::ModuleList list{std::make_shared<MaskedLinear>(2, 2, g)};
  auto list2 = std::static_pointer_cast<nn::ModuleList>(list.clone());
  Tensor m = ones({1, 2}), y = rand({1, 2}, 19);
  EXPECT_TRUE(same_values((*list2)[0].forward(y, m), list[0].forward(y, m)));
  EXPECT_NE(&(*list2)[0].get<MaskedLinear>(), &list[0].get<MaskedLinear>());

  // A module shared by two parents stays one module in the clone.
  auto shared = std::make_shared<nn::Linear>(2, 2, true, g);
  nn::Module root;
  root.register_module("a", shared);
  root.register_module("b", shared);
  auto root2 = root.clone();
  EXPECT_EQ(root2->children()[0].second.get(), root2->children()[1].second.get());
  EXPECT_NE(root2->children()[0].second.get(), shared.get());
  EXPECT_EQ(root2->parameters().size(), 2u);
}

TEST(Modules, CountsParameters) {
  Generator g(19);
  nn::Linear lin(4, 2, true, g);
  EXPECT_EQ(lin.num_parameters(), 10);
  EXPECT_EQ(nn::parameter_count(lin), 10);
  lin.bias.requires_grad_(false);
  EXPECT_EQ(nn::parameter_count(lin, /*trainable_only=*/true), 8);
  nn::Linear nobias(4, 2, false, g);
  EXPECT_EQ(nobias.num_parameters(), 8);
  EXPECT_EQ(names_of(nobias.named_parameters()), (std::vector<std::string>{"weight"}));
}

TEST(Modules, PrintsLikeTorch) {
  Generator g(23);
  nn::Sequential net{std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}, g),
                     std::make_shared<nn::BatchNorm2d>(4),
                     std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::MaxPool2d>(2),
                     std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(64, 10, false, g),
                     std::make_shared<nn::Dropout>(0.25),
                     std::make_shared<nn::LayerNorm>(Shape{10})};
  std::ostringstream os;
  os << net;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "  (1): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)\n"
            "  (2): ReLU()\n"
            "  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=false)\n"
            "  (4): Flatten(start_dim=1, end_dim=-1)\n"
            "  (5): Linear(in_features=64, out_features=10, bias=false)\n"
            "  (6): Dropout(p=0.25, inplace=false)\n"
            "  (7): LayerNorm((10,), eps=1e-05, elementwise_affine=true)\n"
            ")");
  nn::Module root;
  root.register_module("proj", std::make_shared<nn::Linear>(4, 4, true, g));
  root.register_module(
      "heads", std::make_shared<nn::ModuleDict>(nn::ModuleDict{{"a", std::make_shared<nn::Linear>(4, 2, true, g)},
                                                               {"b", std::make_shared<nn::Embedding>(10, 3, g)}}));
  EXPECT_EQ(root.repr(),
            "Module(\n"
            "  (proj): Linear(in_features=4, out_features=4, bias=true)\n"
            "  (heads): ModuleDict(\n"
            "    (a): Linear(in_features=4, out_features=2, bias=true)\n"
            "    (b): Embedding(10, 3)\n"
            "  )\n"
            ")");
  EXPECT_EQ(nn::Conv2d(2, 4, {3, 1}, {.stride = 2, .dilation = {1, 2}, .groups = 2, .bias = false}, g).repr(),
            "Conv2d(2, 4, kernel_size=(3, 1), stride=(2, 2), dilation=(1, 2), groups=2, bias=false)");
  EXPECT_EQ(nn::MaxPool2d({2, 3}, {1, 1}).repr(),
            "MaxPool2d(kernel_size=(2, 3), stride=1, padding=0, dilation=1, ceil_mode=false)");
  EXPECT_EQ(nn::AvgPool2d({2, 3}).repr(), "AvgPool2d(kernel_size=(2, 3), stride=(2, 3), padding=0)");
  EXPECT_EQ(nn::ModuleList().repr(), "ModuleList()");
}

TEST(Modules, NamedModulesAndApplyWalkTheTreeAsTorch) {
  auto shared = std::make_shared<nn::Linear>(4, 4);
  nn::Sequential seq;
  seq.push_back(shared);
  seq.push_back(nn::Tanh());
  nn::Sequential inner;
  inner.push_back(nn::Linear(4, 2));
  seq.push_back(inner);
  seq.push_back(shared);  // the same module again: listed once, under its first name
  std::vector<std::string> names;
  for (auto& [n, m] : seq.named_modules()) names.push_back(n + ":" + m->name());
  EXPECT_EQ(names, (std::vector<std::string>{":Sequential", "0:Linear", "1:Tanh", "2:Sequential", "2.0:Linear"}));
  EXPECT_EQ(seq.modules().size(), 5u);
  // apply: children first, then self; used to initialise by type.
  std::vector<std::string> order;
  seq.apply([&](nn::Module& m) {
    order.push_back(m.name());
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard ng;
      lin->weight.fill_(0.5);
    }
  });
  EXPECT_EQ(order.back(), "Sequential");
  EXPECT_EQ(order.size(), 6u);  // the shared Linear is visited under both positions, as torch's apply
  EXPECT_EQ(shared->weight.sum().item<float>(), 8.0f);
}

TEST(Modules, BatchNormCountsBatchesInItsStateDictAsTorch) {
  nn::BatchNorm2d bn(3);
  std::vector<std::string> keys;
  for (auto& [k, t] : bn.state_dict()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  Tensor x = randn({4, 3, 2, 2}, 5);
  bn(x);
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::I64);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  bn.eval();
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  nn::BatchNorm2d untracked(3, 1e-5, 0.1, true, false);
  EXPECT_EQ(untracked.state_dict().size(), 2u);
}
