#include "backend/cpu/caching_allocator.hpp"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/fault_injection.hpp"
#include "oxmera/error.hpp"

namespace oxmera::detail {
namespace {

constexpr size_t kAlign = 64;
constexpr int kBuckets = 2 * 48;                  // two classes per power of two up to 2^48
constexpr int64_t kMaxCached = int64_t{2} << 30;  // beyond this, frees go back to the system

// Bucket i covers sizes rounded up to 2^(i/2+6) (even i) or 1.5 * 2^(i/2+6) (odd i): at most 33% waste.
int bucket_of(size_t n, size_t* rounded) {
  size_t s = kAlign;
  for (int i = 0; i < kBuckets; ++i) {
    size_t v = (i % 2 == 0) ? s : s + s / 2;
    if (n <= v) {
      *rounded = v;
      return i;
    }
    if (i % 2 == 1) s *= 2;
  }
  *rounded = n;
  return -1;
}

struct Cache {
  std::mutex mu;
  std::vector<void*> free_lists[kBuckets];
  AllocatorStats stats;
  int64_t cached = 0;
};
Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: storages may be freed during static destruction
  return *c;
}

}  // namespace

void* host_allocate(size_t nbytes) {
  if (fault_detail::allocation_fault_due())
    OXM_FAIL(OutOfMemory, "cpu allocator: cannot allocate ", nbytes,
             " bytes (failure injected by oxmera::fault::fail_allocation_after)");
  // Sizes past what int64 statistics count and the alignment rounding below can add without wrapping.
  OXM_CHECK(nbytes <= static_cast<size_t>(INT64_MAX) - kAlign, OutOfMemory, "cpu allocator: cannot allocate ", nbytes,
            " bytes (more than the address space); reduce the tensor sizes");
  size_t rounded;
  int b = bucket_of(nbytes, &rounded);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (b >= 0 && !c.free_lists[b].empty()) {
      void* p = c.free_lists[b].back();
      c.free_lists[b].pop_back();
      c.cached -= static_cast<int64_t>(rounded);
      c.stats.allocated_bytes += static_cast<int64_t>(rounded);
      c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
      ++c.stats.cache_hits;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, (rounded + kAlign - 1) / kAlign * kAlign);
  if (!p) {
    host_empty_cache();
    p = std::aligned_alloc(kAlign, (rounded + kAlign - 1) / kAlign * kAlign);
  }
  OXM_CHECK(p != nullptr, OutOfMemory, "cpu allocator: cannot allocate ", nbytes, " bytes (",
            cache().stats.allocated_bytes, " bytes in use); reduce the tensor sizes");
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.allocated_bytes += static_cast<int64_t>(rounded);
  c.stats.reserved_bytes += static_cast<int64_t>(rounded);
  c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
  ++c.stats.system_allocations;
  return p;
}

void host_deallocate(void* p, size_t nbytes) noexcept {
  if (!p) return;
  size_t rounded;
  int b = bucket_of(nbytes, &rounded);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.allocated_bytes -= static_cast<int64_t>(rounded);
    if (b >= 0 && c.cached + static_cast<int64_t>(rounded) <= kMaxCached) {
      try {
        c.free_lists[b].push_back(p);
        c.cached += static_cast<int64_t>(rounded);
        return;
      } catch (...) {
      }
    }
    c.stats.reserved_bytes -= static_cast<int64_t>(rounded);
  }
  std::free(p);
}

AllocatorStats host_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void host_empty_cache() {
  Cache& c = cache();
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    size_t s = kAlign;
    for (int i = 0; i < kBuckets; ++i) {
      size_t v = (i % 2 == 0) ? s : s + s / 2;
      for (void* p : c.free_lists[i]) {
        to_free.push_back(p);
        c.stats.reserved_bytes -= static_cast<int64_t>(v);
      }
      c.free_lists[i].clear();
      if (i % 2 == 1) s *= 2;
    }
    c.cached = 0;
  }
  for (void* p : to_free) std::free(p);
}

}  // namespace oxmera::detail
