// Driver for st_check.py: lets an independent Python reader/writer exercise oxmera's safetensors I/O.
//   st_driver write DIR          writes DIR/ox_all.safetensors (map overload) and DIR/ox_ordered.safetensors
//                                (vector overload) with the tensors st_check.py expects
//   st_driver roundtrip IN OUT   loads IN with its metadata and saves it again to OUT
//   st_driver load IN            loads IN; exit 0 and "ok N", or exit 2 and the error for an oxmera::Error
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>

#include <oxmera/oxmera.hpp>

using namespace oxmera;

namespace {

int write_files(const std::string& dir) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::map<std::string, Tensor> t;
  // f32 with the special values: -0, subnormal, inf, -inf, NaN
  t["f32"] = from_vector<float>({1.5f, -0.0f, 1e-40f, inf, -inf, nan}, Shape{2, 3});
  t["f64"] = from_vector<double>({0.1, -2.5, 1e300, 5e-324}, Shape{4});
  t["i64"] = from_vector<int64_t>({std::numeric_limits<int64_t>::min(), -1, 0, 1, std::numeric_limits<int64_t>::max()},
                                  Shape{5});
  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  t["u8"] = from_vector<uint8_t>(bytes, Shape{16, 16});
  // transposed view: logical values are 0, 3, 1, 4, 2, 5 for shape [3, 2]
  t["transposed"] = from_vector<float>({0, 1, 2, 3, 4, 5}, Shape{2, 3}).t();
  t["scalar"] = scalar(7.25, DType::F64);
  t["empty"] = zeros(Shape{0, 3}, DType::I64);
  t["a.weight"] = arange(0.0, 12.0, 1.0, DType::F32).reshape(Shape{3, 4});
  save_safetensors(dir + "/ox_all.safetensors", t, {{"format", "pt"}, {"note", "h\xc3\xa9llo \"quoted\"\n\ttab"}});

  std::vector<std::pair<std::string, Tensor>> ordered;
  ordered.emplace_back("z", from_vector<uint8_t>({1, 2, 3}, Shape{3}));
  ordered.emplace_back("a", from_vector<double>({1.0, 2.0}, Shape{2}));
  ordered.emplace_back("m", from_vector<int64_t>({42}, Shape{1, 1}));
  save_safetensors(dir + "/ox_ordered.safetensors", ordered);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "write" && argc == 3) return write_files(argv[2]);
    if (cmd == "roundtrip" && argc == 4) {
      SafetensorsFile f = load_safetensors_with_metadata(argv[2]);
      save_safetensors(argv[3], f.tensors, f.metadata);
      return 0;
    }
    if (cmd == "load" && argc == 3) {
      auto m = load_safetensors(argv[2]);
      std::cout << "ok " << m.size() << "\n";
      return 0;
    }
  } catch (const Error& e) {
    std::cout << e.what() << "\n";
    return 2;
  }
  std::cerr << "usage: st_driver write DIR | roundtrip IN OUT | load IN\n";
  return 1;
}
