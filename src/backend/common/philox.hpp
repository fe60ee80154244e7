#pragma once
// Philox4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC11): a counter-based
// generator, so element i of a draw is a pure function of (key, counter) and a GPU computes any element without
// state. Host and device compilable (OXM_HD); checked against the paper's known-answer vectors
// (tests/test_cuda_host.cpp). Used where random numbers must be drawn on the device: dropout inside a CUDA graph
// capture (ops::DropoutMaskCall).
#include <cstdint>

#include "core/host_device.hpp"

namespace oxmera::detail {

struct Philox4 {
  uint32_t v[4];
};

OXM_HD inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// The 10-round bijection of a 128-bit counter under a 64-bit key.
OXM_HD inline Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, ctr.v[0], hi0, lo0);
    philox_mulhilo(kM1, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// The four 32-bit words of block `block` of the stream `seed`: counter = block (64 bits), key = seed.
OXM_HD inline Philox4 philox_block(uint64_t seed, uint64_t block) {
  return philox4x32_10(Philox4{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A uniform in [0, 1) from the top 24 bits of a word (exact in f32 and f64).
OXM_HD inline double philox_unit(uint32_t word) { return static_cast<double>(word >> 8) * (1.0 / 16777216.0); }

// Element i of a dropout mask drawn from the stream `seed` starting at block `offset`: `scale` when its uniform is
// >= p (kept), else 0. Element i takes word i % 4 of block offset + i / 4.
template <class T>
OXM_HD inline void dropout_mask_block(uint64_t seed, uint64_t offset, int64_t block, int64_t numel, double p,
                                      double scale, T* mask) {
  const Philox4 r = philox_block(seed, offset + static_cast<uint64_t>(block));
  for (int w = 0; w < 4; ++w) {
    const int64_t i = block * 4 + w;
    if (i < numel) mask[i] = philox_unit(r.v[w]) >= p ? static_cast<T>(scale) : T(0);
  }
}

// The whole mask on the host (the fallback and the host-memory test device): dropout_mask_block for every block.
template <class T>
inline void dropout_mask_host(uint64_t seed, uint64_t offset, int64_t numel, double p, double scale, T* mask) {
  for (int64_t b = 0; b * 4 < numel; ++b) dropout_mask_block(seed, offset, b, numel, p, scale, mask);
}

}  // namespace oxmera::detail
