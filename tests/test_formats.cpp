// File formats (include/oxmera/formats.hpp): round trips of every format and dtype, and typed Io errors for
// truncated, lying and corrupted files. numpy / gzip / csv interoperability is tests/formats_py/fmt_check.py.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {
using namespace oxt;

class Formats : public TempDirTest {
 protected:
  void write_bytes(const std::string& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
};

// Runs fn, expects an oxmera::Error of `kind` whose message holds every needle.
template <class Fn>
void expect_error(Fn&& fn, ErrorKind kind, std::vector<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "no error; wanted " << error_kind_name(kind);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles) EXPECT_NE(e.message().find(n), std::string::npos) << "'" << n << "' in " << e.what();
  }
}

void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  const Tensor g = got.contiguous(), w = want.contiguous();
  const size_t bytes = static_cast<size_t>(w.numel()) * itemsize(w.dtype());
  const void* gp = nullptr;
  const void* wp = nullptr;
  switch (w.dtype()) {
    case DType::F32:
      gp = g.data_ptr<float>(), wp = w.data_ptr<float>();
      break;
    case DType::F64:
      gp = g.data_ptr<double>(), wp = w.data_ptr<double>();
      break;
    case DType::I64:
      gp = g.data_ptr<int64_t>(), wp = w.data_ptr<int64_t>();
      break;
    case DType::U8:
      gp = g.data_ptr<uint8_t>(), wp = w.data_ptr<uint8_t>();
      break;
  }
  if (bytes) {
    EXPECT_EQ(std::memcmp(gp, wp, bytes), 0) << "bit patterns differ";
  }
}

std::vector<std::pair<std::string, Tensor>> samples() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> bytes(300);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  return {
      {"f32", from_vector<float>({1.5f, -0.0f, 1e-40f, inf, -inf, std::nanf("")}, Shape{2, 3})},
      {"f64", from_vector<double>({0.1, -2.5, 1e300, 5e-324}, Shape{4})},
      {"i64", from_vector<int64_t>({std::numeric_limits<int64_t>::min(), -1, 0, 7}, Shape{2, 2})},
      {"u8", from_vector<uint8_t>(bytes, Shape{3, 10, 10})},
      {"scalar", scalar(-3.5, DType::F64)},
      {"empty", zeros(Shape{0, 5}, DType::F32)},
      {"transposed", from_vector<float>({0, 1, 2, 3, 4, 5}, Shape{2, 3}).t()},
      {"large", randn(Shape{300, 300}, 3)},  // several chunks of every reader and writer
  };
}

TEST_F(Formats, NpyRoundTripEveryDtype) {
  for (const auto& [name, t] : samples()) {
    save_npy(path(name + ".npy"), t);
    expect_same(load_npy(path(name + ".npy")), t);
  }
}

TEST_F(Formats, NpzRoundTripStoredAndDeflated) {
  const auto items = samples();
  std::map<std::string, Tensor> m(items.begin(), items.end());
  for (bool compress : {false, true}) {
    const std::string p = path(compress ? "d.npz" : "s.npz");
    save_npz(p, m, compress);
    const auto got = load_npz(p);
    ASSERT_EQ(got.size(), m.size());
    for (const auto& [name, t] : m) {
      ASSERT_TRUE(got.count(name)) << name;
      expect_same(got.at(name), t);
    }
  }
  // compression actually compresses (zeros) and the vector overload keeps working
  save_npz(path("z.npz"), std::vector<std::pair<std::string, Tensor>>{{"z", zeros(Shape{1000})}}, true);
  EXPECT_LT(read_bytes(path("z.npz")).size(), 1000u);
  expect_same(load_npz(path("z.npz")).at("z"), zeros(Shape{1000}));
  expect_error([&] { save_npz(path("u.npz"), {{"a", Tensor()}}); }, ErrorKind::InvalidArgument, {"'a'"});
}

