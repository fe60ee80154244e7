#include "oxmera/nn/layers.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

#include "nn/stacked_batch_norm.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/nn/init.hpp"
#include "tensor/tensor_impl.hpp"

namespace oxmera::nn {
namespace F = functional;

namespace {
// torch's default for Linear and Conv2d: kaiming_uniform(a = sqrt(5)) weights, U(+-1/sqrt(fan_in)) bias.
void default_init(Tensor& weight, Tensor* bias, Generator& gen) {
  init::kaiming_uniform_(weight, gen, std::sqrt(5.0));
  if (bias && bias->defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in_and_fan_out(weight).first));
    init::uniform_(*bias, -bound, bound, gen);
  }
}
// Printing as torch's repr: booleans as true/false (C++), tuples "(1, 2)", floats as Python's repr ("1e-05", "0.1").
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  os << std::boolalpha;
  (os << ... << args);
  return os.str();
}
std::string tuple_str(Pair p) { return concat("(", p[0], ", ", p[1], ")"); }
std::string int_or_tuple(Pair p) { return p[0] == p[1] ? std::to_string(p[0]) : tuple_str(p); }
std::string py_float(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const int exp = std::stoi(sci.substr(sci.find('e') + 1));
  if (exp < -4 || exp >= 16) return sci;  // Python's repr switches to exponent form outside [1e-4, 1e16)
  r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  std::string fixed(buf, r.ptr);
  if (fixed.find('.') == std::string::npos) fixed += ".0";
  return fixed;
}
void check_positive(int64_t v, const char* layer, const char* what) {
  OXM_CHECK(v > 0, InvalidArgument, layer, ": ", what, " must be > 0, got ", v);
}
}  // namespace

ReplicaGenerators::ReplicaGenerators(int64_t replicas, uint64_t seed) {
  check_positive(replicas, "ReplicaGenerators", "replicas");
  for (int64_t r = 0; r < replicas; ++r) generators_.emplace_back(seed + static_cast<uint64_t>(r));
}
ReplicaGenerators::ReplicaGenerators(std::vector<Generator> generators) : generators_(std::move(generators)) {
  OXM_CHECK(!generators_.empty(), InvalidArgument, "ReplicaGenerators: needs at least one generator");
}
Generator& ReplicaGenerators::generator(int64_t r) {
  OXM_CHECK(r >= 0 && r < size(), IndexOutOfBounds, "ReplicaGenerators: replica ", r, " of ", size());
  return generators_[static_cast<size_t>(r)];
}

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& gen)
    : Linear(in, out, LinearOptions{with_bias, 0, nullptr}, gen) {}
Linear::Linear(int64_t in, int64_t out, LinearOptions opt, Generator& gen) : replicas_(opt.replicas) {
  check_positive(in, "Linear", "in_features");
  check_positive(out, "Linear", "out_features");
  OXM_CHECK(opt.replicas >= 0, InvalidArgument, "Linear: replicas must be >= 0 (0: not stacked), got ", opt.replicas);
  OXM_CHECK(!opt.replica_generators || opt.replica_generators->size() == opt.replicas, InvalidArgument,
            "Linear: replica_generators has ", opt.replica_generators ? opt.replica_generators->size() : 0,
            " generators for ", opt.replicas, " replicas; build it with ReplicaGenerators(", opt.replicas, ", seed)");
  if (replicas_ == 0) {
    register_parameter("weight", &Linear::weight, empty({out, in}));
    register_parameter("bias", &Linear::bias, opt.bias ? empty({out}) : Tensor());
    default_init(weight, &bias, gen);
    return;
  }
  const int64_t R = replicas_;
  register_parameter("weight", &Linear::weight, empty({R, out, in}));
  register_parameter("bias", &Linear::bias, opt.bias ? empty({R, out}) : Tensor());
  for (int64_t r = 0; r < R; ++r) {  // each replica as a layer of its own: torch's default init of [out, in]
    Tensor w = weight.select(0, r), b = bias.defined() ? bias.select(0, r) : Tensor();
    default_init(w, &b, opt.replica_generators ? opt.replica_generators->generator(r) : gen);
  }
}
std::string Linear::extra_repr() const {
  const int64_t d = weight.dim();
  std::string s = concat("in_features=", weight.shape()[d - 1], ", out_features=", weight.shape()[d - 2],
                         ", bias=", bias.defined());
  if (replicas_ > 0) s += concat(", replicas=", replicas_);
  return s;
}
Tensor Linear::forward(const Tensor& x) {
  check_f32_input(x);
  if (replicas_ == 0) return F::linear(x, weight, bias);
  const int64_t R = replicas_, in = weight.shape()[2];
  OXM_CHECK(x.dim() >= 2 && x.shape()[0] == R && x.shape()[x.dim() - 1] == in, ShapeMismatch, "Linear with ", R,
            " replicas: input ", x.shape(), " must be [", R, ", ..., ", in,
            "] (replica dim first; to give every replica the same input, x.unsqueeze(0).expand({", R, ", ...}))");
  return F::linear(x, weight, bias);  // one GEMM per replica, the bias rows written first
}

