#pragma once
// The conformance suite (tests/conformance.cpp): one list of cases generated from the op registry
// (oxmera/op_registry.hpp) — random, broadcast, non-contiguous, stride-0, host-scalar and empty inputs, forward
// and gradients — run on one backend against the CPU's f64 results. Every binary that links conformance.cpp
// defines conformance_target(): the CPU (oxmera_tests), the host-memory test device
// (oxmera_cuda_suite_on_test_device) and CUDA (oxmera_cuda_tests).
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace oxc {
using namespace oxmera;
using namespace oxt;

struct Target {
  Device device;
  std::vector<DType> float_dtypes;  // the float dtypes this device holds (cases run once per dtype)
  bool ints = true;                 // whether i64 tensors live there (the i64 cases)
  std::string skip_reason;          // non-empty: the suite reports itself skipped with this reason
};
// Defined by the binary that links conformance.cpp. Called once per test, after global environments set up.
Target conformance_target();

// One input of a case: f64 (or i64 / u8) values on the CPU, the view the op sees (applied after the stored
// tensor is moved to the device, so transposed, sliced and broadcast layouts exist on the device), whether
// its gradient is compared, and whether it stays a 0-d CPU tensor (a host scalar operand).
struct Input {
  Tensor stored;
  std::function<Tensor(const Tensor&)> view;  // empty: the stored tensor itself
  bool grad = true;                           // float inputs only
  bool host_scalar = false;
};
struct Case {
  std::string name;
  std::vector<Input> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> call;
  bool grad = false;               // compare gradients (and gradcheck on the CPU in f64)
  double tol = 1;                  // tolerance multiplier (reductions and products accumulate)
  bool cast_floats = true;         // float inputs take the case's dtype (false: they keep theirs)
  bool finite_differences = true;  // gradcheck it on the CPU (false: through an f32 rounding, meaningless)
};

// Every registry entry (the suites' parameter) and its test-name form ("unary_exp", "sum").
std::vector<const ops::OpInfo*> registry_entries();
std::string registry_entry_name(const ::testing::TestParamInfo<const ops::OpInfo*>& p);
// The finite-difference gradchecks of every differentiable case (instantiated by the CPU suite).
class ConformanceGradcheck : public ::testing::TestWithParam<const ops::OpInfo*> {};
// The same cases' second derivatives (gradgradcheck, create_graph = true), CPU suite only.
class ConformanceGradgradcheck : public ::testing::TestWithParam<const ops::OpInfo*> {};

// The cases of one registry entry; empty for an entry without a case builder (a registry test fails then).
std::vector<Case> cases_for(const ops::OpInfo& op);

}  // namespace oxc
