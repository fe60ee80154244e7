// einsum parity driver: evaluates oxmera::einsum on cases read from stdin and prints values and gradients, for
// test_einsum_parity.py to compare against torch.einsum.
//
// Protocol: tests/parity_common/driver.hpp, with the einsum spec as the op ('_' stands for a space).
#include <string>
#include <vector>

#include "../parity_common/driver.hpp"
#include "oxmera/einsum.hpp"

int main() {
  // The op field is the spec, with '_' standing for a space.
  return oxmera_parity::driver_main([](const std::string& op, const std::vector<oxmera::Tensor>& x) {
    std::string spec = op;
    for (char& c : spec)
      if (c == '_') c = ' ';
    return oxmera::einsum(spec, x);
  });
}
