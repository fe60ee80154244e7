#pragma once
// Dataset and array file formats: IDX (MNIST), CSV of numbers, NumPy .npy / .npz, folders of safetensors shards.
//
// Each loader has a *_from_bytes (CSV: _from_string) twin reading `size` bytes in memory, as np.load(BytesIO(b))
// or pandas.read_csv(StringIO(s)) do: same checks, same errors, naming `name` (or "a buffer of <size> bytes")
// where the file loader names the path. The tensors are copies: the bytes may be freed afterwards.
//
// Every malformed, truncated or lying input is an Io error naming the function, the file, the byte offset or
// line/column, and the field; a size a file claims is checked against the bytes that are really there (the
// file's size, or the bytes a compressed stream really decompresses to, counted in bounded chunks) before
// anything of that size is allocated. Caller mistakes (undefined tensor, a dtype a format cannot hold, a value
// out of range) are InvalidArgument or UnsupportedDType. Saves are atomic (a temporary file renamed over the
// target). oxmera's dtypes are F32, F64, I64 and U8; the mapping of each format's types is given below.
#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oxmera/tensor.hpp"

namespace oxmera {

// ---- IDX (the MNIST format): magic 00 00 <type> <rank>, <rank> big-endian u32 sizes, big-endian data.
// Reading maps type 0x08 (u8) to U8, 0x09 (i8), 0x0B (i16) and 0x0C (i32) to I64 (exact), 0x0D (f32) to F32 and
// 0x0E (f64) to F64. A file starting with the gzip magic 1f 8b is decompressed (a single gzip member; its CRC
// and length are checked). The data must be exactly what the sizes need: a short or a longer file is an error.
Tensor load_idx(const std::string& path);
Tensor load_idx_from_bytes(const void* data, size_t size, const std::string& name = "");
// Writes U8 as 0x08, F32 as 0x0D, F64 as 0x0E and I64 as 0x0C (i32: a value outside the i32 range is an
// InvalidArgument naming its index). Rank at most 255, every size below 2^32. gzip=true writes a gzip file.
void save_idx(const std::string& path, const Tensor& tensor, bool gzip = false);

// ---- CSV of numbers: one row per line (LF or CRLF), fields separated by `delimiter`, RFC 4180 quotes
// allowed around a field (no line breaks inside quotes). Blank lines are skipped. Numbers are decimal or
// scientific, with inf / nan accepted as numbers; a field that is empty (or only spaces) is missing.
struct CsvOptions {
  char delimiter = ',';
  bool has_header = true;       // the first line names the columns
  bool missing_as_nan = false;  // false: a missing value is an Io error naming line and column
  DType dtype = DType::F32;     // F32 or F64
};
struct CsvTable {
  std::vector<std::string> columns;  // the header's names (empty without a header)
  Tensor values;                     // [rows, columns]
};
CsvTable load_csv(const std::string& path, const CsvOptions& options = {});
CsvTable load_csv_from_string(std::string_view text, const CsvOptions& options = {}, const std::string& name = "");

// ---- NumPy .npy (format versions 1.0, 2.0 and 3.0). Read dtypes: <f4 → F32, <f8 → F64, <i8 → I64, |u1 → U8,
// |b1 → U8 (0 / 1), and <i4, <i2, |i1, <u4, <u2 widened to I64. fortran_order True is read into row-major order.
// Big-endian ('>') data is an UnsupportedDType error, as are other dtypes (structured, objects, f2, c8, ...).
Tensor load_npy(const std::string& path);
Tensor load_npy_from_bytes(const void* data, size_t size, const std::string& name = "");
// Writes version 1.0 (2.0 when the header needs it): F32 '<f4', F64 '<f8', I64 '<i8', U8 '|u1', C order.
void save_npy(const std::string& path, const Tensor& tensor);

// ---- NumPy .npz: a zip archive of .npy members (np.savez / np.savez_compressed). Members may be stored or
// deflated; zip64 records are read; every member's CRC-32 is checked. Names lose their ".npy" suffix, as in
// numpy. Members that are not .npy arrays, encrypted members and multi-disk archives are Io errors.
std::map<std::string, Tensor> load_npz(const std::string& path);
std::map<std::string, Tensor> load_npz_from_bytes(const void* data, size_t size, const std::string& name = "");
// Writes one "<name>.npy" member per tensor (stored, or deflated when compress is true), in map order.
void save_npz(const std::string& path, const std::map<std::string, Tensor>& tensors, bool compress = false);
void save_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
              bool compress = false);
// Braced lists, save_npz(path, {{"x", x}, {"y", y}}): members in the given order.
void save_npz(const std::string& path, std::initializer_list<std::pair<const std::string, Tensor>> tensors,
              bool compress = false);

// ---- A folder of safetensors shards (load_safetensors of include/oxmera/io.hpp, per file) as one map.
// When the folder holds model.safetensors.index.json (the HuggingFace index: {"weight_map": {name: file}}),
// the files it names are loaded and every tensor must be in the file the map names, and every tensor of those
// files in the map; otherwise every "*.safetensors" file of the folder is loaded (an error when there is none).
// A tensor name found in two shards is an Io error naming both files.
std::map<std::string, Tensor> load_safetensors_dir(const std::string& directory);

}  // namespace oxmera
