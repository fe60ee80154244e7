#include "oxmera/checkpoint.hpp"

#include <bit>
#include <set>
#include <unordered_map>
#include <utility>

#include "oxmera/autograd.hpp"
#include "oxmera/io.hpp"
#include "oxmera/nn/layers.hpp"

namespace oxmera {
namespace {

constexpr const char* kFormatKey = "oxmera.format";
constexpr const char* kFormat = "checkpoint/1";
constexpr const char* kOptimizerKey = "oxmera.optimizer";
constexpr const char* kReservedPrefix = "oxmera.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// What nn::save writes: state_dict() with each tensor once, under its first name (a tied weight once).
std::vector<std::pair<std::string, Tensor>> module_tensors(const nn::Module& m) {
  const nn::StateDict sd = m.state_dict_deduplicated();
  return {sd.begin(), sd.end()};
}

// "'a', 'b', 'c' and 2 more"
std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 5);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

struct PendingCopy {
  Tensor dst, src;  // src already on dst's device, same dtype and shape
};

// Checks the file's tensors under `prefix` against every parameter and buffer of `m`; returns the copies to
// make. Changes nothing.
// Checks the file's tensors under `prefix` against every parameter and buffer of `m`; returns the copies to
// make. Changes nothing. A tensor shared under several names (weight tying) needs one of them in the file
// (nn::save writes the first); strict mode accepts any of its names.
std::vector<PendingCopy> plan_module_load(const nn::Module& m, const std::map<std::string, Tensor>& file,
                                          const std::string& prefix, bool strict, const std::string& ctx) {
  auto all = m.named_parameters(false);
  for (auto& b : m.named_buffers(false)) all.push_back(std::move(b));
  std::set<std::string> known;
  std::unordered_map<const void*, std::vector<std::string>> names_of;
  std::vector<std::pair<std::string, Tensor>> wanted;  // each tensor once
  for (const auto& [name, t] : all) {
    known.insert(prefix + name);
    auto& names = names_of[t.impl()];
    if (names.empty()) wanted.emplace_back(name, t);
    names.push_back(name);
  }
  std::vector<std::string> missing, unexpected, keys;
  for (const auto& [name, t] : wanted) {
    std::string found;
    for (const auto& alias : names_of[t.impl()])
      if (found.empty() && file.count(prefix + alias)) found = prefix + alias;
    if (found.empty()) missing.push_back(prefix + name);
    keys.push_back(found);
  }
  OXM_CHECK(missing.empty(), Io, ctx, ": the file lacks ", missing.size(),
            " tensor(s) the module needs: ", name_list(missing));
  if (strict) {
    for (const auto& [key, t] : file)
      if (starts_with(key, prefix) && !known.count(key)) unexpected.push_back(key);
    OXM_CHECK(unexpected.empty(), Io, ctx, ": the file holds ", unexpected.size(),
              " tensor(s) the module does not have: ", name_list(unexpected), " (pass strict = false to ignore them)");
  }
  std::vector<PendingCopy> out;
  out.reserve(wanted.size());
  NoGradGuard no_grad;
  for (size_t i = 0; i < wanted.size(); ++i) {
    const std::string& key = keys[i];
    const Tensor& dst = wanted[i].second;
    const Tensor& src = file.at(key);
    OXM_CHECK(src.dtype() == dst.dtype(), DTypeMismatch, ctx, ": tensor '", key, "' has dtype ", src.dtype(),
              " in the file but ", dst.dtype(), " in the module");
    OXM_CHECK(src.shape() == dst.shape(), ShapeMismatch, ctx, ": tensor '", key, "' has shape ", src.shape(),
              " in the file but ", dst.shape(), " in the module");
    out.push_back({dst, src.device() == dst.device() ? src : src.to(dst.device())});
  }
  return out;
}

void apply(const std::vector<PendingCopy>& copies) {
  NoGradGuard no_grad;
  for (const auto& c : copies) {
    Tensor dst = c.dst;
    dst.copy_(c.src);
  }
}

// Every nn::Dropout inside `m` (m included), keyed "rng.model[.<path>]".
template <class M, class D>
void collect_dropouts(M& m, const std::string& path, std::vector<std::pair<std::string, D*>>& out) {
  if (auto* d = dynamic_cast<D*>(&m)) out.emplace_back(path.empty() ? "rng.model" : "rng.model." + path, d);
  for (const auto& [n, child] : m.children()) {
    M& c = *child;
    collect_dropouts<M, D>(c, path.empty() ? n : path + "." + n, out);
  }
}

Tensor encode_generator(const Generator& g) {
  const Generator::State st = g.state();
  std::vector<int64_t> v(6);
  for (int i = 0; i < 4; ++i) v[i] = std::bit_cast<int64_t>(st.s[i]);
  v[4] = std::bit_cast<int64_t>(st.cached_normal);
  v[5] = st.has_cached ? 1 : 0;
  return from_vector<int64_t>(v, Shape{6});
}

Generator::State decode_generator(const Tensor& t, const std::string& key, const std::string& ctx) {
  OXM_CHECK(t.dtype() == DType::I64, DTypeMismatch, ctx, ": generator state '", key, "' must be i64, got ", t.dtype());
  OXM_CHECK(t.shape() == Shape{6}, ShapeMismatch, ctx, ": generator state '", key, "' must have shape [6], got ",
            t.shape());
  const auto v = t.to(Device::cpu()).to_vector<int64_t>();
  Generator::State st{};
  for (int i = 0; i < 4; ++i) st.s[i] = std::bit_cast<uint64_t>(v[i]);
  st.cached_normal = std::bit_cast<double>(v[4]);
  OXM_CHECK(v[5] == 0 || v[5] == 1, Io, ctx, ": generator state '", key, "' has has_cached = ", v[5],
            " (must be 0 or 1)");
  st.has_cached = v[5] == 1;
  OXM_CHECK(st.s[0] | st.s[1] | st.s[2] | st.s[3], Io, ctx, ": generator state '", key,
            "' is all zeros, which xoshiro256** never reaches");
  return st;
}

// "rng.<i>" with canonical decimal i (no sign, no leading zeros); false otherwise.
bool parse_rng_index(const std::string& key, size_t& index) {
  if (!starts_with(key, "rng.")) return false;
  const std::string rest = key.substr(4);
  if (rest.empty() || rest.size() > 9) return false;
  for (char c : rest)
    if (c < '0' || c > '9') return false;
  index = std::stoul(rest);
  return std::to_string(index) == rest;
}

}  // namespace

