// Runs the cuda suite (test_cuda.cpp) on the host-memory test device of fake_device.hpp when no GPU is
// registered: it checks the suite's own logic (shapes, expectations, error texts, tolerances) with the
// CPU's kernels behind the device API, so a GPU run is not spent on a mistake in a test. With a real GPU the
// registration is skipped and this binary runs the suite on the GPU, as oxmera_cuda_tests does.
#include <gtest/gtest.h>

#include "fake_device.hpp"

namespace {
class RegisterTestDevice final : public ::testing::Environment {
 public:
  void SetUp() override { (void)oxt_fake::register_host_memory_device(); }
};
::testing::Environment* const kRegistered = ::testing::AddGlobalTestEnvironment(new RegisterTestDevice);
}  // namespace
