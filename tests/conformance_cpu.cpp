// The conformance suite (tests/conformance.cpp) on the CPU backend: f32 against the CPU's f64, and
// finite-difference gradchecks of every differentiable case in f64.
#include "conformance.hpp"

oxc::Target oxc::conformance_target() { return {Device::cpu(), {DType::F32}, true, ""}; }

namespace oxc {
INSTANTIATE_TEST_SUITE_P(Registry, ConformanceGradcheck, ::testing::ValuesIn(registry_entries()), registry_entry_name);
INSTANTIATE_TEST_SUITE_P(Registry, ConformanceGradgradcheck, ::testing::ValuesIn(registry_entries()),
                         registry_entry_name);
}  // namespace oxc
