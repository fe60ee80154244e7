// ctest nccl_abi_check: oxmera restates the few declarations of nccl.h it calls (src/distributed/nccl.hpp) so
// that it builds and runs without NCCL; where the CUDA toolkit ships nccl.h, this program is compiled against both
// and fails to compile if a restated value, the unique id's layout or a call's parameters differ from the header.
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "distributed/nccl.hpp"

namespace d = oxmera::distributed::detail;

// Two enumerators of different enums with the same value.
constexpr bool same_value(int ours, int theirs) { return ours == theirs; }
static_assert(same_value(d::kNcclSuccess, ncclSuccess));
static_assert(same_value(d::kNcclUint8, ncclUint8) && same_value(d::kNcclInt64, ncclInt64) &&
              same_value(d::kNcclFloat32, ncclFloat32) && same_value(d::kNcclFloat64, ncclFloat64));
static_assert(same_value(d::kNcclSum, ncclSum) && same_value(d::kNcclMax, ncclMax) && same_value(d::kNcclMin, ncclMin));
static_assert(d::kNcclUniqueIdBytes == NCCL_UNIQUE_ID_BYTES && sizeof(d::NcclUniqueId) == sizeof(ncclUniqueId) &&
              alignof(d::NcclUniqueId) == alignof(ncclUniqueId));

// Two parameter (or result) types pass the same way in the C calling convention: the same size, and both pointers,
// or both integers / enums, or the same-sized struct.
template <typename A, typename B>
constexpr bool same_abi() {
  if constexpr (std::is_pointer_v<A> || std::is_pointer_v<B>)
    return std::is_pointer_v<A> && std::is_pointer_v<B>;
  else if constexpr (std::is_class_v<A> || std::is_class_v<B>)
    return std::is_class_v<A> && std::is_class_v<B> && sizeof(A) == sizeof(B);
  else
    return (std::is_integral_v<A> || std::is_enum_v<A>)&&(std::is_integral_v<B> || std::is_enum_v<B>)&&sizeof(A) ==
           sizeof(B);
}
template <typename F>
struct Signature;
template <typename R, typename... A>
struct Signature<R (*)(A...)> {
  using Result = R;
  using Params = std::tuple<A...>;
};
template <typename Ours, typename Theirs, size_t... I>
constexpr bool same_params(std::index_sequence<I...>) {
  return (same_abi<std::tuple_element_t<I, typename Signature<Ours>::Params>,
                   std::tuple_element_t<I, typename Signature<Theirs>::Params>>() &&
          ...);
}
template <typename Ours, typename Theirs>
constexpr bool same_call() {
  using O = Signature<Ours>;
  using T = Signature<Theirs>;
  constexpr size_t n = std::tuple_size_v<typename O::Params>;
  if constexpr (n != std::tuple_size_v<typename T::Params>)
    return false;
  else
    return same_abi<typename O::Result, typename T::Result>() &&
           same_params<Ours, Theirs>(std::make_index_sequence<n>());
}
#define OXMERA_SAME_CALL(member, nccl_fn) \
  static_assert(same_call<decltype(d::NcclApi::member), decltype(&nccl_fn)>(), #nccl_fn "'s declaration differs")
OXMERA_SAME_CALL(get_version, ncclGetVersion);
OXMERA_SAME_CALL(get_unique_id, ncclGetUniqueId);
OXMERA_SAME_CALL(comm_init_rank, ncclCommInitRank);
OXMERA_SAME_CALL(comm_destroy, ncclCommDestroy);
OXMERA_SAME_CALL(comm_abort, ncclCommAbort);
OXMERA_SAME_CALL(comm_get_async_error, ncclCommGetAsyncError);
OXMERA_SAME_CALL(get_error_string, ncclGetErrorString);
OXMERA_SAME_CALL(all_reduce, ncclAllReduce);
OXMERA_SAME_CALL(broadcast, ncclBroadcast);
OXMERA_SAME_CALL(all_gather, ncclAllGather);
OXMERA_SAME_CALL(reduce_scatter, ncclReduceScatter);

int main() {
  // The version code's decoding, against the header's own macro.
  const std::string v = d::nccl_version_string(NCCL_VERSION_CODE);
  char want[32];
  std::snprintf(want, sizeof want, "%d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  if (v != want) {
    std::printf("FAIL: nccl_version_string(%d) is %s, the header says %s\n", NCCL_VERSION_CODE, v.c_str(), want);
    return 1;
  }
  std::printf("ok: src/distributed/nccl.hpp matches nccl.h of NCCL %s\n", want);
  return 0;
}
