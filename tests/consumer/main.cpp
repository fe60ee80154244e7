#include <cstdio>
#include <filesystem>
#include <string>

#include <oxmera/oxmera.hpp>

int main(int argc, char** argv) {
  // A CUDA-built oxmera loads its backend module at run time: say whether cuda:0 came up, or why not.
  if (argc > 1 && std::string(argv[1]) == "--cuda-status") {
    oxmera::init();
    const auto gpu = oxmera::Device::cuda();
    std::printf("cuda:0: %s\n", oxmera::device_available(gpu)
                                    ? "available"
                                    : ("unavailable: " + oxmera::device_description(gpu)).c_str());
    return 0;
  }
  oxmera::Tensor w = oxmera::ones({2, 2}).requires_grad_();
  oxmera::Tensor y = w.matmul(oxmera::ones({2, 1})).sum();
  y.backward();
  // A gzip'd IDX round trip links the zlib that the static oxmera needs (find_dependency(ZLIB) in its config).
  const std::string idx = (std::filesystem::temp_directory_path() / "oxmera_consumer_check.idx.gz").string();
  oxmera::save_idx(idx, oxmera::ones({3}), /*gzip=*/true);
  const bool idx_ok = oxmera::load_idx(idx).sum().item<float>() == 3.0f;
  std::remove(idx.c_str());
  // Links oxmera::distributed, and through it MPI when oxmera was built with it (a private dependency the
  // installed package finds again).
  const bool mpi_ok = !oxmera::distributed::backend_description().empty();
  return (w.grad().sum().item<float>() == 4.0f && idx_ok && mpi_ok) ? 0 : 1;
}
