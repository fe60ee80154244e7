#include "batch_order.hpp"

#include <cstddef>
#include <numeric>
#include <utility>

namespace oxmera::workloads {

std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  SplitMix64 g{seed};
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t j = g.next() % static_cast<uint64_t>(i + 1);
    std::swap(p[static_cast<std::size_t>(i)], p[j]);
  }
  return p;
}

}  // namespace oxmera::workloads
