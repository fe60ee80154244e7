#pragma once
#include <cstdint>

#include "oxmera/device.hpp"

namespace oxmera {

// Statistics of a device's caching allocator.
struct MemoryStats {
  int64_t allocated_bytes = 0;  // held by live tensors (rounded to the allocator's size classes)
  int64_t reserved_bytes = 0;   // allocated + cached for reuse
  int64_t peak_allocated_bytes = 0;
  int64_t system_allocations = 0;  // requests that reached the system allocator / driver
  int64_t cache_hits = 0;          // requests served from the cache
};
MemoryStats memory_stats(Device device = Device::cpu());
// Returns cached, unused blocks to the system.
void empty_cache(Device device = Device::cpu());

}  // namespace oxmera
