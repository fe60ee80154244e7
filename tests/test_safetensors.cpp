// safetensors I/O: round trips, byte layout, the reference sample files, corrupted inputs, atomic saves.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

#ifndef OXMERA_SAFETENSORS_DATA_DIR
#error "OXMERA_SAFETENSORS_DATA_DIR must point at tests/data/safetensors"
#endif

namespace {
using namespace oxt;
namespace fs = std::filesystem;

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}
// A file with the given header text (unpadded) and data section.
std::string st_file(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}
uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class Safetensors : public oxt::TempDirTest {};

// ------------------------------------------------------------------------------------------- round trips
TEST_F(Safetensors, RoundTripEveryDtypeWithMetadata) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::map<std::string, Tensor> t;
  t["f32"] = from_vector<float>({1.5f, -0.0f, 1e-40f, inf, -inf, nan}, Shape{2, 3});
  t["f64"] = from_vector<double>({0.1, -1e308, 5e-324, std::numeric_limits<double>::quiet_NaN()}, Shape{2, 2});
  t["i64"] =
      from_vector<int64_t>({std::numeric_limits<int64_t>::min(), 0, std::numeric_limits<int64_t>::max()}, Shape{3, 1});
  t["u8"] = from_vector<uint8_t>({0, 127, 255}, Shape{3});
  t["scalar_f32"] = scalar(2.5);
  t["scalar_i64"] = scalar(-7, DType::I64);
  t["empty_f64"] = zeros(Shape{0}, DType::F64);
  t["empty_u8"] = zeros(Shape{2, 0, 3}, DType::U8);
  t["nested/name.with dots"] = ones(Shape{1, 1, 1, 1, 1, 1, 1, 2});
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"unicode", "\xce\xbb=\xe2\x88\x9e"}, {"", ""}};
  const auto p = path("all.safetensors");
  save_safetensors(p, t, meta);

  SafetensorsFile f = load_safetensors_with_metadata(p);
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), t.size());
  for (const auto& [name, want] : t) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.tensors.count(name));
    const Tensor& got = f.tensors.at(name);
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(got.is_contiguous());
    switch (want.dtype()) {
      case DType::F32:
        EXPECT_TRUE(same_bits(got.to_vector<float>(), want.to_vector<float>()));
        break;
      case DType::F64:
        EXPECT_TRUE(same_bits(got.to_vector<double>(), want.to_vector<double>()));
        break;
      case DType::I64:
        EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>());
        break;
      case DType::U8:
        EXPECT_EQ(got.to_vector<uint8_t>(), want.to_vector<uint8_t>());
        break;
    }
  }
  // load_safetensors gives the same tensors without the metadata
  auto plain = load_safetensors(p);
  EXPECT_EQ(plain.size(), t.size());
  EXPECT_EQ(plain.at("scalar_i64").item<int64_t>(), -7);
  EXPECT_EQ(plain.at("scalar_i64").dim(), 0);
}

TEST_F(Safetensors, NonContiguousTensorsAreSavedInLogicalOrder) {
  Tensor base = arange(0.0, 24.0, 1.0, DType::F32).reshape(Shape{2, 3, 4});
  std::map<std::string, Tensor> t;
  t["permuted"] = base.permute(Dims{2, 0, 1});
  t["strided"] = base.slice(2, 0, 4, 2);
  t["broadcast"] = from_vector<int64_t>({1, 2, 3}, Shape{3}).expand(Shape{2, 3});
  t["offset"] = base.select(0, 1).t();
  for (const auto& [name, v] : t) ASSERT_FALSE(v.is_contiguous()) << name;
  const auto p = path("views.safetensors");
  save_safetensors(p, t);
  auto got = load_safetensors(p);
  for (const auto& [name, want] : t) {
    SCOPED_TRACE(name);
    EXPECT_EQ(got.at(name).shape(), want.shape());
    if (want.dtype() == DType::F32)
      EXPECT_EQ(got.at(name).to_vector<float>(), want.to_vector<float>());
    else
      EXPECT_EQ(got.at(name).to_vector<int64_t>(), want.to_vector<int64_t>());
  }
  // The file holds exactly the logical bytes (8 elements of 4 bytes for "strided" etc.).
  EXPECT_EQ(fs::file_size(p) % 8, (24u * 4 + 12 * 4 + 6 * 8 + 12 * 4) % 8);
}

