#pragma once
#include <cstdint>

namespace oxmera {

// Deterministic counter-free PRNG (xoshiro256**), seeded through splitmix64. Same seed, same stream on
// every platform and thread count.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { seed_(seed); }
  uint64_t next_u64() noexcept;
  double next_double() noexcept;  // [0, 1) with 53 bits
  double next_normal() noexcept;  // standard normal (Box-Muller, cached pair)
  // Full state, for checkpoints.
  struct State {
    uint64_t s[4];
    double cached_normal;
    bool has_cached;
  };
  State state() const noexcept { return State{{s_[0], s_[1], s_[2], s_[3]}, cached_, has_cached_}; }
  void set_state(const State& st) noexcept;

 private:
  void seed_(uint64_t seed) noexcept;
  uint64_t s_[4];
  double cached_ = 0.0;
  bool has_cached_ = false;
};

// The process-wide generator used when a layer is built without an explicit one. Not thread-safe: seed
// it (manual_seed) and build models from one thread, or pass a Generator explicitly.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace oxmera
