// libFuzzer harness: load_safetensors_dir (include/oxmera/formats.hpp) on a folder the input describes. The input
// is split into up to three files by the separator line "\n--oxmera-fuzz-file--\n": the first part is the
// folder's model.safetensors.index.json (left out when the part is empty, so the folder is scanned for shards),
// the next two are a.safetensors and b.safetensors (left out when absent). So the index's JSON and file names, the
// shard headers and the cross-checks between them (duplicate names, tensors missing from the map or the files)
// are all fuzzed. The folder is one per process (under /dev/shm when it exists), emptied before each input.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "oxmera/formats.hpp"

namespace {

const std::filesystem::path& folder() {
  static const std::filesystem::path dir = [] {
    const std::string& base = oxmera_fuzz::input_path(".dir");  // a unique name, removed at exit
    std::filesystem::path d = base + ".d";
    std::filesystem::create_directories(d);
    static std::filesystem::path to_remove;
    to_remove = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(to_remove, ec);
    });
    return d;
  }();
  return dir;
}

void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::perror("oxmera_fuzz: writing a shard");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const fs::path& dir = folder();
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir)) stale.push_back(e.path());
  for (const fs::path& p : stale) fs::remove(p);
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSep = "\n--oxmera-fuzz-file--\n";
  const char* names[] = {"model.safetensors.index.json", "a.safetensors", "b.safetensors"};
  size_t pos = 0;
  for (int part = 0; part < 3 && pos <= input.size(); ++part) {
    const size_t end = std::min(input.find(kSep, pos), input.size());
    const std::string_view bytes = input.substr(pos, end - pos);
    if (part > 0 || !bytes.empty()) write_file(dir / names[part], bytes);
    if (end == input.size()) break;
    pos = end + kSep.size();
  }
  return oxmera_fuzz::run_expecting_oxmera_errors([&] {
    // Touch every loaded tensor: a lying header must not give a tensor whose storage is short.
    for (const auto& [name, tensor] : oxmera::load_safetensors_dir(dir.string()))
      (void)tensor.to(oxmera::DType::F64).sum().item<double>();
  });
}