TEST_F(Safetensors, TensorsThatRequireGradSave) {
  Tensor w = randn(Shape{3, 2}, 1).requires_grad_();
  Tensor y = (w * 2.0).t();  // non-contiguous, has a grad_fn
  save_safetensors(path("g.safetensors"), {{"w", w}, {"y", y}});
  auto got = load_safetensors(path("g.safetensors"));
  EXPECT_EQ(got.at("w").to_vector<float>(), w.detach().to_vector<float>());
  EXPECT_EQ(got.at("y").to_vector<float>(), y.detach().to_vector<float>());
  EXPECT_FALSE(got.at("w").requires_grad());
}

// --------------------------------------------------------------------------------- byte layout
TEST_F(Safetensors, OutputIsByteIdenticalToTheReferenceImplementation) {
  // Expected bytes are those of the reference implementation's own serialization tests.
  const std::vector<float> v{0, 1, 2, 3, 4, 5};
  save_safetensors(path("a.safetensors"), {{"attn.0", from_vector<float>(v, Shape{1, 2, 3})}});
  EXPECT_EQ(read_bytes(path("a.safetensors")),
            le64(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + raw(v));
  save_safetensors(path("b.safetensors"), {{"attn0", from_vector<float>(v, Shape{1, 1, 2, 3})}});
  EXPECT_EQ(read_bytes(path("b.safetensors")),
            le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       " + raw(v));
  save_safetensors(path("c.safetensors"), std::map<std::string, Tensor>{});
  EXPECT_EQ(read_bytes(path("c.safetensors")), le64(8) + "{}      ");
  save_safetensors(path("d.safetensors"), std::map<std::string, Tensor>{}, {{"framework", "pt"}});
  EXPECT_EQ(read_bytes(path("d.safetensors")), le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  EXPECT_TRUE(load_safetensors(path("c.safetensors")).empty());
  EXPECT_EQ(load_safetensors_with_metadata(path("d.safetensors")).metadata.at("framework"), "pt");
}

TEST_F(Safetensors, MapOverloadUsesReferenceOrderVectorOverloadKeepsOrder) {
  std::map<std::string, Tensor> t{{"a_u8", zeros(Shape{3}, DType::U8)},
                                  {"b_f32", zeros(Shape{1})},
                                  {"a_f32", zeros(Shape{1})},
                                  {"z_i64", zeros(Shape{1}, DType::I64)},
                                  {"c_f64", zeros(Shape{1}, DType::F64)},
                                  {"a_i64", zeros(Shape{1}, DType::I64)}};
  save_safetensors(path("m.safetensors"), t);
  const std::string bytes = read_bytes(path("m.safetensors"));
  std::vector<size_t> pos;
  for (const char* name : {"\"a_i64\"", "\"z_i64\"", "\"c_f64\"", "\"a_f32\"", "\"b_f32\"", "\"a_u8\""})
    pos.push_back(bytes.find(name));
  for (size_t i = 0; i + 1 < pos.size(); ++i) EXPECT_LT(pos[i], pos[i + 1]) << i;
  // data offsets follow the header order: the 8-byte tensors come first, so the U8 one ends the file
  EXPECT_NE(bytes.find(R"("a_u8":{"dtype":"U8","shape":[3],"data_offsets":[32,35]})"), std::string::npos);

  std::vector<std::pair<std::string, Tensor>> ordered{{"z", from_vector<uint8_t>({9}, Shape{1})},
                                                      {"a", from_vector<double>({1.0}, Shape{1})}};
  save_safetensors(path("v.safetensors"), ordered);
  const std::string vb = read_bytes(path("v.safetensors"));
  EXPECT_LT(vb.find("\"z\""), vb.find("\"a\""));
  auto got = load_safetensors(path("v.safetensors"));  // unaligned F64 after a 1-byte tensor
  EXPECT_EQ(got.at("a").item<double>(), 1.0);
  EXPECT_EQ(got.at("z").item<uint8_t>(), 9);
}

TEST_F(Safetensors, SaveRejectsBadArguments) {
  const auto p = path("bad.safetensors");
  std::vector<std::pair<std::string, Tensor>> dup{{"x", zeros(Shape{1})}, {"x", zeros(Shape{1})}};
  EXPECT_OXM_ERROR(save_safetensors(p, dup), InvalidArgument, "duplicate tensor name 'x'");
  EXPECT_OXM_ERROR(save_safetensors(p, {{"__metadata__", zeros(Shape{1})}}), InvalidArgument, "__metadata__");
  EXPECT_OXM_ERROR(save_safetensors(p, {{"u", Tensor()}}), InvalidArgument, "'u' is undefined");
  EXPECT_OXM_ERROR(save_safetensors(p, {{std::string("bad\xff"), zeros(Shape{1})}}), InvalidArgument, "UTF-8");
  EXPECT_OXM_ERROR(save_safetensors(p, {{"x", zeros(Shape{1})}}, {{"k", "\xc3"}}), InvalidArgument, "UTF-8");
  EXPECT_TRUE(listing().empty());
}

// ----------------------------------------------------------------------------- reference sample files
TEST_F(Safetensors, ReferenceSampleFilesLoad) {
  const std::string data = OXMERA_SAFETENSORS_DATA_DIR;
  const std::vector<int64_t> signed_vals{-3, -2, -1, 0, 1, 2};
  struct Want {
    DType dtype;
    std::vector<double> values;
  };
  auto as_i64 = [](std::vector<int64_t> v) { return std::vector<double>(v.begin(), v.end()); };
  const std::map<std::string, Want> want{
      {"B", {DType::U8, {253, 254, 255, 0, 1, 2}}},                              // U8
      {"b", {DType::I64, as_i64(signed_vals)}},                                  // I8 widened
      {"H", {DType::I64, {65533, 65534, 65535, 0, 1, 2}}},                       // U16 widened
      {"h", {DType::I64, as_i64(signed_vals)}},                                  // I16 widened
      {"I", {DType::I64, {4294967293.0, 4294967294.0, 4294967295.0, 0, 1, 2}}},  // U32 widened
      {"i", {DType::I64, as_i64(signed_vals)}},                                  // I32 widened
      {"e", {DType::F32, as_i64(signed_vals)}},                                  // F16 converted
      {"f", {DType::F32, as_i64(signed_vals)}},                                  // F32
      {"d", {DType::F64, as_i64(signed_vals)}},                                  // F64
  };
  auto check = [&](const std::string& name, const Tensor& t) {
    SCOPED_TRACE(name);
    const Want& w = want.at(name);
    EXPECT_EQ(t.dtype(), w.dtype);
    EXPECT_EQ(t.shape(), Shape{6});
    std::vector<double> got;
    if (t.dtype() == DType::U8) {
      for (uint8_t v : t.to_vector<uint8_t>()) got.push_back(v);
    } else if (t.dtype() == DType::I64) {
      for (int64_t v : t.to_vector<int64_t>()) got.push_back(static_cast<double>(v));
    } else {
      got = values(t);
    }
    EXPECT_EQ(got, w.values);
  };
  for (const auto& [name, w] : want) {
    SafetensorsFile f = load_safetensors_with_metadata(data + "/" + name + ".safetensors");
    EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"test", "a"}}));
    ASSERT_EQ(f.tensors.size(), 1u) << name;
    check(name, f.tensors.begin()->second);
  }
  SafetensorsFile all = load_safetensors_with_metadata(data + "/overall.safetensors");
  EXPECT_EQ(all.metadata.at("test"), "a");
  ASSERT_EQ(all.tensors.size(), want.size());
  for (const auto& [name, t] : all.tensors) check(name, t);

  // Re-saving what was loaded gives a file the loader accepts (in the current reference layout).
  save_safetensors(path("resaved.safetensors"), all.tensors, all.metadata);
  EXPECT_EQ(load_safetensors(path("resaved.safetensors")).size(), want.size());
}

