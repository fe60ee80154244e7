#pragma once
// Fault injection for tests: make the N-th CPU storage allocation fail with OutOfMemory, or the N-th file
// operation of an atomic save (create, write, fsync, close, rename, directory fsync) fail with a chosen errno, so
// that every failure path of a training step or a checkpoint save can be swept (tests/test_fault_injection.cpp).
// Internal API (tests include it from src/); unarmed, each hook costs one relaxed atomic load.
//
// Counting: each call to fail_*_after(n) arms a countdown; the n-th event after it (0-based) fails, once, and
// the hook disarms itself. The events counted are exactly those that could fail: every call of the CPU caching
// allocator (system allocations and cache hits alike, i.e. MemoryStats::system_allocations + cache_hits) and
// every file system call of io_detail::AtomicFile (file_operations_counted()).
#include <atomic>
#include <cstdint>

namespace oxmera::fault {

// The n-th CPU allocation from now (n = 0: the next one) throws Error(OutOfMemory); n < 0 disarms.
void fail_allocation_after(int64_t n);
// The n-th file operation of an atomic save from now fails as if the system call had set errno = err
// (e.g. ENOSPC, EIO); n < 0 disarms.
void fail_file_operation_after(int64_t n, int err);
// File operations of atomic saves so far (to size a sweep: count one clean save, then fail each in turn).
int64_t file_operations_counted();
// Disarms both hooks (a test's cleanup).
void clear_faults();

}  // namespace oxmera::fault

namespace oxmera::fault_detail {

inline std::atomic<int64_t> g_allocation_countdown{-1};
inline std::atomic<int64_t> g_file_countdown{-1};
inline std::atomic<int64_t> g_file_operations{0};

// Counts down an armed hook; true exactly once, when the armed event is reached.
bool countdown_reached(std::atomic<int64_t>& countdown) noexcept;

// True when this allocation must fail (one relaxed load when unarmed).
inline bool allocation_fault_due() noexcept {
  return g_allocation_countdown.load(std::memory_order_relaxed) >= 0 && countdown_reached(g_allocation_countdown);
}
// 0, or the errno this file operation must fail with; counts the operation.
int file_fault_due() noexcept;

}  // namespace oxmera::fault_detail