Conv2d::Conv2d(int64_t in, int64_t out, Pair kernel, Conv2dOptions opt, Generator& gen) : options(opt) {
  check_positive(in, "Conv2d", "in_channels");
  check_positive(out, "Conv2d", "out_channels");
  check_positive(opt.groups, "Conv2d", "groups");
  OXM_CHECK(in % opt.groups == 0 && out % opt.groups == 0, InvalidArgument, "Conv2d: in_channels ", in,
            " and out_channels ", out, " must be divisible by groups ", opt.groups);
  check_positive(kernel[0], "Conv2d", "kernel height");
  check_positive(kernel[1], "Conv2d", "kernel width");
  OXM_CHECK(opt.replicas >= 0, InvalidArgument, "Conv2d: replicas must be >= 0 (0: not stacked), got ", opt.replicas);
  OXM_CHECK(!opt.replica_generators || opt.replica_generators->size() == opt.replicas, InvalidArgument,
            "Conv2d: replica_generators has ", opt.replica_generators ? opt.replica_generators->size() : 0,
            " generators for ", opt.replicas, " replicas; build it with ReplicaGenerators(", opt.replicas, ", seed)");
  if (opt.replicas == 0) {
    register_parameter("weight", &Conv2d::weight, empty({out, in / opt.groups, kernel[0], kernel[1]}));
    register_parameter("bias", &Conv2d::bias, opt.bias ? empty({out}) : Tensor());
    default_init(weight, &bias, gen);
    return;
  }
  const int64_t R = opt.replicas;
  register_parameter("weight", &Conv2d::weight, empty({R, out, in / opt.groups, kernel[0], kernel[1]}));
  register_parameter("bias", &Conv2d::bias, opt.bias ? empty({R, out}) : Tensor());
  for (int64_t r = 0; r < R; ++r) {  // each replica as a layer of its own (torch's default init)
    Tensor w = weight.select(0, r), b = bias.defined() ? bias.select(0, r) : Tensor();
    default_init(w, &b, opt.replica_generators ? opt.replica_generators->generator(r) : gen);
  }
}
std::string Conv2d::extra_repr() const {
  // torch's form: "1, 8, kernel_size=(3, 3), stride=(1, 1)" then only the options that differ from the defaults.
  const int64_t o = options.replicas > 0 ? 1 : 0;  // a stacked weight's dims are one further along
  std::string s = concat(weight.shape()[1 + o] * options.groups, ", ", weight.shape()[o],
                         ", kernel_size=", tuple_str(Pair(weight.shape()[2 + o], weight.shape()[3 + o])),
                         ", stride=", tuple_str(options.stride));
  if (options.padding != Pair(0)) s += ", padding=" + tuple_str(options.padding);
  if (options.dilation != Pair(1)) s += ", dilation=" + tuple_str(options.dilation);
  if (options.groups != 1) s += concat(", groups=", options.groups);
  if (!bias.defined()) s += ", bias=false";
  if (options.replicas > 0) s += concat(", replicas=", options.replicas);
  return s;
}
Tensor Conv2d::forward(const Tensor& x) {
  check_f32_input(x);
  if (options.replicas == 0)
    return F::conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
  // R replicas as one grouped convolution: the replicas' channels side by side ([N, R * in, H, W]), R * groups
  // groups, so replica r's channels meet only replica r's filters.
  const int64_t R = options.replicas, out = weight.shape()[1], in = weight.shape()[2] * options.groups;
  OXM_CHECK(x.dim() == 5 && x.shape()[0] == R && x.shape()[2] == in, ShapeMismatch, "Conv2d with ", R,
            " replicas: input ", x.shape(), " must be [", R, ", N, ", in,
            ", H, W] (replica dim first; to give every replica the same input, x.unsqueeze(0).expand({", R, ", ...}))");
  const int64_t N = x.shape()[1];
  const Tensor xs = x.transpose(0, 1).reshape({N, R * in, x.shape()[3], x.shape()[4]});
  const Shape& ws = weight.shape();
  const Tensor y =
      F::conv2d(xs, weight.reshape({R * out, ws[2], ws[3], ws[4]}), bias.defined() ? bias.reshape({R * out}) : Tensor(),
                options.stride, options.padding, options.dilation, options.groups * R);
  return y.reshape({N, R, out, y.shape()[2], y.shape()[3]}).transpose(0, 1);
}