// ------------------------------------------------------------------------------------- conversions
TEST_F(Safetensors, F16AndBF16ConvertExactlyForEveryBitPattern) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  const std::string data = raw(all);
  const std::string header = R"({"h":{"dtype":"F16","shape":[256,256],"data_offsets":[0,131072]},)"
                             R"("b":{"dtype":"BF16","shape":[65536],"data_offsets":[131072,262144]}})";
  write_bytes(path("half.safetensors"), st_file(header, data + data));
  auto t = load_safetensors(path("half.safetensors"));
  ASSERT_EQ(t.at("h").dtype(), DType::F32);
  const auto h = t.at("h").to_vector<float>();
  const auto b = t.at("b").to_vector<float>();
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint32_t sign = i >> 15, exp = (i >> 10) & 0x1f, man = i & 0x3ff;
    const double mag = exp == 0   ? std::ldexp(static_cast<double>(man), -24)
                       : exp < 31 ? std::ldexp(1.0 + man / 1024.0, static_cast<int>(exp) - 15)
                                  : 0.0;
    if (exp == 31) {  // inf / NaN keep sign and payload
      EXPECT_EQ(f32_bits(h[i]), (sign << 31) | 0x7f800000u | (man << 13)) << i;
    } else {
      const float want = static_cast<float>(sign ? -mag : mag);
      EXPECT_EQ(f32_bits(h[i]), f32_bits(want)) << i;  // exact, -0 included
    }
    EXPECT_EQ(f32_bits(b[i]), i << 16) << i;
  }
  EXPECT_EQ(h[0x0001], std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(h[0x7bff], 65504.0f);               // largest finite
  EXPECT_TRUE(std::isinf(h[0xfc00]) && h[0xfc00] < 0);
  EXPECT_TRUE(std::isnan(h[0x7e00]));
}

