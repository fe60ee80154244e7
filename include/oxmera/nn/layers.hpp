#pragma once
// Layers. Parameters are f32 and initialised like torch's defaults from the Generator passed in
// (default_generator() unless given); an f64 input is a DTypeMismatch naming the layer and the cast.
// Every layer registers its tensors by member (assigning `weight` re-points the parameter), prints like torch
// (extra_repr) and can be cloned.
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "oxmera/nn/activation.hpp"
#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/module.hpp"
#include "oxmera/random.hpp"

namespace oxmera::nn {

using functional::Pair;

// Stacked replicas (many seeds trained at once in the same ops): one random stream per replica, shared by every
// layer of a stacked model. Replica r of each layer built with it draws its parameters from generator(r), in the
// order the layers are built, so the stacked model starts exactly where R separate models would, each built with
// its own Generator(seed + r) (ReplicaGenerators(R, seed)).
class ReplicaGenerators {
 public:
  ReplicaGenerators(int64_t replicas, uint64_t seed);
  explicit ReplicaGenerators(std::vector<Generator> generators);
  int64_t size() const noexcept { return static_cast<int64_t>(generators_.size()); }
  Generator& generator(int64_t r);

 private:
  std::vector<Generator> generators_;
};

struct LinearOptions {
  bool bias = true;
  // 0: one layer. R >= 1: R independent replicas in one module, weight [R, out, in] and bias [R, out] (the names
  // and stacked layout of torch.func.stack_module_state), input [R, ..., in] -> output [R, ..., out]; replica r
  // of the input goes through replica r's weights only (a batched GEMM).
  int64_t replicas = 0;
  // Where replica r's initial values come from: generator(r) of these (see ReplicaGenerators); null: every
  // replica in turn from the constructor's Generator.
  ReplicaGenerators* replica_generators = nullptr;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  Linear(int64_t in_features, int64_t out_features, LinearOptions options, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;
  int64_t replicas() const noexcept { return replicas_; }  // 0: not stacked

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<Linear>(*this); }

 public:
  Tensor weight, bias;  // [out, in], [out] (undefined without bias); stacked: [R, out, in], [R, out]

 private:
  int64_t replicas_ = 0;
};

struct Conv2dOptions {
  Pair stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
  // 0: one layer. R >= 1: R independent replicas in one module (as LinearOptions::replicas): weight
  // [R, out, in/groups, kh, kw], bias [R, out], input [R, N, in, H, W] -> [R, N, out, H', W'] (one grouped
  // convolution over the replicas' channels side by side).
  int64_t replicas = 0;
  ReplicaGenerators* replica_generators = nullptr;  // replica r's initial values from generator(r); null: from gen
};
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel, Conv2dOptions options = {},
         Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<Conv2d>(*this); }

 public:
  int64_t replicas() const noexcept { return options.replicas; }  // 0: not stacked
  Tensor weight, bias;  // [out, in/groups, kh, kw], [out]; stacked: [R, out, in/groups, kh, kw], [R, out]
  Conv2dOptions options;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0}, Pair dilation = {1, 1});
  // MaxPool2d({2, 3}): a braced pair binds here (a standard conversion) rather than being ambiguous with the
  // copy constructor, now that an integer converts to Pair.
  explicit MaxPool2d(const int64_t (&kernel)[2], Pair stride = {0, 0}, Pair padding = {0, 0}, Pair dilation = {1, 1})
      : MaxPool2d(Pair(kernel[0], kernel[1]), stride, padding, dilation) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<MaxPool2d>(*this); }

 public:
  Pair kernel, stride, padding, dilation;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0}, bool count_include_pad = true);
  explicit AvgPool2d(const int64_t (&kernel)[2], Pair stride = {0, 0}, Pair padding = {0, 0},
                     bool count_include_pad = true)  // as MaxPool2d's
      : AvgPool2d(Pair(kernel[0], kernel[1]), stride, padding, count_include_pad) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<AvgPool2d>(*this); }

 public:
  Pair kernel, stride, padding;
  bool count_include_pad;
};

struct EmbeddingOptions {
  // torch's padding_idx (negative counts from the end): that row is zeroed at construction and gets no gradient.
  std::optional<int64_t> padding_idx = std::nullopt;
  // 0: one table. R >= 1: R independent tables, weight [R, V, D], indices [R, ...] -> [R, ..., D] (replica r looks
  // up in table r; the same indices for every replica: indices.unsqueeze(0).expand({R, ...})).
  int64_t replicas = 0;
  // Where replica r's initial values come from: generator(r) of these; null: every replica in turn from the
  // constructor's Generator.
  ReplicaGenerators* replica_generators = nullptr;
};
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen = default_generator());
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options,
            Generator& gen = default_generator());
  Tensor forward(const Tensor& indices) override;  // I64 indices of any shape -> [..., D]
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<Embedding>(*this); }

 public:
  Tensor weight;                                           // [V, D] (or [R, V, D] with replicas), N(0, 1)
  std::optional<int64_t> padding_idx;                      // normalised to [0, V)
  int64_t replicas() const noexcept { return replicas_; }  // 0: not stacked

 private:
  int64_t replicas_ = 0;
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  // 0: one layer. R >= 1: R independent replicas (weight and bias [R, *normalized_shape], ones and zeros as torch's),
  // input [R, ..., *normalized_shape]; replica r of the input is scaled and shifted by replica r's parameters.
  int64_t replicas = 0;
};
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  LayerNorm(Shape normalized_shape, LayerNormOptions options);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<LayerNorm>(*this); }

 public:
  Tensor weight, bias;
  Shape normalized_shape;
  double eps;
  int64_t replicas() const noexcept { return replicas_; }  // 0: not stacked

 private:
  int64_t replicas_ = 0;
};