TEST_F(Formats, IdxRoundTripPlainAndGzip) {
  std::vector<uint8_t> img(2 * 28 * 28);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<uint8_t>(i % 251);
  const std::vector<Tensor> ts = {from_vector<uint8_t>(img, Shape{2, 28, 28}),
                                  from_vector<float>({1.5f, -0.0f, 3e38f, 1e-45f}, Shape{4}),
                                  from_vector<double>({0.1, -1e-300, 2.0}, Shape{3, 1}),
                                  scalar(2.0, DType::F32),
                                  zeros(Shape{0, 3}, DType::U8),
                                  randn(Shape{200, 100}, 5)};
  for (bool gz : {false, true}) {
    for (size_t i = 0; i < ts.size(); ++i) {
      std::string name = "t";
      name += std::to_string(i);
      name += gz ? ".idx.gz" : ".idx";
      const std::string p = path(name);
      save_idx(p, ts[i], gz);
      EXPECT_EQ(static_cast<unsigned char>(read_bytes(p)[0]), gz ? 0x1f : 0x00);
      expect_same(load_idx(p), ts[i]);
    }
    // i64 is written as i32 and read back as i64
    const Tensor i = from_vector<int64_t>({-2147483648LL, -1, 0, 2147483647LL}, Shape{2, 2});
    save_idx(path("i.idx"), i, gz);
    expect_same(load_idx(path("i.idx")), i);
  }
  expect_error(
      [&] {
        save_idx(path("big.idx"), from_vector<int64_t>({1, 2147483648LL}, Shape{2}));
      },
      ErrorKind::InvalidArgument, {"element 1", "2147483648", "i32"});
}

TEST_F(Formats, IdxReadsNarrowIntegerTypes) {
  // i8 [-1, 5], i16 [-300], i32 [-70000] written by hand (big-endian)
  write_bytes(path("i8.idx"), std::string("\0\0\x09\x01\0\0\0\x02\xff\x05", 10));
  expect_same(load_idx(path("i8.idx")), from_vector<int64_t>({-1, 5}, Shape{2}));
  write_bytes(path("i16.idx"), std::string("\0\0\x0b\x01\0\0\0\x01\xfe\xd4", 10));
  expect_same(load_idx(path("i16.idx")), from_vector<int64_t>({-300}, Shape{1}));
  write_bytes(path("i32.idx"), std::string("\0\0\x0c\x01\0\0\0\x01\xff\xfe\xee\x90", 12));
  expect_same(load_idx(path("i32.idx")), from_vector<int64_t>({-70000}, Shape{1}));
}