MaxPool2d::MaxPool2d(Pair k, Pair s, Pair p, Pair d) : kernel(k), stride(s), padding(p), dilation(d) {}
std::string MaxPool2d::extra_repr() const {
  return concat("kernel_size=", int_or_tuple(kernel), ", stride=", int_or_tuple(stride == Pair(0) ? kernel : stride),
                ", padding=", int_or_tuple(padding), ", dilation=", int_or_tuple(dilation), ", ceil_mode=false");
}
Tensor MaxPool2d::forward(const Tensor& x) {
  check_f32_input(x);
  return F::max_pool2d(x, kernel, stride, padding, dilation);
}

AvgPool2d::AvgPool2d(Pair k, Pair s, Pair p, bool cip) : kernel(k), stride(s), padding(p), count_include_pad(cip) {}
std::string AvgPool2d::extra_repr() const {
  return concat("kernel_size=", int_or_tuple(kernel), ", stride=", int_or_tuple(stride == Pair(0) ? kernel : stride),
                ", padding=", int_or_tuple(padding));
}
Tensor AvgPool2d::forward(const Tensor& x) {
  check_f32_input(x);
  return F::avg_pool2d(x, kernel, stride, padding, count_include_pad);
}

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen) : Embedding(num, dim, EmbeddingOptions{}, gen) {}
Embedding::Embedding(int64_t num, int64_t dim, EmbeddingOptions opt, Generator& gen) : replicas_(opt.replicas) {
  check_positive(num, "Embedding", "num_embeddings");
  check_positive(dim, "Embedding", "embedding_dim");
  OXM_CHECK(opt.replicas >= 0, InvalidArgument, "Embedding: replicas must be >= 0 (0: not stacked), got ",
            opt.replicas);
  OXM_CHECK(!opt.replica_generators || opt.replica_generators->size() == opt.replicas, InvalidArgument,
            "Embedding: replica_generators has ", opt.replica_generators ? opt.replica_generators->size() : 0,
            " generators for ", opt.replicas, " replicas; build it with ReplicaGenerators(", opt.replicas, ", seed)");
  if (replicas_ == 0) {
    register_parameter("weight", &Embedding::weight, empty({num, dim}));
    init::normal_(weight, 0.0, 1.0, gen);
  } else {
    register_parameter("weight", &Embedding::weight, empty({replicas_, num, dim}));
    for (int64_t r = 0; r < replicas_; ++r) {  // each replica as a table of its own
      Tensor w = weight.select(0, r);
      init::normal_(w, 0.0, 1.0, opt.replica_generators ? opt.replica_generators->generator(r) : gen);
    }
  }
  if (opt.padding_idx) {
    const int64_t p = *opt.padding_idx < 0 ? *opt.padding_idx + num : *opt.padding_idx;
    OXM_CHECK(p >= 0 && p < num, InvalidArgument, "Embedding: padding_idx ", *opt.padding_idx,
              " must be within num_embeddings ", num);
    padding_idx = p;
    NoGradGuard ng;
    weight.narrow(weight.dim() - 2, p, 1).fill_(0.0);
  }
}
std::string Embedding::extra_repr() const {
  const int64_t d = weight.dim();
  std::string s = concat(weight.shape()[d - 2], ", ", weight.shape()[d - 1]);
  if (padding_idx) s += concat(", padding_idx=", *padding_idx);
  if (replicas_ > 0) s += concat(", replicas=", replicas_);
  return s;
}
Tensor Embedding::forward(const Tensor& indices) {
  detail::check_defined(indices, "Embedding", "indices");
  OXM_CHECK(indices.dtype() == DType::I64, DTypeMismatch, "Embedding: indices have dtype ", indices.dtype(),
            "; they must be i64 (cast with .to(DType::I64))");
  if (replicas_ == 0) return padding_idx ? F::embedding(indices, weight, *padding_idx) : F::embedding(indices, weight);
  const int64_t R = replicas_, V = weight.shape()[1], D = weight.shape()[2];
  OXM_CHECK(indices.dim() >= 1 && indices.shape()[0] == R, ShapeMismatch, "Embedding with ", R, " replicas: indices ",
            indices.shape(), " must be [", R,
            ", ...] (replica dim first; the same indices for every replica: ", "indices.unsqueeze(0).expand({", R,
            ", ...}))");
  // Replica r's rows by a gather along the table dim: every index is checked against V (an index past its own
  // table never reads the next replica's), and the backward is a deterministic scatter-add.
  Tensor table = weight;
  if (padding_idx) {  // the padding row's value without a gradient, as F::embedding's
    Tensor keep;
    {
      NoGradGuard ng;
      keep = ones({1, V, 1}, weight.dtype(), weight.device());
      keep.narrow(1, *padding_idx, 1).fill_(0.0);
    }
    table = weight * keep + weight.detach() * (1.0 - keep);
  }
  const Tensor flat = indices.reshape({R, -1, 1});
  Shape out = indices.shape();
  out.push_back(D);
  return table.gather(1, flat.expand({R, flat.shape()[1], D})).reshape(out);
}

