// libFuzzer harness: load_checkpoint (include/oxmera/checkpoint.hpp) into a Linear(2, 3) + Adam + one Generator,
// then one training step, so a file that loads but leaves a state the next step cannot use is found too.
#include "fuzz_common.hpp"
#include "oxmera/checkpoint.hpp"
#include "oxmera/nn/layers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = oxmera_fuzz::write_input(data, size, ".safetensors");
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    oxmera::Generator init(7);
    auto model = std::make_shared<oxmera::nn::Linear>(2, 3, true, init);
    oxmera::optim::Adam opt(model->parameters());
    oxmera::Generator data_gen(11);
    std::map<std::string, std::string> metadata;
    (void)oxmera::load_checkpoint(path, *model, opt, {&data_gen}, &metadata);
    opt.zero_grad();
    model->forward(oxmera::ones({4, 2})).sum().backward();
    opt.step();
    (void)data_gen.next_normal();
  });
}