TEST_F(Safetensors, NarrowIntegersAndBoolWidenExactly) {
  const std::vector<int8_t> i8{-128, 127, -1};
  const std::vector<int16_t> i16{-32768, 32767};
  const std::vector<int32_t> i32{std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  const std::vector<uint16_t> u16{0, 65535};
  const std::vector<uint32_t> u32{0, 4294967295u};
  const std::vector<uint8_t> bools{1, 0, 1, 1};
  const std::string header =
      R"({"i8":{"dtype":"I8","shape":[3],"data_offsets":[0,3]},"i16":{"dtype":"I16","shape":[2],"data_offsets":[3,7]},)"
      R"("i32":{"dtype":"I32","shape":[2],"data_offsets":[7,15]},"u16":{"dtype":"U16","shape":[2],"data_offsets":[15,19]},)"
      R"("u32":{"dtype":"U32","shape":[2],"data_offsets":[19,27]},"m":{"dtype":"BOOL","shape":[2,2],"data_offsets":[27,31]}})";
  write_bytes(path("ints.safetensors"),
              st_file(header, raw(i8) + raw(i16) + raw(i32) + raw(u16) + raw(u32) + raw(bools)));
  auto t = load_safetensors(path("ints.safetensors"));
  EXPECT_EQ(t.at("i8").to_vector<int64_t>(), (std::vector<int64_t>{-128, 127, -1}));
  EXPECT_EQ(t.at("i16").to_vector<int64_t>(), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(t.at("i32").to_vector<int64_t>(), (std::vector<int64_t>{-2147483648LL, 2147483647LL}));
  EXPECT_EQ(t.at("u16").to_vector<int64_t>(), (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(t.at("u32").to_vector<int64_t>(), (std::vector<int64_t>{0, 4294967295LL}));
  EXPECT_EQ(t.at("m").dtype(), DType::U8);
  EXPECT_EQ(t.at("m").to_vector<uint8_t>(), bools);
  EXPECT_EQ(t.at("m").shape(), (Shape{2, 2}));
}

TEST_F(Safetensors, UnsupportedDtypesAreTypedErrorsNamingTensorAndDtype) {
  for (const char* dt : {"U64", "F8_E4M3", "F8_E5M2", "F128", "f32", ""}) {
    SCOPED_TRACE(dt);
    const auto p = path("dt.safetensors");
    write_bytes(p, st_file(std::string(R"({"weights":{"dtype":")") + dt + R"(","shape":[2],"data_offsets":[0,16]}})",
                           std::string(16, '\0')));
    EXPECT_OXM_ERROR(load_safetensors(p), Io, std::string("tensor 'weights'"));
    EXPECT_OXM_ERROR(load_safetensors(p), Io, std::string("dtype ") + dt);
    EXPECT_OXM_ERROR(load_safetensors(p), Io, p);
  }
}

// ------------------------------------------------------------------------------------ corrupted input
TEST_F(Safetensors, TruncatedFilesAtEveryLengthAreIoErrors) {
  const auto good = path("good.safetensors");
  save_safetensors(good, {{"a", arange(0.0, 10.0, 1.0, DType::F32)}, {"b", from_vector<int64_t>({1, 2}, Shape{2})}},
                   {{"k", "v"}});
  const std::string bytes = read_bytes(good);
  ASSERT_GT(bytes.size(), 100u);
  const auto p = path("cut.safetensors");
  for (size_t len = 0; len < bytes.size(); ++len) {
    write_bytes(p, bytes.substr(0, len));
    EXPECT_EQ(error_kind_of([&] { load_safetensors(p); }), ErrorKind::Io) << "length " << len;
  }
  EXPECT_OXM_ERROR(load_safetensors(p), Io, "outside the data section");
  write_bytes(p, bytes.substr(0, 5));
  EXPECT_OXM_ERROR(load_safetensors(p), Io, "too small");
  write_bytes(p, bytes + "x");
  EXPECT_OXM_ERROR(load_safetensors(p), Io, "1 trailing bytes");
}

TEST_F(Safetensors, CorruptedHeadersAreIoErrorsNamingFileTensorAndProblem) {
  const std::string d16(16, '\0');
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };
  const std::string x4 = entry("x", "F32", "[4]", "[0,16]");
  struct Case {
    const char* what;
    std::string bytes;
    std::string needle;
  };
  std::string deep(20000, '[');
  std::string long_shape = "1";
  for (int i = 0; i < 99; ++i) long_shape += ",1";
  const std::vector<Case> cases{
      {"header longer than file", le64(1000) + "{}", "larger than the rest of the file"},
      {"huge header length", le64(uint64_t{1} << 63) + "{}", "exceeds the limit"},
      {"max header length", le64(~uint64_t{0}) + "{}", "exceeds the limit"},
      {"just over 100 MB", le64(100'000'001) + "{}", "exceeds the limit"},
      {"empty header", st_file("", ""), "not valid UTF-8 JSON"},
      {"invalid JSON", st_file("{\"x\":", d16), "not valid UTF-8 JSON"},
      {"trailing garbage", st_file("{}}", ""), "not valid UTF-8 JSON"},
      {"NUL padding", st_file(std::string("{}") + '\0', ""), "NUL byte"},
      {"NUL then more", st_file(std::string("{}") + '\0' + "{\"x\":1}", ""), "NUL byte"},
      {"invalid UTF-8", st_file("{\"x\xff\":{}}", ""), "not valid UTF-8 JSON"},
      {"array header", st_file("[1,2]", ""), "must be a JSON object"},
      {"string header", st_file("\"hi\"", ""), "must be a JSON object"},
      {"number header", st_file("42", ""), "must be a JSON object"},
      {"deep nesting", st_file(deep, ""), "nested too deeply"},
      {"long array", st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[" + long_shape + "]}}", ""),
       "more than 64 elements"},
      {"entry not object", st_file("{\"x\":[1]}", ""), "tensor 'x': the entry must be a JSON object"},
      {"missing dtype", st_file("{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, '\0')),
       "tensor 'x': missing field 'dtype'"},
      {"missing offsets", st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", std::string(4, '\0')),
       "tensor 'x': missing field 'data_offsets'"},
      {"extra field",
       st_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"y\":1}}", std::string(4, '\0')),
       "tensor 'x': unexpected field 'y'"},
      {"dtype not string", st_file("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, '\0')),
       "tensor 'x': dtype must be a string"},
      {"wrong dtype", st_file("{" + entry("x", "float32", "[4]", "[0,16]") + "}", d16), "unknown dtype float32"},
      {"negative shape", st_file("{" + entry("x", "F32", "[-4]", "[0,16]") + "}", d16), "negative"},
      {"float shape", st_file("{" + entry("x", "F32", "[4.0]", "[0,16]") + "}", d16), "negative or non-integer"},
      {"string shape", st_file("{" + entry("x", "F32", "[\"4\"]", "[0,16]") + "}", d16), "non-negative integers"},
      {"shape not array", st_file("{" + entry("x", "F32", "4", "[0,16]") + "}", d16), "shape must be an array"},
      {"overflowing shape", st_file("{" + entry("x", "F32", "[1099511627776,1099511627776]", "[0,16]") + "}", d16),
       "more bytes than int64"},
      {"byte count overflow", st_file("{" + entry("x", "F64", "[2305843009213693952]", "[0,16]") + "}", d16),
       "more bytes than int64"},
      {"shape over int64", st_file("{" + entry("x", "U8", "[18446744073709551615]", "[0,16]") + "}", d16),
       "too large for int64"},
      {"shape over uint64", st_file("{" + entry("x", "U8", "[99999999999999999999999]", "[0,16]") + "}", d16),
       "negative or non-integer"},
      {"offsets out of range", st_file("{" + entry("x", "F32", "[4]", "[16,32]") + "}", d16),
       "outside the data section"},
      {"huge offsets",
       st_file("{" + entry("x", "U8", "[16]", "[18446744073709551599,18446744073709551615]") + "}", d16),
       "outside the data section"},
      {"offsets reversed", st_file("{" + entry("x", "F32", "[0]", "[16,0]") + "}", d16), "end before they begin"},
      {"three offsets", st_file("{" + entry("x", "F32", "[4]", "[0,16,16]") + "}", d16), "[begin, end]"},
      {"negative offset", st_file("{" + entry("x", "F32", "[4]", "[-16,0]") + "}", d16), "non-negative integers"},
      {"offsets vs shape", st_file("{" + entry("x", "F32", "[3]", "[0,16]") + "}", d16), "need 12"},
      {"overlap", st_file("{" + x4 + "," + entry("y", "F32", "[2]", "[8,16]") + "}", d16), "overlaps tensor 'x'"},
      {"empty inside other", st_file("{" + x4 + "," + entry("e", "F32", "[0]", "[8,8]") + "}", d16),
       "tensor 'e' (bytes [8, 8)) overlaps tensor 'x'"},
      {"gap", st_file("{" + entry("x", "F32", "[2]", "[0,8]") + "," + entry("y", "F32", "[1]", "[12,16]") + "}", d16),
       "gap of 4 bytes in the data section before tensor 'y'"},
      {"gap at start", st_file("{" + entry("y", "F32", "[2]", "[8,16]") + "}", d16), "before tensor 'y'"},
      {"not covered", st_file("{" + entry("x", "F32", "[2]", "[0,8]") + "}", d16), "8 trailing bytes"},
      {"data but no tensors", st_file("{}", d16), "16 trailing bytes"},
      {"duplicate tensor", st_file("{" + x4 + "," + x4 + "}", d16), "duplicate tensor name 'x'"},
      {"duplicate field",
       st_file("{\"x\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", d16),
       "duplicate key 'dtype'"},
      {"duplicate metadata key", st_file("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}," + x4 + "}", d16),
       "duplicate key 'a'"},
      {"metadata not object", st_file("{\"__metadata__\":\"a\"," + x4 + "}", d16), "__metadata__ must be an object"},
      {"metadata value not string", st_file("{\"__metadata__\":{\"a\":1}," + x4 + "}", d16),
       "__metadata__ value of 'a' must be a string"},
  };
  const auto p = path("corrupt.safetensors");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    write_bytes(p, c.bytes);
    EXPECT_OXM_ERROR(load_safetensors(p), Io, c.needle);
    EXPECT_OXM_ERROR(load_safetensors(p), Io, p);
  }
}

TEST_F(Safetensors, LyingHeadersDoNotAllocateTheClaimedSize) {
  // Claims 4 GiB (and then 2^80 elements) in a file of a few bytes: must fail before allocating anything.
  const int64_t claimed = int64_t{1} << 32;
  const std::string lie =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[1073741824],\"data_offsets\":[0," + std::to_string(claimed) + "]}}";
  const std::string lie2 =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,16]}}";
  const auto p = path("lie.safetensors");
  rusage ru0{};
  getrusage(RUSAGE_SELF, &ru0);
  const MemoryStats before = memory_stats();
  write_bytes(p, st_file(lie, std::string(16, '\0')));
  EXPECT_OXM_ERROR(load_safetensors(p), Io, "outside the data section");
  write_bytes(p, st_file(lie, ""));
  EXPECT_OXM_ERROR(load_safetensors(p), Io, "outside the data section");
  write_bytes(p, st_file(lie2, std::string(16, '\0')));
  EXPECT_OXM_ERROR(load_safetensors(p), Io, "more bytes than int64");
  const MemoryStats after = memory_stats();
  rusage ru1{};
  getrusage(RUSAGE_SELF, &ru1);
  EXPECT_LT(after.peak_allocated_bytes - before.peak_allocated_bytes, claimed / 1024);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_LT((ru1.ru_maxrss - ru0.ru_maxrss) * 1024, claimed / 16);  // ru_maxrss is in KiB
}

