// Driver of test_attention_parity.py (protocol: tests/parity_common/driver.hpp). Ops: sdpa (q, k, v), causal
// (q, k, v), fmask (q, k, v, additive float mask), bmask (q, k, v, 0/1 values: a bool mask, nonzero = attend).
#include "../parity_common/driver.hpp"
#include "oxmera/oxmera.hpp"

using namespace oxmera;
namespace F = oxmera::nn::functional;

int main() {
  return oxmera_parity::driver_main([](const std::string& op, const std::vector<Tensor>& a) -> Tensor {
    if (op == "sdpa") return F::scaled_dot_product_attention(a.at(0), a.at(1), a.at(2));
    if (op == "causal") return F::scaled_dot_product_attention(a.at(0), a.at(1), a.at(2), {}, 0.0, true);
    if (op == "fmask") return F::scaled_dot_product_attention(a.at(0), a.at(1), a.at(2), a.at(3));
    if (op == "bmask")
      return F::scaled_dot_product_attention(a.at(0), a.at(1), a.at(2), (a.at(3).detach() > 0.5).to(DType::U8));
    throw std::runtime_error("unknown op " + op);
  });
}