TEST_F(Formats, IdxLyingAndTruncatedFilesAreIoErrors) {
  // 2^20 x 2^17 f64 = 1 TiB claimed, 8 bytes present: rejected before any allocation
  const std::string lie("\0\0\x0e\x02\0\x10\0\0\0\x02\0\0\0\0\0\0\0\0\0\0", 20);
  write_bytes(path("lie.idx"), lie);
  expect_error([&] { load_idx(path("lie.idx")); }, ErrorKind::Io, {path("lie.idx"), "1099511627776", "only 8"});
  // the same claim inside a gzip stream
  save_idx(path("ok.idx.gz"), from_vector<uint8_t>({1, 2, 3}, Shape{3}), true);
  std::string gz = read_bytes(path("ok.idx.gz"));
  write_bytes(path("cut.idx.gz"), gz.substr(0, gz.size() - 6));
  expect_error([&] { load_idx(path("cut.idx.gz")); }, ErrorKind::Io, {path("cut.idx.gz")});
  gz[gz.size() - 8] = static_cast<char>(gz[gz.size() - 8] ^ 0x40);  // the CRC
  write_bytes(path("crc.idx.gz"), gz);
  expect_error([&] { load_idx(path("crc.idx.gz")); }, ErrorKind::Io, {path("crc.idx.gz"), "corrupted"});
  write_bytes(path("ovf.idx"),
              std::string("\0\0\x0e\x04\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 20));
  expect_error([&] { load_idx(path("ovf.idx")); }, ErrorKind::Io, {"int64"});
  write_bytes(path("code.idx"), std::string("\0\0\x0a\x01\0\0\0\x01\0", 9));
  expect_error([&] { load_idx(path("code.idx")); }, ErrorKind::Io, {"byte offset 2", "type code"});
  write_bytes(path("short.idx"), std::string("\0\0\x08\x02\0\0\0\x03", 8));
  expect_error([&] { load_idx(path("short.idx")); }, ErrorKind::Io, {"dimension 1"});
  write_bytes(path("trail.idx"), std::string("\0\0\x08\x01\0\0\0\x01\x05\x06", 10));
  expect_error([&] { load_idx(path("trail.idx")); }, ErrorKind::Io, {"trailing"});
  expect_error([&] { load_idx(path("missing.idx")); }, ErrorKind::Io, {"cannot open"});
}

std::string npy_bytes(const std::string& dict, const std::string& payload) {
  std::string text = dict;
  while ((10 + text.size() + 1) % 64) text += ' ';
  text += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(text.size() & 0xff);
  out += static_cast<char>(text.size() >> 8);
  return out + text + payload;
}

TEST_F(Formats, NpyReadsFortranOrderBoolAndNarrowInts) {
  // fortran order [2, 3]: memory 0 1 2 3 4 5 holds columns, so row-major is 0 2 4 / 1 3 5
  std::string data;
  for (int64_t v = 0; v < 6; ++v) data.append(reinterpret_cast<const char*>(&v), 8);
  write_bytes(path("f.npy"), npy_bytes("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3), }", data));
  expect_same(load_npy(path("f.npy")), from_vector<int64_t>({0, 2, 4, 1, 3, 5}, Shape{2, 3}));
  write_bytes(path("b.npy"),
              npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\1\0\1", 3)));
  expect_same(load_npy(path("b.npy")), from_vector<uint8_t>({1, 0, 1}, Shape{3}));
  write_bytes(path("i2.npy"),
              npy_bytes("{'shape': (2,), 'descr': '<i2', 'fortran_order': False}", std::string("\xff\xff\x02\x00", 4)));
  expect_same(load_npy(path("i2.npy")), from_vector<int64_t>({-1, 2}, Shape{2}));
}

TEST_F(Formats, NpyLyingTruncatedAndUnsupportedFiles) {
  // 2^37 f64 elements (1 TiB) claimed, 16 bytes present
  write_bytes(path("lie.npy"),
              npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (137438953472,), }", std::string(16, '\0')));
  expect_error([&] { load_npy(path("lie.npy")); }, ErrorKind::Io, {path("lie.npy"), "1099511627776", "only 16"});
  write_bytes(path("ovf.npy"),
              npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""));
  expect_error([&] { load_npy(path("ovf.npy")); }, ErrorKind::Io, {"int64"});
  write_bytes(path("be.npy"), npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd"));
  expect_error([&] { load_npy(path("be.npy")); }, ErrorKind::UnsupportedDType, {"big-endian", "'>f4'"});
  write_bytes(path("c8.npy"), npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", "abcdefgh"));
  expect_error([&] { load_npy(path("c8.npy")); }, ErrorKind::UnsupportedDType, {"'<c8'"});
  write_bytes(path("key.npy"), npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", "abcd"));
  expect_error([&] { load_npy(path("key.npy")); }, ErrorKind::Io, {"header offset", "'x'"});
  save_npy(path("ok.npy"), randn(Shape{10, 10}, 1));
  const std::string ok = read_bytes(path("ok.npy"));
  for (size_t cut : {size_t{0}, size_t{5}, size_t{9}, size_t{40}, size_t{127}, ok.size() - 1}) {
    write_bytes(path("cut.npy"), ok.substr(0, cut));
    expect_error([&] { load_npy(path("cut.npy")); }, ErrorKind::Io, {path("cut.npy")});
  }
  write_bytes(path("magic.npy"), "PK\x03\x04 this is a zip");
  expect_error([&] { load_npy(path("magic.npy")); }, ErrorKind::Io, {"magic"});
}

TEST_F(Formats, NpzCorruptionIsDetected) {
  const Tensor t = randn(Shape{64, 64}, 9);
  for (bool compress : {false, true}) {
    const std::string p = path(compress ? "d.npz" : "s.npz");
    save_npz(p, {{"t", t}}, compress);
    std::string bytes = read_bytes(p);
    std::string flipped = bytes;
    flipped[200] = static_cast<char>(flipped[200] ^ 0x10);  // inside the member's data
    write_bytes(path("flip.npz"), flipped);
    expect_error([&] { load_npz(path("flip.npz")); }, ErrorKind::Io, {path("flip.npz"), "member 't.npy'"});
    write_bytes(path("cut.npz"), bytes.substr(0, bytes.size() / 2));
    expect_error([&] { load_npz(path("cut.npz")); }, ErrorKind::Io, {"end-of-central-directory"});
    // the central directory claims a 1 TiB-ish (0xfffffff0) uncompressed size
    std::string lie = bytes;
    const size_t eocd = lie.rfind(std::string("PK\x05\x06", 4));
    uint32_t cd = 0;
    std::memcpy(&cd, lie.data() + eocd + 16, 4);
    const uint32_t huge = 0xfffffff0u;
    std::memcpy(lie.data() + cd + 24, &huge, 4);
    if (!compress) std::memcpy(lie.data() + cd + 20, &huge, 4);
    write_bytes(path("lie.npz"), lie);
    expect_error([&] { load_npz(path("lie.npz")); }, ErrorKind::Io, {path("lie.npz")});
  }
  write_bytes(path("nozip.npz"), std::string(100, 'x'));
  expect_error([&] { load_npz(path("nozip.npz")); }, ErrorKind::Io, {"end-of-central-directory"});
}

TEST_F(Formats, CsvHeaderDelimiterMissingValues) {
  write_bytes(path("a.csv"), "x,\"y, z\",w\r\n1.5,-2,3e-2\r\n\r\n+4,inf,-0\r\n");
  CsvTable t = load_csv(path("a.csv"));
  EXPECT_EQ(t.columns, (std::vector<std::string>{"x", "y, z", "w"}));
  expect_same(t.values, from_vector<float>({1.5f, -2.0f, 3e-2f, 4.0f, INFINITY, -0.0f}, Shape{2, 3}));
  CsvOptions o;
  o.dtype = DType::F64;
  o.has_header = false;
  o.delimiter = '\t';
  write_bytes(path("b.tsv"), "0.1\t1e308\n1e400\t-1e-400\n");
  t = load_csv(path("b.tsv"), o);
  EXPECT_TRUE(t.columns.empty());
  expect_same(t.values, from_vector<double>({0.1, 1e308, INFINITY, -0.0}, Shape{2, 2}));
  write_bytes(path("m.csv"), "a,b\n1,2\n3,\n");
  expect_error([&] { load_csv(path("m.csv")); }, ErrorKind::Io, {path("m.csv"), "line 3, column 3", "'b'", "missing"});
  CsvOptions nan;
  nan.missing_as_nan = true;
  t = load_csv(path("m.csv"), nan);
  const auto v = values(t.values);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[2], 3.0);
  EXPECT_TRUE(std::isnan(v[3]));
  write_bytes(path("x.csv"), "a,b\n1,2\n3,4x\n");
  expect_error([&] { load_csv(path("x.csv")); }, ErrorKind::Io, {"line 3, column 3", "'4x'"});
  write_bytes(path("r.csv"), "a,b\n1,2,3\n");
  expect_error([&] { load_csv(path("r.csv")); }, ErrorKind::Io, {"line 2", "3 fields"});
  write_bytes(path("q.csv"), "a,b\n\"1,2\n");
  expect_error([&] { load_csv(path("q.csv")); }, ErrorKind::Io, {"line 2", "unterminated"});
  CsvOptions i64;
  i64.dtype = DType::I64;
  expect_error([&] { load_csv(path("a.csv"), i64); }, ErrorKind::UnsupportedDType, {"i64"});
  write_bytes(path("e.csv"), "a,b\n");
  t = load_csv(path("e.csv"));
  EXPECT_EQ(t.values.shape(), (Shape{0, 2}));
}

TEST_F(Formats, SafetensorsFolder) {
  std::filesystem::create_directory(path("m"));
  const Tensor a = randn(Shape{3, 4}, 1), b = arange(5), c = from_vector<uint8_t>({1, 2}, Shape{2});
  save_safetensors(path("m/model-00001-of-00002.safetensors"), {{"a", a}, {"b", b}});
  save_safetensors(path("m/model-00002-of-00002.safetensors"), {{"c", c}});
  auto m = load_safetensors_dir(path("m"));
  ASSERT_EQ(m.size(), 3u);
  expect_same(m.at("a"), a);
  expect_same(m.at("b"), b);
  expect_same(m.at("c"), c);
  // an index decides which files are read and must agree with them
  save_safetensors(path("m/extra.safetensors"), {{"stray", c}});
  write_bytes(path("m/model.safetensors.index.json"),
              R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                 "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  m = load_safetensors_dir(path("m"));
  EXPECT_EQ(m.size(), 3u);
  EXPECT_FALSE(m.count("stray"));
  write_bytes(path("m/model.safetensors.index.json"),
              R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { load_safetensors_dir(path("m")); }, ErrorKind::Io, {"'b'", "missing from field 'weight_map'"});
  write_bytes(path("m/model.safetensors.index.json"), R"({"weight_map": {"a": "../x.safetensors"}})");
  expect_error([&] { load_safetensors_dir(path("m")); }, ErrorKind::Io, {"not a file name inside the folder"});
  std::filesystem::create_directory(path("dup"));
  save_safetensors(path("dup/1.safetensors"), {{"w", a}});
  save_safetensors(path("dup/2.safetensors"), {{"w", a}});
  expect_error([&] { load_safetensors_dir(path("dup")); }, ErrorKind::Io, {"'w'", "1.safetensors", "2.safetensors"});
  std::filesystem::create_directory(path("none"));
  expect_error([&] { load_safetensors_dir(path("none")); }, ErrorKind::Io, {"no *.safetensors"});
}

// ---- The in-memory loaders (*_from_bytes, load_csv_from_string) are the file loaders' twins: on every input of
// the fuzz corpora (valid files, lying headers, truncations, bombs) they give the same tensors bit for bit, or
// the same error kind and message once the function's name is swapped (the source is named by the path here).
struct Outcome {
  bool ok = false;
  std::map<std::string, Tensor> tensors;
  ErrorKind kind{};
  std::string message;
};

Outcome outcome_of(const std::function<std::map<std::string, Tensor>()>& load) {
  Outcome o;
  try {
    o.tensors = load();
    o.ok = true;
  } catch (const Error& e) {
    o.kind = e.kind();
    o.message = e.message();
  }
  return o;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

void expect_twins(const Outcome& file, Outcome bytes, const std::string& file_fn, const std::string& bytes_fn,
                  const std::string& input, int& accepted, int& refused) {
  SCOPED_TRACE(input);
  ASSERT_EQ(bytes.ok, file.ok) << (file.ok ? bytes.message : file.message);
  if (file.ok) {
    ++accepted;
    ASSERT_EQ(bytes.tensors.size(), file.tensors.size());
    for (const auto& [name, t] : file.tensors) {
      ASSERT_TRUE(bytes.tensors.count(name)) << name;
      expect_same(bytes.tensors.at(name), t);
    }
    return;
  }
  ++refused;
  EXPECT_EQ(bytes.kind, file.kind) << bytes.message;
  EXPECT_NE(bytes.message.find(bytes_fn + ": " + input), std::string::npos) << bytes.message;
  EXPECT_EQ(replace_all(bytes.message, bytes_fn, file_fn), file.message);
}

TEST_F(Formats, FromBytesMatchesTheFileLoadersOnTheFuzzCorpora) {
  namespace fs = std::filesystem;
  const fs::path corpus = OXMERA_FUZZ_CORPUS_DIR;
  int accepted = 0, refused = 0;
  auto each = [&](const char* harness, const std::function<void(const std::string&, const std::string&)>& check) {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(corpus / harness)) {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      check(entry.path().string(), bytes);
      ++n;
    }
    EXPECT_GT(n, 3) << harness;
  };
  auto one = [](Tensor t) { return std::map<std::string, Tensor>{{"", std::move(t)}}; };
  for (const char* harness : {"safetensors", "checkpoint"})
    each(harness, [&](const std::string& p, const std::string& b) {
      expect_twins(outcome_of([&] { return load_safetensors(p); }),
                   outcome_of([&] { return load_safetensors_from_bytes(b.data(), b.size(), p); }), "load_safetensors",
                   "load_safetensors_from_bytes", p, accepted, refused);
      // The metadata too.
      const Outcome file = outcome_of([&] {
        std::map<std::string, Tensor> m;
        for (const auto& [k, v] : load_safetensors_with_metadata(p).metadata) m.emplace(k, scalar(double(v.size())));
        return m;
      });
      const Outcome bytes = outcome_of([&] {
        std::map<std::string, Tensor> m;
        for (const auto& [k, v] : load_safetensors_with_metadata_from_bytes(b.data(), b.size(), p).metadata)
          m.emplace(k, scalar(double(v.size())));
        return m;
      });
      EXPECT_EQ(bytes.ok, file.ok) << p;
      EXPECT_EQ(bytes.tensors.size(), file.tensors.size()) << p;
    });
  each("npy", [&](const std::string& p, const std::string& b) {
    expect_twins(outcome_of([&] { return one(load_npy(p)); }),
                 outcome_of([&] { return one(load_npy_from_bytes(b.data(), b.size(), p)); }), "load_npy",
                 "load_npy_from_bytes", p, accepted, refused);
  });
  each("npz", [&](const std::string& p, const std::string& b) {
    expect_twins(outcome_of([&] { return load_npz(p); }),
                 outcome_of([&] { return load_npz_from_bytes(b.data(), b.size(), p); }), "load_npz",
                 "load_npz_from_bytes", p, accepted, refused);
  });
  each("idx", [&](const std::string& p, const std::string& b) {
    expect_twins(outcome_of([&] { return one(load_idx(p)); }),
                 outcome_of([&] { return one(load_idx_from_bytes(b.data(), b.size(), p)); }), "load_idx",
                 "load_idx_from_bytes", p, accepted, refused);
  });
  // The csv corpus is the csv harness's: byte 0 picks the options, the rest is the file.
  each("csv", [&](const std::string& p, const std::string& b) {
    const uint8_t head = b.empty() ? 0 : static_cast<uint8_t>(b[0]);
    CsvOptions options;
    options.delimiter = ",;\t "[head % 4];
    options.has_header = (head & 4) != 0;
    options.missing_as_nan = (head & 8) != 0;
    options.dtype = (head & 16) != 0 ? DType::F64 : DType::F32;
    const std::string text = b.empty() ? b : b.substr(1);
    const std::string file = path("input.csv");
    {
      std::ofstream out(file, std::ios::binary);
      out.write(text.data(), static_cast<std::streamsize>(text.size()));
    }
    expect_twins(outcome_of([&] { return one(load_csv(file, options).values); }),
                 outcome_of([&] { return one(load_csv_from_string(text, options, file).values); }), "load_csv",
                 "load_csv_from_string", file, accepted, refused);
  });
  EXPECT_GT(accepted, 10);
  EXPECT_GT(refused, 20);
}

TEST_F(Formats, FromBytesBuffersAreNamedAndOwnNothing) {
  // Without a name, messages say how many bytes the buffer held.
  const std::string npy("\x93NUMPY\x01\x00", 8);
  try {
    (void)load_npy_from_bytes(npy.data(), npy.size());
    ADD_FAILURE() << "a truncated .npy loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(e.message().find("load_npy_from_bytes: a buffer of 8 bytes: "), std::string::npos) << e.message();
  }
  try {
    (void)load_safetensors_from_bytes("abc", 3, "blob");
    ADD_FAILURE() << "3 bytes loaded as safetensors";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_EQ(e.message(),
              "load_safetensors_from_bytes: blob: buffer of 3 bytes is too small for the 8-byte header "
              "length");
  }
  // An empty buffer is an empty input (no pointer needed), a null pointer with a size a caller mistake.
  EXPECT_THROW((void)load_idx_from_bytes(nullptr, 0), Error);
  try {
    (void)load_npz_from_bytes(nullptr, 5);
    ADD_FAILURE() << "a null pointer loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.message();
  }
  // A saved file read back from its bytes, and the bytes freed afterwards: the tensors own their storage.
  const Tensor w = randn(Shape{3, 4}, 5);
  save_safetensors(path("w.safetensors"), {{"w", w}}, {{"step", "3"}});
  std::ifstream in(path("w.safetensors"), std::ios::binary);
  auto* bytes = new std::string((std::istreambuf_iterator<char>(in)), {});
  const SafetensorsFile loaded = load_safetensors_with_metadata_from_bytes(bytes->data(), bytes->size());
  delete bytes;
  expect_same(loaded.tensors.at("w"), w);
  EXPECT_EQ(loaded.metadata.at("step"), "3");
  const CsvTable table = load_csv_from_string("a,b\n1,2\n3,4\n");
  EXPECT_EQ(table.columns, (std::vector<std::string>{"a", "b"}));
  expect_same(table.values, from_vector<float>({1, 2, 3, 4}, Shape{2, 2}));
}

}  // namespace