TEST_F(Safetensors, LoadOfMissingPathOrDirectoryIsIoError) {
  EXPECT_OXM_ERROR(load_safetensors(path("nope.safetensors")), Io, "nope.safetensors");
  EXPECT_OXM_ERROR(load_safetensors(dir_), Io, "not a regular file");
}

// ----------------------------------------------------------------------------------------- atomic save
TEST_F(Safetensors, SaveReplacesTheTargetAndLeavesNoTemporaryFile) {
  const auto p = path("model.safetensors");
  save_safetensors(p, {{"w", zeros(Shape{1000})}});
  save_safetensors(p, {{"w", ones(Shape{3})}});
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(load_safetensors(p).at("w").to_vector<float>(), (std::vector<float>{1, 1, 1}));
  // relative path in the current directory
  const auto cwd = fs::current_path();
  fs::current_path(dir_);
  save_safetensors("rel.safetensors", {{"w", ones(Shape{2})}});
  fs::current_path(cwd);
  EXPECT_EQ(load_safetensors(path("rel.safetensors")).at("w").numel(), 2);
}

TEST_F(Safetensors, FailedSaveLeavesTheOldFileAndNoTemporaryFile) {
  const auto p = path("model.safetensors");
  save_safetensors(p, {{"w", from_vector<float>({1, 2, 3}, Shape{3})}});
  const std::string old = read_bytes(p);

  // 1. The write itself fails: a child process limited to 64 KiB files (RLIMIT_FSIZE, EFBIG) saves 4 MiB.
  Tensor big = full(Shape{1 << 20}, 2.0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 << 10, 64 << 10};
    setrlimit(RLIMIT_FSIZE, &lim);
    try {
      save_safetensors(p, {{"w", big}});
    } catch (const Error& e) {
      _exit(e.kind() == ErrorKind::Io && std::string(e.what()).find("write failed") != std::string::npos ? 0 : 2);
    } catch (...) {
      _exit(3);
    }
    _exit(1);  // no error: the limit did not bite
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: wrong error, 3: foreign exception";
  EXPECT_EQ(read_bytes(p), old);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});

  // 2. The rename fails: the target is a non-empty directory.
  const auto d = path("adir");
  fs::create_directory(d);
  write_bytes(d + "/keep", "x");
  EXPECT_OXM_ERROR(save_safetensors(d, {{"w", ones(Shape{4})}}), Io, "cannot rename");
  EXPECT_EQ(read_bytes(d + "/keep"), "x");
  EXPECT_EQ(listing(), (std::vector<std::string>{"adir", "model.safetensors"}));

  // 3. The directory does not exist.
  EXPECT_OXM_ERROR(save_safetensors(path("missing/x.safetensors"), {{"w", ones(Shape{4})}}), Io,
                   "cannot create the temporary file");
  EXPECT_EQ(load_safetensors(p).at("w").to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST_F(Safetensors, KilledMidSaveLeavesTheOldFileLoadable) {
  const auto p = path("model.safetensors");
  save_safetensors(p, {{"w", from_vector<float>({1, 2, 3}, Shape{3})}});
  const std::string old = read_bytes(p);
  Tensor big = full(Shape{int64_t{64} << 20}, 1.0);  // 256 MiB
  bool killed_mid_write = false;
  for (int attempt = 0; attempt < 3 && !killed_mid_write; ++attempt) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        save_safetensors(p, {{"w", big}});
      } catch (...) {
        _exit(3);
      }
      _exit(0);
    }
    // Kill the child as soon as its temporary file has data in it.
    bool seen = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!seen && std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) break;  // finished before we saw it
      for (const auto& e : fs::directory_iterator(dir_)) {
        std::error_code ec;
        if (e.path().filename().string().rfind(".model.safetensors.tmp", 0) == 0 && fs::file_size(e.path(), ec) > 0) {
          ::kill(pid, SIGKILL);
          seen = true;
          break;
        }
      }
      if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    int status = 0;
    if (!seen) ::kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    killed_mid_write = seen && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (!killed_mid_write) save_safetensors(p, {{"w", from_vector<float>({1, 2, 3}, Shape{3})}});  // retry
  }
  ASSERT_TRUE(killed_mid_write) << "could not catch the child mid-write";
  EXPECT_EQ(read_bytes(p), old);
  EXPECT_EQ(load_safetensors(p).at("w").to_vector<float>(), (std::vector<float>{1, 2, 3}));
  // The killed child's partial temporary file is the only other entry; it is never the target.
  const auto names = listing();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], "model.safetensors");
  EXPECT_EQ(names[0].rfind(".model.safetensors.tmp", 0), 0u);
}

}  // namespace
