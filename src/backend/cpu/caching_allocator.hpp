#pragma once
// Size-bucketed caching allocator for host memory: freed blocks go to a free list of their bucket and are
// handed out again, so a training step in steady state does not call malloc for its activations.
#include <cstddef>
#include <cstdint>

namespace oxmera::detail {

struct AllocatorStats {
  int64_t allocated_bytes = 0;  // handed out to live storages (bucket-rounded)
  int64_t reserved_bytes = 0;   // allocated + cached
  int64_t peak_allocated_bytes = 0;
  int64_t system_allocations = 0;  // calls that reached the system allocator
  int64_t cache_hits = 0;
};

void* host_allocate(size_t nbytes);  // 64-byte aligned; throws OutOfMemory
void host_deallocate(void* p, size_t nbytes) noexcept;
AllocatorStats host_allocator_stats();
void host_empty_cache();  // returns every cached block to the system

}  // namespace oxmera::detail