LayerNorm::LayerNorm(Shape shape, double e, bool affine)
    : LayerNorm(std::move(shape), LayerNormOptions{.eps = e, .elementwise_affine = affine, .replicas = 0}) {}
LayerNorm::LayerNorm(Shape shape, LayerNormOptions opt)
    : normalized_shape(std::move(shape)), eps(opt.eps), replicas_(opt.replicas) {
  OXM_CHECK(!normalized_shape.empty(), InvalidArgument, "LayerNorm: normalized_shape must not be empty");
  OXM_CHECK(opt.replicas >= 0, InvalidArgument, "LayerNorm: replicas must be >= 0 (0: not stacked), got ",
            opt.replicas);
  checked_numel(normalized_shape, "LayerNorm");
  Shape param_shape = normalized_shape;
  if (replicas_ > 0) param_shape.insert(0, replicas_);
  register_parameter("weight", &LayerNorm::weight, opt.elementwise_affine ? ones(param_shape) : Tensor());
  register_parameter("bias", &LayerNorm::bias, opt.elementwise_affine ? zeros(param_shape) : Tensor());
}
std::string LayerNorm::extra_repr() const {
  std::string shape = "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i) shape += concat(i ? ", " : "", normalized_shape[i]);
  shape += normalized_shape.size() == 1 ? ",)" : ")";
  std::string s = concat(shape, ", eps=", py_float(eps), ", elementwise_affine=", weight.defined());
  if (replicas_ > 0) s += concat(", replicas=", replicas_);
  return s;
}
Tensor LayerNorm::forward(const Tensor& x) {
  check_f32_input(x);
  if (replicas_ == 0) return F::layer_norm(x, normalized_shape, weight, bias, eps);
  const int64_t R = replicas_, k = static_cast<int64_t>(normalized_shape.size());
  bool fits = x.dim() >= k + 1 && x.shape()[0] == R;
  for (int64_t i = 1; fits && i <= k; ++i)
    fits = x.shape()[static_cast<size_t>(x.dim() - i)] == normalized_shape[static_cast<size_t>(k - i)];
  OXM_CHECK(fits, ShapeMismatch, "LayerNorm with ", R, " replicas and normalized_shape ", normalized_shape, ": input ",
            x.shape(), " must be [", R,
            ", ..., *normalized_shape] (replica dim first; to give every replica the same "
            "input, x.unsqueeze(0).expand({",
            R, ", ...}))");
  // The normalisation is the same for every replica (the fused op without affine parameters); replica r's scale and
  // shift broadcast over its rows.
  const Tensor y = F::layer_norm(x, normalized_shape, Tensor(), Tensor(), eps);
  if (!weight.defined()) return y;
  return y * F::replica_view(weight, x.dim()) + F::replica_view(bias, x.dim());
}

BatchNorm2d::BatchNorm2d(int64_t c, double e, double m, bool aff, bool track)
    : BatchNorm2d(c, BatchNormOptions{.eps = e, .momentum = m, .affine = aff, .track_running_stats = track}) {}
