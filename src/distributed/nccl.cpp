// NCCL, loaded at run time (nccl.hpp).
#include "distributed/nccl.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace oxmera::distributed::detail {

std::string NcclApi::error(const char* call, int result) const {
  const char* text = get_error_string != nullptr ? get_error_string(result) : nullptr;
  return std::string(call) + " failed: " + (text != nullptr ? text : "unknown NCCL error") + " (" +
         std::to_string(result) + ")";
}

std::string nccl_version_string(int code) {
  // NCCL_VERSION(X, Y, Z): X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z after.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

namespace {

struct Loaded {
  NcclApi api;
  bool ok = false;
  std::string why;
};

template <class Fn>
bool resolve(void* lib, const char* name, Fn& fn, std::string& why) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr && why.empty()) why = "it has no " + std::string(name);
  return fn != nullptr;
}

Loaded load() {
  Loaded l;
  const char* off = std::getenv("OXMERA_NCCL");
  if (off != nullptr && std::string(off) == "0") {
    l.why = "turned off by OXMERA_NCCL=0";
    return l;
  }
  const char* named = std::getenv("OXMERA_NCCL_LIBRARY");
  const std::string path = named != nullptr && *named != '\0' ? named : "libnccl.so.2";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    l.why = path + " did not load (" + (e != nullptr ? e : "no reason given") + ")";
    return l;
  }
  NcclApi& a = l.api;
  a.path = path;
  std::string missing;
  resolve(lib, "ncclGetVersion", a.get_version, missing);
  resolve(lib, "ncclGetUniqueId", a.get_unique_id, missing);
  resolve(lib, "ncclCommInitRank", a.comm_init_rank, missing);
  resolve(lib, "ncclCommDestroy", a.comm_destroy, missing);
  resolve(lib, "ncclCommAbort", a.comm_abort, missing);
  resolve(lib, "ncclCommGetAsyncError", a.comm_get_async_error, missing);
  resolve(lib, "ncclGetErrorString", a.get_error_string, missing);
  resolve(lib, "ncclAllReduce", a.all_reduce, missing);
  resolve(lib, "ncclBroadcast", a.broadcast, missing);
  resolve(lib, "ncclAllGather", a.all_gather, missing);
  resolve(lib, "ncclReduceScatter", a.reduce_scatter, missing);
  if (!missing.empty()) {
    l.why = path + " is not a usable NCCL: " + missing + " (NCCL 2.4 or later is needed)";
    dlclose(lib);
    return l;
  }
  if (a.get_version(&a.version) != kNcclSuccess || a.version < 2400) {
    l.why = path + " is NCCL " + nccl_version_string(a.version) + "; 2.4 or later is needed";
    dlclose(lib);
    return l;
  }
  l.ok = true;  // the library stays loaded for the process's life: communicators may outlive any owner
  return l;
}

}  // namespace

const NcclApi* nccl_api(std::string* why) noexcept {
  static const Loaded loaded = [] {
    try {
      return load();
    } catch (...) {  // std::string's allocations only
      Loaded l;
      l.why = "loading NCCL failed";
      return l;
    }
  }();
  if (!loaded.ok) {
    if (why != nullptr) *why = loaded.why;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace oxmera::distributed::detail