// ------------------------------------------------------------------------------------------ nn::save / load
namespace nn {

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module_tensors(module), metadata);
}

std::map<std::string, std::string> load(Module& module, const std::string& path, const LoadOptions& options) {
  SafetensorsFile f = load_safetensors_with_metadata(path);
  const auto copies = plan_module_load(module, f.tensors, options.prefix, options.strict, "nn::load: " + path);
  apply(copies);
  return std::move(f.metadata);
}

}  // namespace nn

// ------------------------------------------------------------------------------------------ checkpoints
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt, int64_t step,
                     const std::vector<const Generator*>& generators,
                     const std::map<std::string, std::string>& metadata) {
  for (const auto& [k, v] : metadata)
    OXM_CHECK(!starts_with(k, kReservedPrefix), InvalidArgument, "save_checkpoint: metadata key '", k,
              "' uses the reserved prefix '", kReservedPrefix, "'");
  for (size_t i = 0; i < generators.size(); ++i)
    OXM_CHECK(generators[i] != nullptr, InvalidArgument, "save_checkpoint: generators[", i, "] is null");
  OXM_CHECK(step >= 0 && step <= optim::kMaxStepCount, InvalidArgument, "save_checkpoint: step ", step,
            " is outside [0, 2^53]; it counts completed steps");

  std::vector<std::pair<std::string, Tensor>> items;
  items.emplace_back("step", from_vector<int64_t>({step}, Shape{}));
  for (auto& [name, t] : module_tensors(model)) items.emplace_back("model." + name, std::move(t));
  for (auto& [name, t] : opt.state_tensors()) items.emplace_back("optim." + name, std::move(t));
  for (size_t i = 0; i < generators.size(); ++i)
    items.emplace_back("rng." + std::to_string(i), encode_generator(*generators[i]));
  std::vector<std::pair<std::string, const nn::Dropout*>> dropouts;
  collect_dropouts<const nn::Module, const nn::Dropout>(model, "", dropouts);
  for (const auto& [key, d] : dropouts) items.emplace_back(key, encode_generator(d->generator));

  std::map<std::string, std::string> md = metadata;
  md[kFormatKey] = kFormat;
  md[kOptimizerKey] = opt.name();
  save_safetensors(path, items, md);
}

