#pragma once
// The batch order of the workloads: a Fisher-Yates shuffle driven by SplitMix64. The research workload's orders
// are shared with its PyTorch twin (bench/research_torch.py) through the --dump file and checked by the tests,
// so these numbers must never change.
#include <cstdint>
#include <vector>

namespace oxmera::workloads {

// SplitMix64 (Steele, Lea, Flood 2014): state += golden gamma, then two xor-shift-multiply rounds.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

// A permutation of 0 .. n-1: p = identity, then for i = n-1 .. 1: j = next() % (i + 1); swap(p[i], p[j]),
// with SplitMix64 seeded with `seed`.
std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed);

}  // namespace oxmera::workloads
