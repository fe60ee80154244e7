// Driver for fmt_check.py: lets numpy, Python's gzip and csv modules exercise oxmera's file formats.
//   fmt_driver load FORMAT PATH [csv options]  loads PATH (FORMAT: idx, npy, npz, csv, csv64, csvnan, csvnohdr,
//                                               stdir) and prints every tensor as one line
//                                               "T <name> <dtype> <rank> <dims...> : <values...>" (%.17g),
//                                               a CSV header as "C <name>\t<name>...";
//                                               exit 2 and "E <ErrorKind> <message>" for an oxmera::Error
//   fmt_driver write DIR                        writes the files fmt_check.py reads back with numpy
//   fmt_driver bench DIR                        writes MNIST-sized files (60000x28x28 u8 as IDX, gzip'd IDX and
//                                               f32 .npy) and prints the best of 5 load times (not a test)
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include <oxmera/oxmera.hpp>

using namespace oxmera;

namespace {

void print(const std::string& name, const Tensor& t) {
  std::printf("T %s %s %zu", name.c_str(), dtype_name(t.dtype()), t.shape().size());
  for (int64_t d : t.shape()) std::printf(" %" PRId64, d);
  std::printf(" :");
  const Tensor c = t.contiguous();
  const int64_t n = c.numel();
  for (int64_t i = 0; i < n; ++i) {
    switch (c.dtype()) {
      case DType::F32:
        std::printf(" %.9g", static_cast<double>(c.data_ptr<float>()[i]));
        break;
      case DType::F64:
        std::printf(" %.17g", c.data_ptr<double>()[i]);
        break;
      case DType::I64:
        std::printf(" %" PRId64, c.data_ptr<int64_t>()[i]);
        break;
      case DType::U8:
        std::printf(" %d", static_cast<int>(c.data_ptr<uint8_t>()[i]));
        break;
    }
  }
  std::printf("\n");
}

int load(const std::string& fmt, const std::string& path) {
  if (fmt == "idx") {
    print("idx", load_idx(path));
  } else if (fmt == "npy") {
    print("npy", load_npy(path));
  } else if (fmt == "npz") {
    for (const auto& [k, v] : load_npz(path)) print(k, v);
  } else if (fmt == "stdir") {
    for (const auto& [k, v] : load_safetensors_dir(path)) print(k, v);
  } else if (fmt.rfind("csv", 0) == 0) {
    CsvOptions o;
    o.dtype = fmt == "csv64" ? DType::F64 : DType::F32;
    o.missing_as_nan = fmt == "csvnan";
    o.has_header = fmt != "csvnohdr";
    if (fmt == "csvsemi") o.delimiter = ';';
    CsvTable t = load_csv(path, o);
    std::printf("C");
    for (size_t i = 0; i < t.columns.size(); ++i) std::printf("%s%s", i ? "\t" : " ", t.columns[i].c_str());
    std::printf("\n");
    print("csv", t.values);
  } else {
    std::fprintf(stderr, "unknown format %s\n", fmt.c_str());
    return 64;
  }
  return 0;
}

int write_files(const std::string& dir) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor f32 = from_vector<float>({1.5f, -0.0f, 1e-40f, 3.25f, -7.0f, 1e30f}, Shape{2, 3});
  const Tensor f64 = from_vector<double>({0.1, -2.5, 1e300, 5e-324, inf, -inf}, Shape{3, 2});
  const Tensor i64 = from_vector<int64_t>({std::numeric_limits<int64_t>::min(), -1, 0, 1, 9}, Shape{5});
  const Tensor i32ish = from_vector<int64_t>({-2147483648LL, -1, 0, 2147483647LL}, Shape{2, 2});
  std::vector<uint8_t> bytes(24);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 11);
  const Tensor u8 = from_vector<uint8_t>(bytes, Shape{2, 3, 4});
  const Tensor transposed = from_vector<float>({0, 1, 2, 3, 4, 5}, Shape{2, 3}).t();  // 0 3 1 4 2 5 as [3, 2]
  save_npy(dir + "/ox_f32.npy", f32);
  save_npy(dir + "/ox_f64.npy", f64);
  save_npy(dir + "/ox_i64.npy", i64);
  save_npy(dir + "/ox_u8.npy", u8);
  save_npy(dir + "/ox_t.npy", transposed);
  save_npy(dir + "/ox_scalar.npy", scalar(2.5, DType::F64));
  save_npy(dir + "/ox_empty.npy", zeros(Shape{0, 3}, DType::F32));
  std::map<std::string, Tensor> all{{"f32", f32},
                                    {"f64", f64},
                                    {"i64", i64},
                                    {"u8", u8},
                                    {"t", transposed},
                                    {"scalar", scalar(2.5, DType::F64)},
                                    {"empty", zeros(Shape{0, 3}, DType::F32)}};
  save_npz(dir + "/ox_stored.npz", all, false);
  save_npz(dir + "/ox_deflated.npz", all, true);
  save_idx(dir + "/ox_u8.idx", u8);
  save_idx(dir + "/ox_f32.idx.gz", f32, true);
  save_idx(dir + "/ox_f64.idx", f64);
  save_idx(dir + "/ox_i32.idx.gz", i32ish, true);
  return 0;
}

int bench(const std::string& dir) {
  std::vector<uint8_t> img(60000ull * 28 * 28);
  for (size_t i = 0; i < img.size(); ++i)  // a third zeros, the rest hashed: compresses about 18:1
    img[i] = static_cast<uint8_t>(i % 3 ? (i * 2654435761u) >> 24 : 0);
  const Tensor t = from_vector<uint8_t>(img, Shape{60000, 28, 28});
  save_idx(dir + "/bench.idx.gz", t, true);
  save_idx(dir + "/bench.idx", t, false);
  save_npy(dir + "/bench.npy", t.to(DType::F32));
  for (const std::string name : {"bench.idx.gz", "bench.idx", "bench.npy"}) {
    double best = 1e9;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor x = name == "bench.npy" ? load_npy(dir + "/" + name) : load_idx(dir + "/" + name);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s: best of 5 loads %.1f ms\n", name.c_str(), best * 1e3);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "load" && argc == 4) return load(argv[2], argv[3]);
    if (cmd == "write" && argc == 3) return write_files(argv[2]);
    if (cmd == "bench" && argc == 3) return bench(argv[2]);
  } catch (const Error& e) {
    std::fflush(stdout);
    std::printf("E %s %s\n", error_kind_name(e.kind()), e.message().c_str());
    return 2;
  }
  std::fprintf(stderr, "usage: fmt_driver load FORMAT PATH | write DIR | bench DIR\n");
  return 64;
}
