#pragma once
// NCCL, loaded at run time. A CUDA tensor's collective goes through NCCL when libnccl.so.2 loads (as OpenBLAS and
// the CUDA module are found at run time, oxmera links no NCCL and needs no NCCL header to build); otherwise it is
// staged through host memory and MPI. The few declarations of nccl.h this uses are restated here: NCCL's ABI
// (an opaque communicator, a 128-byte unique id, int enums) has been stable since 2.0, and 2.4 added the
// asynchronous-error and abort calls this requires.
#include <cstddef>
#include <cstdint>
#include <string>

namespace oxmera::distributed::detail {

// nccl.h's values (ncclResult_t, ncclDataType_t, ncclRedOp_t), restated.
enum NcclResult : int { kNcclSuccess = 0 };
enum NcclDataType : int { kNcclUint8 = 1, kNcclInt64 = 4, kNcclFloat32 = 7, kNcclFloat64 = 8 };
enum NcclRedOp : int { kNcclSum = 0, kNcclMax = 2, kNcclMin = 3 };
inline constexpr size_t kNcclUniqueIdBytes = 128;
struct NcclUniqueId {
  char internal[kNcclUniqueIdBytes];
};
using NcclComm = void*;

struct NcclApi {
  std::string path;  // what was loaded
  int version = 0;   // ncclGetVersion: 2.18.5 is 21805
  int (*get_version)(int*) = nullptr;
  int (*get_unique_id)(NcclUniqueId*) = nullptr;
  int (*comm_init_rank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  int (*comm_destroy)(NcclComm) = nullptr;
  int (*comm_abort)(NcclComm) = nullptr;
  int (*comm_get_async_error)(NcclComm, int*) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
  int (*all_reduce)(const void*, void*, size_t, int, int, NcclComm, void*) = nullptr;
  int (*broadcast)(const void*, void*, size_t, int, int, NcclComm, void*) = nullptr;
  int (*all_gather)(const void*, void*, size_t, int, NcclComm, void*) = nullptr;
  int (*reduce_scatter)(const void*, void*, size_t, int, int, NcclComm, void*) = nullptr;

  // "ncclAllReduce failed: unhandled cuda error (1)"
  std::string error(const char* call, int result) const;
};

// The loaded library, or nullptr with `why` (when given) saying why not: OXMERA_NCCL=0 turns it off;
// OXMERA_NCCL_LIBRARY names the file to load instead of libnccl.so.2; a library without one of the calls above
// is refused by name. Loaded once per process, at the first call; thread-safe; never throws.
const NcclApi* nccl_api(std::string* why = nullptr) noexcept;

// "2.18.5" from ncclGetVersion's code (2.8.4 and older: 2804; later: 21805).
std::string nccl_version_string(int code);

}  // namespace oxmera::distributed::detail