// BatchNorm1d / BatchNorm2d's settings as options (the positional constructors' arguments), and stacked replicas.
struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
  // 0: one layer. R >= 1: R independent replicas: weight, bias, running_mean and running_var [R, C] (each replica's
  // row initialised as torch's), input [R, N, C, ...]; each replica normalises by its own batch's statistics and
  // keeps its own running ones (num_batches_tracked is one counter: the replicas step together).
  int64_t replicas = 0;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);
  BatchNorm2d(int64_t num_features, BatchNormOptions options);
  Tensor forward(const Tensor& x) override;                // [N, C, H, W], or [R, N, C, H, W] with replicas
  int64_t replicas() const noexcept { return replicas_; }  // 0: not stacked
  std::string name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<BatchNorm2d>(*this); }

 public:
  Tensor weight, bias, running_mean, running_var;
  Tensor num_batches_tracked;  // 0-d i64, +1 per training forward (torch's buffer; in state_dict)
  double eps, momentum;
  int64_t num_features;
  bool affine, track_running_stats;

 private:
  int64_t replicas_ = 0;
};

class Dropout : public Module {
 public:
  // The mask stream is this module's own Generator (seeded from `seed`), so it can be checkpointed.
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<Dropout>(*this); }

 public:
  double p;
  Generator generator;
};

// Modules whose forward is Tensor -> Tensor, applied in order; children named "0", "1", ... push_back takes
// any module with such a forward, overriding Module::forward(const Tensor&) or not (a typed forward taking
// other arguments is refused when it is added, InvalidArgument). The braced list holds ModulePtrs, as it
// always did, so its modules are called through Module::forward(const Tensor&).
class Sequential : public Module {
 public:
  Sequential() { set_children_owned_by_registry(); }
  Sequential(std::initializer_list<ModulePtr> modules);
  void push_back(AnyModule m);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return modules_.size(); }
  Module& operator[](size_t i) const { return *children()[i].second; }
  const AnyModule& any(size_t i) const;  // IndexOutOfBounds past the end

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<Sequential>(*this); }
  void children_replaced() override;

 private:
  std::vector<AnyModule> modules_;
};

// A list of modules of any forward (torch.nn.ModuleList): registered as children "0", "1", ...; indexing
// (negative from the end) and iteration give AnyModule, so `for (auto& layer : *list) x = layer.forward(x,
// mask);` works. It has no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() { set_children_owned_by_registry(); }
  ModuleList(std::initializer_list<AnyModule> modules);
  void push_back(AnyModule m);              // InvalidArgument for an empty module
  void insert(int64_t index, AnyModule m);  // before `index` (negative from the end; size() appends)
  void extend(const ModuleList& other);     // the same modules, shared
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  AnyModule& operator[](int64_t index);  // IndexOutOfBounds outside [-size, size)
  const AnyModule& operator[](int64_t index) const;
  std::vector<AnyModule>::iterator begin() { return modules_.begin(); }
  std::vector<AnyModule>::iterator end() { return modules_.end(); }
  std::vector<AnyModule>::const_iterator begin() const { return modules_.begin(); }
  std::vector<AnyModule>::const_iterator end() const { return modules_.end(); }
  std::string name() const override { return "ModuleList"; }

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<ModuleList>(*this); }
  void children_replaced() override;

 private:
  size_t checked_index(int64_t index, bool allow_end, const char* what) const;
  void renumber();
  std::vector<AnyModule> modules_;
};

// Modules by name in insertion order (torch.nn.ModuleDict): keys are the children's names; assigning an
// existing key replaces the module in place. Keys must be non-empty and without '.' (InvalidArgument).
class ModuleDict : public Module {
 public:
  ModuleDict() { set_children_owned_by_registry(); }
  ModuleDict(std::initializer_list<std::pair<std::string, AnyModule>> items);
  void insert(const std::string& key, AnyModule m);
  void update(const std::vector<std::pair<std::string, AnyModule>>& items);  // other.items() for another dict
  AnyModule pop(const std::string& key);  // InvalidArgument naming the key when absent
  void clear();
  bool contains(const std::string& key) const;
  AnyModule& operator[](const std::string& key);  // InvalidArgument listing the keys when absent
  const AnyModule& operator[](const std::string& key) const;
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  std::vector<AnyModule> values() const;
  const std::vector<std::pair<std::string, AnyModule>>& items() const { return items_; }
  std::vector<std::pair<std::string, AnyModule>>::const_iterator begin() const { return items_.begin(); }
  std::vector<std::pair<std::string, AnyModule>>::const_iterator end() const { return items_.end(); }
  std::string name() const override { return "ModuleDict"; }

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<ModuleDict>(*this); }
  void children_replaced() override;

 private:
  size_t find(const std::string& key) const;  // size() when absent
  void sync();
  std::vector<std::pair<std::string, AnyModule>> items_;
};

#define OXM_ACTIVATION(Cls, expr)                                                    \
  class Cls : public Module {                                                        \
   public:                                                                           \
    Tensor forward(const Tensor& x) override { return expr; }                        \
    std::string name() const override { return #Cls; }                               \
                                                                                     \
   protected:                                                                        \
    ModulePtr shallow_copy() const override { return std::make_shared<Cls>(*this); } \
  };
OXM_ACTIVATION(ReLU, x.relu())
OXM_ACTIVATION(Tanh, x.tanh())
OXM_ACTIVATION(Sigmoid, x.sigmoid())
#undef OXM_ACTIVATION

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string name() const override { return "Flatten"; }
  std::string extra_repr() const override;

 protected:
  ModulePtr shallow_copy() const override { return std::make_shared<Flatten>(*this); }

 public:
  int64_t start_dim, end_dim;
};

}  // namespace oxmera::nn
