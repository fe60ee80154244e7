#include "core/fault_injection.hpp"

namespace oxmera::fault_detail {
namespace {
std::atomic<int> g_file_errno{0};
void set_file_errno(int err) noexcept { g_file_errno.store(err, std::memory_order_relaxed); }
}  // namespace

bool countdown_reached(std::atomic<int64_t>& countdown) noexcept {
  int64_t left = countdown.load(std::memory_order_relaxed);
  // Several threads may allocate at once: exactly one of them takes the armed slot.
  while (left >= 0) {
    if (countdown.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) return left == 0;
  }
  return false;
}

int file_fault_due() noexcept {
  g_file_operations.fetch_add(1, std::memory_order_relaxed);
  if (g_file_countdown.load(std::memory_order_relaxed) < 0 || !countdown_reached(g_file_countdown)) return 0;
  return g_file_errno.load(std::memory_order_relaxed);
}

}  // namespace oxmera::fault_detail

namespace oxmera::fault {

void fail_allocation_after(int64_t n) {
  fault_detail::g_allocation_countdown.store(n < 0 ? -1 : n, std::memory_order_relaxed);
}

void fail_file_operation_after(int64_t n, int err) {
  fault_detail::set_file_errno(err);
  fault_detail::g_file_countdown.store(n < 0 ? -1 : n, std::memory_order_relaxed);
}

int64_t file_operations_counted() { return fault_detail::g_file_operations.load(std::memory_order_relaxed); }

void clear_faults() {
  fail_allocation_after(-1);
  fail_file_operation_after(-1, 0);
}

}  // namespace oxmera::fault
