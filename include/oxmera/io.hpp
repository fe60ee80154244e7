#pragma once
// safetensors I/O (https://github.com/huggingface/safetensors format).
//
// File layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON (an object mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional "__metadata__" string→string
// map), then the raw little-endian, row-major tensor data; offsets are relative to the end of the header.
//
// Saving writes F32, F64, I64 and U8 as "F32", "F64", "I64", "U8". Like the reference implementation the
// header is compact JSON padded with spaces to a multiple of 8 bytes, "__metadata__" comes first (keys sorted;
// omitted when empty), and the map overload orders tensors by descending dtype (I64, F64, F32, U8) then by
// name, so its output is byte-identical to the reference's; the vector overload keeps the given order.
// Tensors are written in logical row-major order (non-contiguous or non-CPU tensors are copied first).
// The save is atomic: a temporary file in the target's directory is written, fsync'ed and renamed over the
// target, then the directory is fsync'ed; on failure the temporary file is removed and the old target is
// untouched. Filesystem failures are Io errors; caller mistakes (undefined tensor, duplicate name, the
// reserved name "__metadata__", names or metadata that are not valid UTF-8) are InvalidArgument; errors from
// copying a tensor to the host propagate with their own kind (the temporary file is removed either way).
//
// Loading reads: F32, F64, I64, U8 as they are; F16 and BF16 converted exactly to F32 (subnormals,
// infinities and NaNs included); the integer types I8, I16, I32, U16, U32 widened exactly to I64; BOOL as U8
// (bytes copied). U64, the F8_* / F6_* / F4 types and unknown dtype strings are Io errors naming the tensor
// and the dtype. The whole header is validated before any tensor is allocated (header length ≤ 100 MB and
// within the file, a JSON object, no duplicate keys, exactly dtype / shape / data_offsets per tensor,
// non-negative shapes whose byte size does not overflow int64, offsets consistent with the shape, no
// overlaps, and the data section covered exactly, without gaps or trailing bytes, as the reference
// requires). Every violation is an Io error naming the file, the tensor (when there is one) and the problem.
#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "oxmera/tensor.hpp"

namespace oxmera {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Braced lists, save_safetensors(path, {{"w", w}, {"b", b}}): like the map overload (reference order).
void save_safetensors(const std::string& path, std::initializer_list<std::pair<const std::string, Tensor>> tensors,
                      const std::map<std::string, std::string>& metadata = {});

std::map<std::string, Tensor> load_safetensors(const std::string& path);
SafetensorsFile load_safetensors_with_metadata(const std::string& path);
// The same from `size` bytes in memory (what safetensors.torch.load(data) reads: a downloaded or memory-mapped
// blob), with the same checks and the same Io errors, which name `name` (or "a buffer of <size> bytes") where the
// file functions name the path. The tensors are copies: the bytes may be freed afterwards.
std::map<std::string, Tensor> load_safetensors_from_bytes(const void* data, size_t size, const std::string& name = "");
SafetensorsFile load_safetensors_with_metadata_from_bytes(const void* data, size_t size, const std::string& name = "");

}  // namespace oxmera
