// A folder of safetensors shards as one name → tensor map (see include/oxmera/formats.hpp).
#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "io/format_io.hpp"
#include "oxmera/formats.hpp"
#include "oxmera/io.hpp"

namespace oxmera {

namespace {
constexpr uint64_t kMaxIndexBytes = 100'000'000;

std::map<std::string, std::string> read_index(const std::filesystem::path& index) {
  const io_detail::InputFile f = io_detail::open_input(index.string(), "load_safetensors_dir");
  OXM_CHECK(f.size <= kMaxIndexBytes, Io, "load_safetensors_dir: ", index.string(), ": ", f.size,
            " bytes, more than the ", kMaxIndexBytes, "-byte limit for an index");
  std::string text(static_cast<size_t>(f.size), '\0');
  if (f.size) io_detail::pread_exact(f, text.data(), text.size(), 0, "the index");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    OXM_FAIL(Io, "load_safetensors_dir: ", index.string(), ": not valid JSON: ", e.what());
  }
  OXM_CHECK(doc.is_object() && doc.contains("weight_map") && doc["weight_map"].is_object(), Io,
            "load_safetensors_dir: ", index.string(), ": field 'weight_map': missing or not an object");
  std::map<std::string, std::string> map;
  for (auto it = doc["weight_map"].begin(); it != doc["weight_map"].end(); ++it) {
    OXM_CHECK(it->is_string(), Io, "load_safetensors_dir: ", index.string(), ": field 'weight_map': the file of '",
              it.key(), "' is not a string");
    const std::string file = it->get<std::string>();
    const std::filesystem::path fp(file);
    OXM_CHECK(!file.empty() && fp.is_relative() && fp.filename() == fp && file != "." && file != "..", Io,
              "load_safetensors_dir: ", index.string(), ": field 'weight_map': tensor '", it.key(), "' names '", file,
              "', which is not a file name inside the folder");
    map.emplace(it.key(), file);
  }
  return map;
}
}  // namespace

std::map<std::string, Tensor> load_safetensors_dir(const std::string& directory) {
  namespace fs = std::filesystem;
  const fs::path dir(directory);
  std::error_code ec;
  OXM_CHECK(fs::is_directory(dir, ec), Io, "load_safetensors_dir: ", directory, " is not a directory");
  const fs::path index = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> files;
  const bool indexed = fs::exists(index, ec);
  if (indexed) {
    weight_map = read_index(index);
    std::set<std::string> unique;
    for (const auto& [name, file] : weight_map) unique.insert(file);
    files.assign(unique.begin(), unique.end());
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) files.push_back(e.path().filename());
    OXM_CHECK(!ec, Io, "load_safetensors_dir: ", directory, ": cannot list the directory: ", ec.message());
    std::sort(files.begin(), files.end());
    OXM_CHECK(!files.empty(), Io, "load_safetensors_dir: ", directory,
              " holds no *.safetensors file and no model.safetensors.index.json");
  }
  std::map<std::string, Tensor> out;
  std::map<std::string, std::string> origin;
  for (const auto& file : files) {
    auto shard = load_safetensors((dir / file).string());
    for (auto& [name, t] : shard) {
      const auto [it, fresh] = origin.emplace(name, file);
      OXM_CHECK(fresh, Io, "load_safetensors_dir: ", directory, ": tensor '", name, "' is in both ", it->second,
                " and ", file, " (duplicate name)");
      if (indexed) {
        const auto w = weight_map.find(name);
        OXM_CHECK(w != weight_map.end(), Io, "load_safetensors_dir: ", index.string(), ": tensor '", name, "' of ",
                  file, " is missing from field 'weight_map'");
        OXM_CHECK(w->second == file, Io, "load_safetensors_dir: ", index.string(), ": field 'weight_map' puts '", name,
                  "' in ", w->second, " but it is in ", file);
      }
      out.emplace(name, std::move(t));
    }
  }
  for (const auto& [name, file] : weight_map)
    OXM_CHECK(out.count(name), Io, "load_safetensors_dir: ", index.string(), ": field 'weight_map' puts '", name,
              "' in ", file, ", which does not hold it");
  return out;
}

}  // namespace oxmera
