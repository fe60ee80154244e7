// Checks the replay driver itself: an input starting with "throw" raises a std::runtime_error (a finding), any
// other input an oxmera::Error (expected). The ctest fuzz_replay_selftest_finding must fail on its input.
#include <stdexcept>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    if (input.rfind("throw", 0) == 0) throw std::runtime_error("a non-oxmera exception, on purpose");
    OXM_CHECK(false, InvalidArgument, "fuzz_selftest: an expected oxmera::Error");
  });
}