BatchNorm2d::BatchNorm2d(int64_t c, BatchNormOptions opt)
    : eps(opt.eps),
      momentum(opt.momentum),
      num_features(c),
      affine(opt.affine),
      track_running_stats(opt.track_running_stats),
      replicas_(opt.replicas) {
  check_positive(c, "BatchNorm2d", "num_features");
  F::register_batch_norm_state(*this, "BatchNorm2d", c, opt);
}
std::string BatchNorm2d::extra_repr() const {
  std::string s = concat(num_features, ", eps=", py_float(eps), ", momentum=", py_float(momentum), ", affine=", affine,
                         ", track_running_stats=", track_running_stats);
  if (replicas_ > 0) s += concat(", replicas=", replicas_);
  return s;
}
Tensor BatchNorm2d::forward(const Tensor& x) {
  check_f32_input(x);
  const bool use_batch = is_training() || !running_mean.defined();
  if (replicas_ > 0) {
    OXM_CHECK(x.dim() == 5 && x.shape()[0] == replicas_ && x.shape()[2] == num_features, ShapeMismatch,
              "BatchNorm2d with ", replicas_, " replicas: input ", x.shape(), " must be [", replicas_, ", N, ",
              num_features, ", H, W] (replica dim first; to give every replica the same input, x.unsqueeze(0).expand({",
              replicas_, ", ...}))");
    Tensor y = F::stacked_batch_norm(x, replicas_, running_mean, running_var, weight, bias, use_batch, momentum, eps);
    if (is_training() && num_batches_tracked.defined()) num_batches_tracked.add_(1.0);
    return y;
  }
  OXM_CHECK(x.dim() == 4, ShapeMismatch, "BatchNorm2d: expected [N, C, H, W], got ", x.shape());
  const int64_t c = running_mean.defined() ? running_mean.numel() : (weight.defined() ? weight.numel() : x.shape()[1]);
  OXM_CHECK(x.shape()[1] == c, ShapeMismatch, "BatchNorm2d: input has ", x.shape()[1], " channels, the layer ", c);
  Tensor y = F::batch_norm(x, running_mean, running_var, weight, bias, use_batch, momentum, eps);
  // Counted once the statistics are updated (a failed forward changes no buffer).
  if (is_training() && num_batches_tracked.defined()) num_batches_tracked.add_(1.0);
  return y;
}

Dropout::Dropout(double prob, uint64_t seed) : p(prob), generator(seed) {
  OXM_CHECK(p >= 0.0 && p <= 1.0, InvalidArgument, "Dropout: p must be in [0, 1], got ", p);
}
std::string Dropout::extra_repr() const { return concat("p=", py_float(p), ", inplace=false"); }
std::string Flatten::extra_repr() const { return concat("start_dim=", start_dim, ", end_dim=", end_dim); }
Tensor Dropout::forward(const Tensor& x) {
  check_f32_input(x);
  return F::dropout(x, p, is_training(), generator);
}

// ------------------------------------------------------------------------------------------ containers
namespace {
void check_module(const AnyModule& m, const std::string& where) {
  OXM_CHECK(!m.is_empty(), InvalidArgument, where, ": cannot add a null module");
}
}  // namespace

Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Sequential() {
  for (const auto& m : modules) push_back(m);
}
void Sequential::push_back(AnyModule m) {
  check_module(m, "Sequential");
  OXM_CHECK(m.is_tensor_to_tensor(), InvalidArgument, "Sequential: module ", modules_.size(), " (", m->name(),
            ") has forward ", m.signature(),
            "; Sequential chains Tensor -> Tensor modules (hold it in a ModuleList or call it yourself)");
  register_module(std::to_string(modules_.size()), m.ptr());
  modules_.push_back(std::move(m));
}
const AnyModule& Sequential::any(size_t i) const {
  OXM_CHECK(i < modules_.size(), IndexOutOfBounds, "Sequential: index ", i, " out of range for ", modules_.size(),
            " module(s)");
  return modules_[i];
}
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : modules_) h = m.forward(h);
  return h;
}
void Sequential::children_replaced() {
  const auto& kids = children();
  for (size_t i = 0; i < modules_.size(); ++i) modules_[i] = modules_[i].rebind(kids[i].second);
}

