#pragma once
// Saving and loading models (nn::save / nn::load) and training checkpoints (save_checkpoint / load_checkpoint),
// both as one safetensors file written atomically by save_safetensors (a crash or kill -9 during a save leaves
// either the old or the new complete file at the path; at worst a stray ".<name>.tmp.<pid>.<hex>" file next to
// it, which no loader reads).
//
//   nn::save(model, "model.safetensors", {{"epoch", "3"}});
//   nn::load(model, "model.safetensors");                     // strict: the names must match exactly
//
//   save_checkpoint("ckpt.safetensors", model, opt, step, {&data_gen});
//   int64_t step = load_checkpoint("ckpt.safetensors", model, opt, {&data_gen});
//
// Loading is all or nothing: the whole file is read and checked against the model (and optimizer and
// generators) first; on any error nothing changes — no parameter, buffer, optimizer state or generator.
// Values are copied into the existing tensors in place (under NoGradGuard), so handles held elsewhere (an
// optimizer's parameter list) stay valid and see the loaded values. Tensors are converted to each destination's
// device; dtypes must match after the safetensors reader's exact widening (F16/BF16 load as F32, narrow
// integers as I64), so e.g. an F64 tensor for an F32 parameter is a DTypeMismatch.
//
// Errors (oxmera::Error):
//   Io              the file cannot be read or is not valid safetensors (from load_safetensors); a tensor the
//                   destination needs is missing; an unexpected tensor is present (strict mode); the file is
//                   not an oxmera checkpoint, was written for another optimizer type, or holds a different
//                   number of generator states than were passed; a stored step or generator state is malformed.
//   ShapeMismatch   a tensor's shape differs from the destination's (the message names the tensor and both
//                   shapes). Also a step / generator entry with the wrong shape.
//   DTypeMismatch   a tensor's dtype differs from the destination's (names the tensor and both dtypes).
//   InvalidArgument caller mistakes: a null generator pointer, user metadata using the reserved "oxmera."
//                   prefix, invalid names (from save_safetensors).
//   Errors from Optimizer::load_state_tensors keep their kind (InvalidArgument, IndexOutOfBounds,
//   ShapeMismatch, DTypeMismatch) and get "load_checkpoint: <path>: " prepended.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "oxmera/nn/module.hpp"
#include "oxmera/optim.hpp"
#include "oxmera/random.hpp"

namespace oxmera {

namespace nn {

struct LoadOptions {
  // true: a tensor in the file (under `prefix`) that the module does not have is an Io error.
  // false: such tensors are ignored. A tensor the module has but the file lacks is always an error.
  bool strict = true;
  // Only file tensors whose names start with `prefix` are considered, with the prefix stripped; others are
  // ignored. "model." loads the weights out of a save_checkpoint file.
  std::string prefix = "";
};

// Writes every parameter and buffer of `module` under its state_dict() name ("0.weight", "1.running_mean", ...)
// with `metadata` as the file's __metadata__, like torch's save(model.state_dict()); a tensor shared under
// several names (weight tying) is written once, under its first name (module.state_dict_deduplicated()), and
// load() puts it back into the one shared tensor. Atomic (see save_safetensors).
void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata = {});

// Loads the parameters and buffers saved by save() into `module` in place (all or nothing, see above) and
// returns the file's metadata.
std::map<std::string, std::string> load(Module& module, const std::string& path, const LoadOptions& options = {});

}  // namespace nn

// A training checkpoint in one safetensors file:
//   "step"                   I64 scalar, the `step` argument
//   "model.<name>"           every parameter and buffer of the model (nn::save's names, prefixed)
//   "optim.<name>"           Optimizer::state_tensors() (group{g}.param{i}.step / exp_avg / ...)
//   "rng.<i>"                the state of generators[i]
//   "rng.model.<path>"       the Generator of each nn::Dropout inside the model, by module path ("rng.model.3"
//                            for the Dropout at "3"; "rng.model" when the model itself is a Dropout)
// A generator state is an I64 tensor of shape [6]: the four xoshiro256** words and the bits of the cached
// normal (both bit-cast, so exact), then has_cached (0 or 1).
// __metadata__ holds the caller's `metadata` plus "oxmera.format" = "checkpoint/1" and "oxmera.optimizer" =
// opt.name(); keys starting with "oxmera." are reserved (InvalidArgument).
// Optimizer hyperparameters (lr, betas, ...) and LR scheduler state are not saved: rebuild them as configured
// (schedulers can be fast-forwarded from the returned step).
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt, int64_t step,
                     const std::vector<const Generator*>& generators = {},
                     const std::map<std::string, std::string>& metadata = {});

// Restores what save_checkpoint wrote into `model` (strict: exactly its parameters, buffers and Dropout
// generators), `opt` (same type; its parameters in the same order as when saved) and `generators` (as many,
// in the same order, as were saved). All or nothing. Returns the saved step; when `metadata` is not null it
// receives the file's metadata (including the "oxmera." keys).
int64_t load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                        const std::vector<Generator*>& generators = {},
                        std::map<std::string, std::string>* metadata = nullptr);

}  // namespace oxmera