int64_t load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                        const std::vector<Generator*>& generators, std::map<std::string, std::string>* metadata) {
  const std::string ctx = "load_checkpoint: " + path;
  for (size_t i = 0; i < generators.size(); ++i)
    OXM_CHECK(generators[i] != nullptr, InvalidArgument, "load_checkpoint: generators[", i, "] is null");

  SafetensorsFile f = load_safetensors_with_metadata(path);
  {
    auto it = f.metadata.find(kFormatKey);
    OXM_CHECK(it != f.metadata.end(), Io, ctx, ": not an oxmera checkpoint (no '", kFormatKey,
              "' metadata; files written by nn::save load with nn::load)");
    OXM_CHECK(it->second == kFormat, Io, ctx, ": unsupported checkpoint format '", it->second, "' (expected '", kFormat,
              "')");
    it = f.metadata.find(kOptimizerKey);
    OXM_CHECK(it != f.metadata.end(), Io, ctx, ": the '", kOptimizerKey, "' metadata is missing");
    OXM_CHECK(it->second == opt.name(), Io, ctx, ": the checkpoint holds ", it->second,
              " optimizer state but the optimizer is ", opt.name());
  }

  // Sort the file's tensors; anything unrecognised is an error.
  std::vector<std::pair<std::string, Tensor>> optim_entries;
  std::map<size_t, std::pair<std::string, Tensor>> rng_entries;
  std::map<std::string, Tensor> dropout_entries;
  const Tensor* step_tensor = nullptr;
  std::vector<std::string> unexpected;
  for (const auto& [key, t] : f.tensors) {
    size_t index = 0;
    if (key == "step") {
      step_tensor = &t;
    } else if (starts_with(key, "model.")) {
      // checked by plan_module_load
    } else if (starts_with(key, "optim.")) {
      optim_entries.emplace_back(key.substr(6), t);
    } else if (key == "rng.model" || starts_with(key, "rng.model.")) {
      dropout_entries.emplace(key, t);
    } else if (parse_rng_index(key, index)) {
      rng_entries.emplace(index, std::make_pair(key, t));
    } else {
      unexpected.push_back(key);
    }
  }
  OXM_CHECK(unexpected.empty(), Io, ctx, ": unexpected tensor(s) ", name_list(unexpected));

  // Step.
  OXM_CHECK(step_tensor != nullptr, Io, ctx, ": the tensor 'step' is missing");
  OXM_CHECK(step_tensor->dtype() == DType::I64, DTypeMismatch, ctx, ": 'step' must be i64, got ", step_tensor->dtype());
  OXM_CHECK(step_tensor->numel() == 1, ShapeMismatch, ctx, ": 'step' must hold one element, got shape ",
            step_tensor->shape());
  const int64_t step = step_tensor->to(Device::cpu()).reshape(Shape{}).item<int64_t>();
  // A step counts completed steps: a negative one (a corrupt file) would index a resumed run's batch order
  // before its start, and INT64_MAX leaves no room to count on.
  OXM_CHECK(step >= 0 && step <= optim::kMaxStepCount, Io, ctx, ": 'step' is ", step,
            ", outside [0, 2^53] (a corrupt checkpoint?)");

  // Model parameters and buffers.
  const auto copies = plan_module_load(model, f.tensors, "model.", /*strict=*/true, ctx);

  // Explicit generators: exactly rng.0 .. rng.{n-1}.
  std::vector<Generator::State> gen_states;
  {
    bool dense = true;
    size_t expect = 0;
    for (const auto& [i, e] : rng_entries) dense = dense && i == expect++;
    OXM_CHECK(dense && rng_entries.size() == generators.size(), Io, ctx, ": the checkpoint holds ", rng_entries.size(),
              " generator state(s) but ", generators.size(),
              " generator(s) were passed (the list must match the one given to save_checkpoint)");
    for (const auto& [i, e] : rng_entries) gen_states.push_back(decode_generator(e.second, e.first, ctx));
  }

  // Dropout generators inside the model.
  std::vector<std::pair<std::string, nn::Dropout*>> dropouts;
  collect_dropouts<nn::Module, nn::Dropout>(model, "", dropouts);
  std::vector<Generator::State> dropout_states;
  {
    std::vector<std::string> missing;
    std::set<std::string> known;
    for (const auto& [key, d] : dropouts) {
      known.insert(key);
      if (!dropout_entries.count(key)) missing.push_back(key);
    }
    OXM_CHECK(missing.empty(), Io, ctx, ": the file lacks the Dropout generator state(s) ", name_list(missing));
    for (const auto& [key, t] : dropout_entries)
      if (!known.count(key)) unexpected.push_back(key);
    OXM_CHECK(unexpected.empty(), Io, ctx,
              ": the file holds Dropout generator state(s) the model does not have: ", name_list(unexpected));
    for (const auto& [key, d] : dropouts) dropout_states.push_back(decode_generator(dropout_entries.at(key), key, ctx));
  }

  // Optimizer last among the checks: load_state_tensors validates everything before it replaces the state, and
  // the remaining steps below cannot fail.
  try {
    opt.load_state_tensors(optim_entries);
  } catch (const Error& e) {
    detail::throw_error(e.kind(), ctx + ": optimizer state: " + e.message());
  }
  apply(copies);
  for (size_t i = 0; i < generators.size(); ++i) generators[i]->set_state(gen_states[i]);
  for (size_t i = 0; i < dropouts.size(); ++i) dropouts[i].second->generator.set_state(dropout_states[i]);
  if (metadata) *metadata = std::move(f.metadata);
  return step;
}

}  // namespace oxmera