ModuleList::ModuleList(std::initializer_list<AnyModule> modules) : ModuleList() {
  for (const auto& m : modules) push_back(m);
}
void ModuleList::push_back(AnyModule m) {
  check_module(m, "ModuleList");
  register_module(std::to_string(modules_.size()), m.ptr());
  modules_.push_back(std::move(m));
}
size_t ModuleList::checked_index(int64_t index, bool allow_end, const char* what) const {
  const int64_t n = static_cast<int64_t>(modules_.size());
  const int64_t i = index < 0 ? index + n : index;
  OXM_CHECK(i >= 0 && (i < n || (allow_end && i == n)), IndexOutOfBounds, "ModuleList::", what, ": index ", index,
            " out of range for ", n, " module(s)");
  return static_cast<size_t>(i);
}
void ModuleList::insert(int64_t index, AnyModule m) {
  check_module(m, "ModuleList");
  const size_t at = checked_index(index, true, "insert");
  modules_.insert(modules_.begin() + static_cast<std::ptrdiff_t>(at), std::move(m));
  renumber();
}
void ModuleList::extend(const ModuleList& other) {
  const std::vector<AnyModule> add = other.modules_;  // other may be *this
  for (const auto& m : add) push_back(m);
}
AnyModule& ModuleList::operator[](int64_t index) { return modules_[checked_index(index, false, "operator[]")]; }
const AnyModule& ModuleList::operator[](int64_t index) const {
  return modules_[checked_index(index, false, "operator[]")];
}
void ModuleList::renumber() {
  std::vector<std::pair<std::string, ModulePtr>> kids;
  for (size_t i = 0; i < modules_.size(); ++i) kids.emplace_back(std::to_string(i), modules_[i].ptr());
  reset_children(kids);
}
void ModuleList::children_replaced() {
  const auto& kids = children();
  for (size_t i = 0; i < modules_.size(); ++i) modules_[i] = modules_[i].rebind(kids[i].second);
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, AnyModule>> items) : ModuleDict() {
  for (const auto& [k, m] : items) insert(k, m);
}
size_t ModuleDict::find(const std::string& key) const {
  for (size_t i = 0; i < items_.size(); ++i)
    if (items_[i].first == key) return i;
  return items_.size();
}
void ModuleDict::insert(const std::string& key, AnyModule m) {
  check_module(m, "ModuleDict");
  OXM_CHECK(!key.empty() && key.find('.') == std::string::npos, InvalidArgument, "ModuleDict: the key '", key,
            "' must be non-empty and without '.'");
  const size_t at = find(key);
  if (at < items_.size())
    items_[at].second = std::move(m);  // torch: assigning an existing key keeps its position
  else
    items_.emplace_back(key, std::move(m));
  sync();
}
void ModuleDict::update(const std::vector<std::pair<std::string, AnyModule>>& items) {
  const auto copy = items;  // items may be this->items()
  for (const auto& [k, m] : copy) insert(k, m);
}
AnyModule ModuleDict::pop(const std::string& key) {
  const size_t at = find(key);
  OXM_CHECK(at < items_.size(), InvalidArgument, "ModuleDict::pop: no key '", key, "'");
  AnyModule m = items_[at].second;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(at));
  sync();
  return m;
}
void ModuleDict::clear() {
  items_.clear();
  sync();
}
bool ModuleDict::contains(const std::string& key) const { return find(key) < items_.size(); }
AnyModule& ModuleDict::operator[](const std::string& key) {
  return const_cast<AnyModule&>(static_cast<const ModuleDict&>(*this)[key]);
}
const AnyModule& ModuleDict::operator[](const std::string& key) const {
  const size_t at = find(key);
  if (at == items_.size()) {
    std::string ks;
    for (size_t i = 0; i < items_.size(); ++i) ks += (i ? ", '" : "'") + items_[i].first + "'";
    OXM_FAIL(InvalidArgument, "ModuleDict: no key '", key, "' (keys: ", ks.empty() ? "none" : ks, ")");
  }
  return items_[at].second;
}
std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : items_) out.push_back(k);
  return out;
}
std::vector<AnyModule> ModuleDict::values() const {
  std::vector<AnyModule> out;
  for (const auto& [k, m] : items_) out.push_back(m);
  return out;
}
void ModuleDict::sync() {
  std::vector<std::pair<std::string, ModulePtr>> kids;
  for (const auto& [k, m] : items_) kids.emplace_back(k, m.ptr());
  reset_children(kids);
}
void ModuleDict::children_replaced() {
  const auto& kids = children();
  for (size_t i = 0; i < items_.size(); ++i) items_[i].second = items_[i].second.rebind(kids[i].second);
}

}  // namespace oxmera::nn
