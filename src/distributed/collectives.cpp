// oxmera::distributed over MPI: process groups and non-blocking collectives with a mismatch check and timeouts.
//
// Every collective is two MPI operations. First a descriptor (collective, dtype, op, root, shape) is all-gathered
// on the group's *control* communicator, so that every rank sees every rank's call and a mismatch becomes the
// same typed error everywhere before any data moves. Then the data collective runs on the group's *data*
// communicator. Descriptors are sent when the collective is called, so the control communicator sees the
// program's order; data collectives are started by progress(), strictly in the order they were called (a later
// one never starts before an earlier one's check has completed), so the data communicator sees that order too,
// whatever the timing. Completion is found by MPI_Test polling, which is what lets wait() give up after a timeout
// instead of blocking forever inside MPI.
//
// CUDA tensors take NCCL (loaded at run time, nccl.hpp) when every rank of the group passes a CUDA tensor and has
// NCCL: the descriptor carries each rank's wish (not compared: it is the one field that may differ), and the data
// collective is enqueued on the device's stream in the same strictly ordered progress() as MPI's, completion being a
// marker recorded behind it. Otherwise every rank stages through host memory and MPI, with the same results.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "distributed/nccl.hpp"
#include "ops/device_stream.hpp"
#include "oxmera/autograd.hpp"
#include "oxmera/distributed.hpp"
#include "tensor/tensor_impl.hpp"

#ifdef OXMERA_WITH_MPI
#include <mpi.h>
#endif

namespace oxmera::distributed {

namespace {
std::atomic<int64_t>& timeout_ms() {
  static std::atomic<int64_t> ms{5 * 60 * 1000};
  return ms;
}
}  // namespace

void set_default_timeout(std::chrono::milliseconds timeout) {
  OXM_CHECK(timeout.count() > 0, InvalidArgument,
            "distributed::set_default_timeout: the timeout must be positive, got ", timeout.count(), " ms");
  timeout_ms() = timeout.count();
}
std::chrono::milliseconds default_timeout() { return std::chrono::milliseconds(timeout_ms().load()); }

#ifndef OXMERA_WITH_MPI

namespace detail {
struct GroupState {
  std::vector<int> ranks;
};
struct WorkState {};
}  // namespace detail

namespace {
[[noreturn]] void unavailable(const char* fn) {
  OXM_FAIL(BackendUnavailable, "distributed::", fn,
           ": this oxmera was built without MPI (configured with OXMERA_MPI=OFF, or no MPI was found); install "
           "an MPI (Debian: libopenmpi-dev openmpi-bin) and configure with -DOXMERA_MPI=ON");
}
}  // namespace

bool is_available() noexcept { return false; }
std::string backend_description() { return "not compiled in"; }
std::string cuda_transport() { return "none: this oxmera was built without MPI"; }
std::string cuda_transport(const ProcessGroup&) { return cuda_transport(); }
void init() { unavailable("init"); }
bool is_initialized() noexcept { return false; }
void finalize() {}
int rank() { unavailable("rank"); }
int world_size() { unavailable("world_size"); }
int local_rank() { unavailable("local_rank"); }
bool ProcessGroup::is_member() const { unavailable("ProcessGroup::is_member"); }
int ProcessGroup::rank() const { unavailable("ProcessGroup::rank"); }
int ProcessGroup::size() const { unavailable("ProcessGroup::size"); }
const std::vector<int>& ProcessGroup::ranks() const { unavailable("ProcessGroup::ranks"); }
ProcessGroup world() { unavailable("world"); }
ProcessGroup new_group(const std::vector<int>&) { unavailable("new_group"); }
void Work::wait(std::optional<std::chrono::milliseconds>) { unavailable("Work::wait"); }
bool Work::is_completed() { unavailable("Work::is_completed"); }
Tensor Work::result() const { unavailable("Work::result"); }
void all_reduce(Tensor&, ReduceOp, const ProcessGroup&) { unavailable("all_reduce"); }
Work all_reduce_async(Tensor&, ReduceOp, const ProcessGroup&) { unavailable("all_reduce_async"); }
void broadcast(Tensor&, int, const ProcessGroup&) { unavailable("broadcast"); }
Work broadcast_async(Tensor&, int, const ProcessGroup&) { unavailable("broadcast_async"); }
Tensor all_gather(const Tensor&, const ProcessGroup&) { unavailable("all_gather"); }
Work all_gather_async(const Tensor&, const ProcessGroup&) { unavailable("all_gather_async"); }
Tensor reduce_scatter(const Tensor&, ReduceOp, const ProcessGroup&) { unavailable("reduce_scatter"); }
Work reduce_scatter_async(const Tensor&, ReduceOp, const ProcessGroup&) { unavailable("reduce_scatter_async"); }
void barrier(const ProcessGroup&) { unavailable("barrier"); }
Work barrier_async(const ProcessGroup&) { unavailable("barrier_async"); }

#else  // OXMERA_WITH_MPI

namespace {

enum class Kind : int64_t { AllReduce = 1, Broadcast, AllGather, ReduceScatter, Barrier };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce:
      return "all_reduce";
    case Kind::Broadcast:
      return "broadcast";
    case Kind::AllGather:
      return "all_gather";
    case Kind::ReduceScatter:
      return "reduce_scatter";
    case Kind::Barrier:
      return "barrier";
  }
  return "?";
}

// The descriptor every rank all-gathers before a collective: kind, dtype, op, root, ndim, the first kMaxDims
// sizes, a hash of any further ones, and the transports this rank would take (NCCL, the ring: the one field not
// compared; a transport is taken when every rank would, so ranks with different settings still agree).
constexpr int kMaxDims = 8;
constexpr int kHash = 5 + kMaxDims;
constexpr int kTransport = kHash + 1;  // kWantsNccl | kWantsRing: each taken only when every rank's has it
constexpr int64_t kWantsNccl = 1, kWantsRing = 2;
constexpr int kDesc = kTransport + 1;
using Descriptor = std::array<int64_t, kDesc>;

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  OXM_FAIL(Backend, "distributed: ", what, " failed in MPI: ", std::string(msg, static_cast<size_t>(len)));
}

bool g_exiting = false;  // static destruction has begun: leave NCCL's communicators to the driver

struct Runtime {
  ~Runtime() { g_exiting = true; }  // runs before the members' destructors
  bool initialized = false;
  bool finalized = false;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  std::shared_ptr<detail::GroupState> world;
  std::vector<std::weak_ptr<detail::GroupState> > groups;  // to drain and free at finalize
};
Runtime& runtime() {
  static Runtime r;
  return r;
}
Runtime& started(const char* fn) {
  Runtime& r = runtime();
  OXM_CHECK(r.initialized && !r.finalized, InvalidArgument, "distributed::", fn, ": ",
            r.finalized ? "called after distributed::finalize()" : "call distributed::init() first");
  return r;
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I64:
      return MPI_INT64_T;
    case DType::U8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}
int nccl_type(DType d) {
  using namespace detail;
  switch (d) {
    case DType::F32:
      return kNcclFloat32;
    case DType::F64:
      return kNcclFloat64;
    case DType::I64:
      return kNcclInt64;
    case DType::U8:
      return kNcclUint8;
  }
  return kNcclFloat32;
}
int nccl_op(ReduceOp op) {
  using namespace detail;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:  // summed, then divided as the MPI path does (ncclAvg rounds differently)
      return kNcclSum;
    case ReduceOp::Max:
      return kNcclMax;
    case ReduceOp::Min:
      return kNcclMin;
  }
  return kNcclSum;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// The address MPI reads or writes for a contiguous host tensor (a valid dummy for an empty one: some MPIs
// reject null buffers even for zero counts).
void* host_ptr(const Tensor& t) {
  static uint64_t dummy = 0;
  if (t.numel() == 0) return &dummy;
  return t.impl()->byte_ptr();
}

// ---- The ring all-reduce. Open MPI's non-blocking all-reduce of a buffer in place is a binomial tree (the whole
// buffer to rank 0 and back, log2(p) times the data through one rank); a ring sends each rank 2(p-1)/p of it, in
// p-1 reduce-scatter steps (segment s ends reduced on rank s-1) and p-1 all-gather steps, both neighbours' links
// busy at once. Each segment is reduced in the ring's fixed order, on one rank, and copied to the others: the
// result does not depend on timing, and every rank holds the same bits.

// Host all-reduces of at least this many bytes take the ring (OXMERA_ALLREDUCE_RING_BYTES overrides; 0: never).
int64_t ring_min_bytes() {
  static const int64_t bytes = [] {
    const char* v = std::getenv("OXMERA_ALLREDUCE_RING_BYTES");
    if (v == nullptr || *v == '\0') return int64_t{64} << 10;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    return (end != nullptr && *end == '\0' && n >= 0) ? static_cast<int64_t>(n) : int64_t{64} << 10;
  }();
  return bytes;
}

// dst[i] = dst[i] op src[i], for n elements of T (integer sums wrap, as MPI's do).
template <typename T>
void reduce_into(T* dst, const T* src, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<U>(dst[i]) + static_cast<U>(src[i]));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      }
      break;
    case ReduceOp::Max:
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
      break;
    case ReduceOp::Min:
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] < dst[i] ? src[i] : dst[i];
      break;
  }
}
void reduce_into(DType d, void* dst, const void* src, int64_t n, ReduceOp op) {
  switch (d) {
    case DType::F32:
      return reduce_into(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case DType::F64:
      return reduce_into(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
    case DType::I64:
      return reduce_into(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op);
    case DType::U8:
      return reduce_into(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, op);
  }
}
// Divides n floating elements by `by` (Avg: the rank that finishes a segment averages it before sending it on).
void divide(DType d, void* data, int64_t n, double by) {
  if (d == DType::F32) {
    auto* p = static_cast<float*>(data);
    const auto f = static_cast<float>(by);
    for (int64_t i = 0; i < n; ++i) p[i] /= f;
  } else if (d == DType::F64) {
    auto* p = static_cast<double*>(data);
    for (int64_t i = 0; i < n; ++i) p[i] /= by;
  }
}

// A contiguous host copy of t (t itself when it already is one).
Tensor host_contiguous(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor h = t.device().is_cpu() ? t : t.detach().to(Device::cpu());
  return h.contiguous();
}
// t contiguous on its own device (t itself when it already is), for NCCL.
Tensor device_contiguous(const Tensor& t) {
  NoGradGuard no_grad;
  return t.contiguous();
}

std::string shape_str(const int64_t* dims, int64_t ndim, int64_t extra_hash) {
  std::ostringstream os;
  os << '[';
  for (int64_t i = 0; i < std::min<int64_t>(ndim, kMaxDims); ++i) os << (i ? ", " : "") << dims[i];
  if (ndim > kMaxDims) os << ", ... (" << ndim << " dims, hash " << extra_hash << ")";
  os << ']';
  return os.str();
}

}  // namespace

namespace detail {

struct GroupState {
  std::vector<int> ranks;  // world ranks, in group-rank order
  int my_rank = -1;        // group rank of this process, -1 when not a member
  std::string name;        // "world", "group [0, 2]"
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm data = MPI_COMM_NULL;
  std::deque<std::shared_ptr<WorkState> > pending;  // in call order
  NcclComm nccl = nullptr;                          // made at the group's first NCCL collective
  bool nccl_unhealthy = false;  // an NCCL collective failed or was abandoned: abort, do not destroy (it would wait)
  std::string nccl_refused;     // why this group stages CUDA tensors although NCCL loaded (the same on every rank)
  int ring_tag = 0;             // the last ring all-reduce's message tag: every rank starts rings in the same order
  // Receive buffers of finished rings, reused (uninitialised memory: no zeroing, no fresh pages per all-reduce).
  struct Inbox {
    std::unique_ptr<unsigned char[]> data;
    size_t bytes = 0;
  };
  std::vector<Inbox> spare_inboxes;
  void progress();
  NcclComm nccl_communicator(const NcclApi& api, Device device);
  void free_comms() {
    if (nccl != nullptr && !g_exiting) {
      if (const NcclApi* api = nccl_api()) (nccl_unhealthy ? api->comm_abort : api->comm_destroy)(nccl);
    }
    nccl = nullptr;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (control != MPI_COMM_NULL) MPI_Comm_free(&control);
    if (data != MPI_COMM_NULL) MPI_Comm_free(&data);
  }
  ~GroupState() { free_comms(); }
};

struct WorkState {
  enum class Phase { Checking, Ready, Running, Done, Failed };
  GroupState* group = nullptr;  // kept alive by `keep`
  std::shared_ptr<GroupState> keep;
  Kind kind = Kind::Barrier;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;  // group rank (broadcast)
  DType dtype = DType::F32;
  Shape shape;
  Phase phase = Phase::Checking;
  Descriptor desc{};
  std::vector<int64_t> all_desc;
  MPI_Request check_req = MPI_REQUEST_NULL;
  MPI_Request data_req = MPI_REQUEST_NULL;
  Tensor target;  // in-place collectives: the caller's tensor, written back unless it is `send` itself
  Tensor send;    // contiguous host buffer MPI reads (in-place collectives: and writes)
  Tensor recv;    // contiguous host buffer MPI writes (all_gather, reduce_scatter)
  Device out_device = Device::cpu();
  Tensor result;             // all_gather / reduce_scatter output, on out_device
  Shape out_shape;           // all_gather / reduce_scatter: recv's shape, allocated when the data start
  bool nccl_wanted = false;  // this rank's tensor is on CUDA and NCCL is loaded (send stays on the device)
  bool use_nccl = false;     // every rank wanted NCCL: the data go through it
  bool use_ring = false;     // every rank's threshold sends this all-reduce round the ring (when on the host)
  void* marker = nullptr;    // NCCL: recorded behind the collective on that stream
  struct Ring {
    int step = 0;                 // 0 .. 2(p-1): reduce-scatter steps, then all-gather steps
    int tag = 0;                  // this all-reduce's messages, apart from any other ring in flight
    int receiving = 0;            // the segment the posted step receives
    std::vector<int64_t> bounds;  // segment s is elements [bounds[s], bounds[s+1])
    GroupState::Inbox inbox;      // a segment (at most bounds[1] + 1 elements) received, before it is reduced
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  };
  std::unique_ptr<Ring> ring;  // the all-reduce runs as a ring (set when its data start)
  bool averaged = false;       // Avg: the ring already divided the sum
  std::string error_message;
  ErrorKind error_kind = ErrorKind::Backend;
  bool waited = false;  // wait() returned, or is_completed() said true: result() is available from then on

  std::string describe() const {
    std::ostringstream os;
    os << kind_name(kind);
    if (kind != Kind::Barrier) {
      os << ' ' << dtype_name(dtype) << ' ' << shape_str(shape.data(), static_cast<int64_t>(shape.size()), 0);
    }
    os << " on " << group->name << " (rank " << group->my_rank << " of " << group->ranks.size() << ")";
    return os.str();
  }

  ~WorkState() { release_marker(); }
  void release_marker() noexcept {
    ::oxmera::detail::device_release_marker(out_device, marker);
    marker = nullptr;
  }

  void fail(ErrorKind k, std::string msg) {
    release_marker();
    if (use_nccl) group->nccl_unhealthy = true;
    phase = Phase::Failed;
    error_kind = k;
    error_message = std::move(msg);
  }

  // All descriptors are in: either every rank's agrees, or every rank fails with the same message.
  void validate() {
    const int n = static_cast<int>(group->ranks.size());
    auto at = [&](int r, int i) { return all_desc[static_cast<size_t>(r * kDesc + i)]; };
    int first_diff = -1;
    for (int r = 1; r < n && first_diff < 0; ++r)
      for (int i = 0; i < kDesc; ++i)
        if (i != kTransport && at(r, i) != at(0, i)) {
          first_diff = r;
          break;
        }
    if (first_diff < 0) {
      use_nccl = kind != Kind::Barrier;
      use_ring = kind == Kind::AllReduce;
      for (int r = 0; r < n; ++r) {
        use_nccl = use_nccl && (at(r, kTransport) & kWantsNccl) != 0;
        use_ring = use_ring && (at(r, kTransport) & kWantsRing) != 0;
      }
      phase = Phase::Ready;
      return;
    }
    ErrorKind k = ErrorKind::ShapeMismatch;
    for (int r = 1; r < n; ++r) {
      if (at(r, 0) != at(0, 0) || at(r, 2) != at(0, 2) || at(r, 3) != at(0, 3)) {
        k = ErrorKind::InvalidArgument;
        break;
      }
      if (at(r, 1) != at(0, 1)) k = ErrorKind::DTypeMismatch;
    }
    std::ostringstream os;
    os << "distributed::" << kind_name(kind) << ": the ranks of " << group->name
       << " called mismatched collectives (every rank must call the same collective, in the same order, with the "
          "same shape and dtype): ";
    for (int r = 0; r < n; ++r) {
      const Kind rk = static_cast<Kind>(at(r, 0));
      os << (r ? "; " : "") << "rank " << r << ": " << kind_name(rk);
      if (rk != Kind::Barrier) {
        os << ' ' << dtype_name(static_cast<DType>(at(r, 1)));
        if (rk == Kind::AllReduce || rk == Kind::ReduceScatter)
          os << ' ' << reduce_op_name(static_cast<ReduceOp>(at(r, 2)));
        if (rk == Kind::Broadcast) os << " from rank " << at(r, 3);
        os << ' ' << shape_str(&all_desc[static_cast<size_t>(r * kDesc + 5)], at(r, 4), at(r, kHash));
      }
    }
    fail(k, os.str());
  }

  void start_data() {
    try {
      if (use_nccl && start_nccl()) return;
      use_nccl = false;  // the group cannot use NCCL (every rank finds so at the same call): stage as below
      // MPI: a buffer kept on the device for NCCL (some rank could not take it) is staged now.
      if (send.defined() && !send.device().is_cpu()) send = host_contiguous(send);
      if (kind == Kind::AllGather || kind == Kind::ReduceScatter) recv = empty(out_shape, dtype);
    } catch (const Error& e) {
      fail(e.kind(), std::string("distributed::") + kind_name(kind) + ": " + e.message());
      return;
    }
    const MPI_Datatype t = mpi_type(dtype);
    const int count = send.defined() ? static_cast<int>(send.numel()) : 0;
    const int p = static_cast<int>(group->ranks.size());
    if (use_ring && p > 1 && count >= p) {
      ring = std::make_unique<Ring>();
      group->ring_tag = group->ring_tag % 30000 + 1;
      ring->tag = group->ring_tag;
      for (int s = 0; s <= p; ++s) ring->bounds.push_back(static_cast<int64_t>(count) * s / p);
      const size_t need = static_cast<size_t>(ring->bounds[1] + 1) * itemsize(dtype);
      auto& spare = group->spare_inboxes;
      if (!spare.empty() && spare.back().bytes >= need) {
        ring->inbox = std::move(spare.back());
        spare.pop_back();
      } else {
        ring->inbox = {std::make_unique_for_overwrite<unsigned char[]>(need), need};
      }
      phase = Phase::Running;
      post_ring_step();
      return;
    }
    int rc = MPI_SUCCESS;
    switch (kind) {
      case Kind::AllReduce:
        rc = MPI_Iallreduce(MPI_IN_PLACE, host_ptr(send), count, t, mpi_op(op), group->data, &data_req);
        break;
      case Kind::Broadcast:
        rc = MPI_Ibcast(host_ptr(send), count, t, root, group->data, &data_req);
        break;
      case Kind::AllGather:
        rc = MPI_Iallgather(host_ptr(send), count, t, host_ptr(recv), count, t, group->data, &data_req);
        break;
      case Kind::ReduceScatter:
        rc = MPI_Ireduce_scatter_block(host_ptr(send), host_ptr(recv), static_cast<int>(recv.numel()), t, mpi_op(op),
                                       group->data, &data_req);
        break;
      case Kind::Barrier:
        rc = MPI_Ibarrier(group->data, &data_req);
        break;
    }
    if (rc != MPI_SUCCESS) {
      try {
        check_mpi(rc, kind_name(kind));
      } catch (const Error& e) {
        fail(e.kind(), e.message());
        return;
      }
    }
    phase = Phase::Running;
  }

  // Enqueues the collective on the device's stream, behind the kernels that made its input, and a marker behind it.
  // False when the group cannot use NCCL (nothing started; every rank of the group returns false at this call).
  bool start_nccl() {
    const NcclApi& api = *nccl_api();  // every rank said it has it
    const NcclComm comm = group->nccl_communicator(api, out_device);
    if (comm == nullptr) return false;
    if (kind == Kind::AllGather || kind == Kind::ReduceScatter) recv = empty(out_shape, dtype, out_device);
    const size_t count = static_cast<size_t>(send.numel());
    void* stream = ::oxmera::detail::device_native_stream(out_device);
    int rc = kNcclSuccess;
    const char* call = "";
    if (count > 0) {  // every rank has the same shape: all skip an empty one
      void* buf = send.impl()->byte_ptr();
      switch (kind) {
        case Kind::AllReduce:
          call = "ncclAllReduce";
          rc = api.all_reduce(buf, buf, count, nccl_type(dtype), nccl_op(op), comm, stream);
          break;
        case Kind::Broadcast:
          call = "ncclBroadcast";
          rc = api.broadcast(buf, buf, count, nccl_type(dtype), root, comm, stream);
          break;
        case Kind::AllGather:
          call = "ncclAllGather";
          rc = api.all_gather(buf, recv.impl()->byte_ptr(), count, nccl_type(dtype), comm, stream);
          break;
        case Kind::ReduceScatter:
          call = "ncclReduceScatter";
          rc = api.reduce_scatter(buf, recv.impl()->byte_ptr(), static_cast<size_t>(recv.numel()), nccl_type(dtype),
                                  nccl_op(op), comm, stream);
          break;
        case Kind::Barrier:
          break;
      }
    }
    if (rc != kNcclSuccess) {
      fail(ErrorKind::Backend,
           std::string("distributed::") + kind_name(kind) + " on " + group->name + ": " + api.error(call, rc));
      return true;
    }
    if (count > 0) marker = ::oxmera::detail::device_record_marker(out_device);
    phase = Phase::Running;
    return true;
  }

  // The ring's step `ring->step`: send one segment to the next rank, receive one from the previous.
  void post_ring_step() {
    const int p = static_cast<int>(group->ranks.size()), r = group->my_rank, k = ring->step;
    const bool scatter = k < p - 1;  // reduce-scatter step k, else all-gather step k - (p - 1)
    const int j = scatter ? k : k - (p - 1);
    const int out = ((scatter ? r - j : r + 1 - j) % p + p) % p;
    const int in = ((scatter ? r - j - 1 : r - j) % p + p) % p;
    auto* base = static_cast<unsigned char*>(host_ptr(send));
    const size_t item = itemsize(dtype);
    const MPI_Datatype t = mpi_type(dtype);
    auto len = [&](int s) { return static_cast<int>(ring->bounds[static_cast<size_t>(s) + 1] - ring->bounds[s]); };
    ring->receiving = in;
    void* into = scatter ? static_cast<void*>(ring->inbox.data.get()) : base + ring->bounds[in] * item;
    check_mpi(MPI_Irecv(into, len(in), t, (r - 1 + p) % p, ring->tag, group->data, &ring->reqs[0]), "ring all_reduce");
    check_mpi(
        MPI_Isend(base + ring->bounds[out] * item, len(out), t, (r + 1) % p, ring->tag, group->data, &ring->reqs[1]),
        "ring all_reduce");
  }
  // Runs every ring step whose messages have arrived; true when the last has.
  bool ring_done() {
    const int p = static_cast<int>(group->ranks.size());
    const size_t item = itemsize(dtype);
    for (;;) {
      int done = 0;
      check_mpi(MPI_Testall(2, ring->reqs, &done, MPI_STATUSES_IGNORE), "ring all_reduce");
      if (!done) return false;
      auto* base = static_cast<unsigned char*>(host_ptr(send));
      const int k = ring->step;
      if (k < p - 1) {  // a reduce-scatter step: reduce the received segment into ours
        const int in = ring->receiving;
        const int64_t n = ring->bounds[static_cast<size_t>(in) + 1] - ring->bounds[in];
        reduce_into(dtype, base + ring->bounds[in] * item, ring->inbox.data.get(), n, op);
        if (k == p - 2 && op == ReduceOp::Avg) {  // segment `in` is complete here: average it once, for everyone
          divide(dtype, base + ring->bounds[in] * item, n, static_cast<double>(p));
          averaged = true;
        }
      }
      if (++ring->step == 2 * (p - 1)) {
        if (group->spare_inboxes.size() < 4) group->spare_inboxes.push_back(std::move(ring->inbox));
        return true;
      }
      post_ring_step();
    }
  }

  // NCCL: the marker behind the collective is reached (or NCCL reports an asynchronous error: Failed).
  bool nccl_done() {
    const NcclApi& api = *nccl_api();
    int async = kNcclSuccess;
    const int rc = api.comm_get_async_error(group->nccl, &async);
    if (rc != kNcclSuccess || async != kNcclSuccess) {
      fail(ErrorKind::Backend,
           std::string("distributed::") + kind_name(kind) + " on " + group->name + ": " +
               (rc != kNcclSuccess ? api.error("ncclCommGetAsyncError", rc) : api.error("the NCCL collective", async)));
      return false;
    }
    try {
      return ::oxmera::detail::device_marker_reached(out_device, marker);
    } catch (const Error& e) {
      fail(e.kind(), std::string("distributed::") + kind_name(kind) + " on " + group->name + ": " + e.message());
      return false;
    }
  }

  // The data are in the host buffers (NCCL: the device buffers): average, move to the caller's device, write back.
  void finish() {
    release_marker();
    try {
      NoGradGuard no_grad;  // collectives act on data, as torch.distributed's do: nothing is recorded
      const double n = static_cast<double>(group->ranks.size());
      if (kind == Kind::AllReduce || kind == Kind::Broadcast) {
        if (op == ReduceOp::Avg && kind == Kind::AllReduce && !averaged) send.div_(n);
        if (!target.is_same(send))
          target.copy_(out_device.is_cpu() ? send : send.to(out_device));
        else
          ++target.impl()->storage->version;  // MPI wrote the tensor's memory: autograd must see the change
        send = Tensor();
      } else if (kind == Kind::AllGather || kind == Kind::ReduceScatter) {
        if (op == ReduceOp::Avg && kind == Kind::ReduceScatter) recv.div_(n);
        result = out_device.is_cpu() ? recv : recv.to(out_device);
        send = Tensor();
        recv = Tensor();
      }
      target = Tensor();
      phase = Phase::Done;
    } catch (const Error& e) {
      fail(e.kind(),
           std::string("distributed::") + kind_name(kind) + ": writing the result back failed: " + e.message());
    }
  }
};

void GroupState::progress() {
  bool blocked = false;  // an earlier collective's check is still in flight: later data must not start
  for (auto& w : pending) {
    if (w->phase == WorkState::Phase::Checking) {
      int done = 0;
      check_mpi(MPI_Test(&w->check_req, &done, MPI_STATUS_IGNORE), "testing a collective's shape check");
      if (done) w->validate();
    }
    if (w->phase == WorkState::Phase::Checking) {
      blocked = true;
    }
    if (!blocked && w->phase == WorkState::Phase::Ready) w->start_data();
    if (w->phase == WorkState::Phase::Running) {
      int done = 0;
      if (w->use_nccl)
        done = w->nccl_done() ? 1 : 0;
      else if (w->ring)
        done = w->ring_done() ? 1 : 0;
      else
        check_mpi(MPI_Test(&w->data_req, &done, MPI_STATUS_IGNORE), kind_name(w->kind));
      if (done) w->finish();
    }
    if (blocked) break;
  }
  while (!pending.empty() &&
         (pending.front()->phase == WorkState::Phase::Done || pending.front()->phase == WorkState::Phase::Failed))
    pending.pop_front();
}

}  // namespace detail

namespace {

using detail::GroupState;
using detail::WorkState;

// The group's state; a default-constructed ProcessGroup is the world (as torch's group=None).
const std::shared_ptr<GroupState>& resolve(const ProcessGroup& g, const char* fn) {
  Runtime& r = started(fn);
  return g.defined() ? g.state() : r.world;
}

const GroupState& member_of(const ProcessGroup& g, const char* fn) {
  const GroupState& s = *resolve(g, fn);
  OXM_CHECK(s.my_rank >= 0, InvalidArgument, "distributed::", fn, ": world rank ", runtime().rank,
            " is not a member of ", s.name, "; only its members call its collectives");
  return s;
}

// Polls until `done()` or the deadline; `what` names the operation in the timeout error.
template <class Done, class What>
void poll_until(Done done, std::chrono::milliseconds timeout, What what) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + timeout;
  for (int spins = 0;; ++spins) {
    if (done()) return;
    const auto now = clock::now();
    OXM_CHECK(now < deadline, Timeout, "distributed: ", what(), " did not complete within ", timeout.count(), " ms (",
              static_cast<double>(timeout.count()) / 1000.0,
              " s): a peer has stopped calling collectives (or died without MPI ending the job). It is still in "
              "flight: wait() again, or end the job. To allow longer, pass a limit to Work::wait(timeout) or raise "
              "the default (now ",
              static_cast<double>(default_timeout().count()) / 1000.0,
              " s) with distributed::set_default_timeout(std::chrono::seconds(N))");
    // Spin briefly for latency, then yield, then sleep: ranks may share cores (mpirun --oversubscribe). Each test
    // is also what moves a large message's fragments (no progress thread), so sleeping early makes a megabyte
    // all-reduce several times slower; sleep only once a peer looks stalled (bench/ddp_compare.sh, LIMITATIONS).
    if (spins < 64) continue;
    if (now - start < std::chrono::milliseconds(200))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void wait_request(MPI_Request& req, const char* what) {
  poll_until(
      [&] {
        int done = 0;
        check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
        return done != 0;
      },
      default_timeout(), [&] { return std::string(what); });
}

}  // namespace

// Rank 0 of the group makes NCCL's id and the data communicator carries it: every rank gets here at the same place
// in that communicator's order (inside the first collective they all agreed to run through NCCL).
// nullptr (and nccl_refused says why) when two ranks share a device: NCCL needs one per rank (the CUDA backend drives
// cuda:0 only, so ranks on one machine share it unless CUDA_VISIBLE_DEVICES gives each its own). Found from an
// all-gather of the device identities, so every rank decides alike, before NCCL is asked.
detail::NcclComm detail::GroupState::nccl_communicator(const NcclApi& api, Device device) {
  if (nccl != nullptr || !nccl_refused.empty()) return nccl;
  constexpr size_t kIdBytes = 192;
  std::array<char, kIdBytes> mine{};
  const std::string id = ::oxmera::detail::device_identity(device);
  std::memcpy(mine.data(), id.data(), std::min(id.size(), kIdBytes - 1));
  std::vector<char> all(kIdBytes * ranks.size());
  {
    MPI_Request req = MPI_REQUEST_NULL;
    const std::string what = "gathering the ranks' devices on " + name;
    check_mpi(MPI_Iallgather(mine.data(), static_cast<int>(kIdBytes), MPI_BYTE, all.data(), static_cast<int>(kIdBytes),
                             MPI_BYTE, data, &req),
              what.c_str());
    wait_request(req, what.c_str());
  }
  for (size_t a = 0; a < ranks.size() && nccl_refused.empty(); ++a)
    for (size_t b = a + 1; b < ranks.size(); ++b) {
      const std::string ida(&all[a * kIdBytes]), idb(&all[b * kIdBytes]);
      if (!ida.empty() && ida == idb) {
        nccl_refused = "ranks " + std::to_string(a) + " and " + std::to_string(b) + " of " + name + " share one GPU (" +
                       ida + "), and NCCL needs a GPU per rank; give each rank its own (CUDA_VISIBLE_DEVICES)";
        break;
      }
    }
  if (!nccl_refused.empty()) return nullptr;
  struct {
    int64_t status;
    NcclUniqueId id;
  } msg{};
  if (my_rank == 0) msg.status = api.get_unique_id(&msg.id);
  MPI_Request req = MPI_REQUEST_NULL;
  const std::string what = "sending NCCL's unique id on " + name;
  check_mpi(MPI_Ibcast(&msg, static_cast<int>(sizeof msg), MPI_BYTE, 0, data, &req), what.c_str());
  wait_request(req, what.c_str());
  OXM_CHECK(msg.status == kNcclSuccess, Backend, "distributed: making NCCL's communicator for ", name,
            ": group rank 0's ", api.error("ncclGetUniqueId", static_cast<int>(msg.status)),
            "; set OXMERA_NCCL=0 to stage CUDA tensors through host memory instead");
  NcclComm c = nullptr;
  const int rc = api.comm_init_rank(&c, static_cast<int>(ranks.size()), msg.id, my_rank);
  OXM_CHECK(rc == kNcclSuccess, Backend, "distributed: making NCCL's communicator for ", name, " (rank ", my_rank,
            " of ", ranks.size(), "): ", api.error("ncclCommInitRank", rc),
            "; set OXMERA_NCCL=0 to stage CUDA tensors through host memory instead");
  nccl = c;
  return c;
}

namespace {

// Advances w's group; true once w and every collective called before it on that group have completed (or
// failed): the queue only ever drops its settled front.
bool settled(WorkState& w) {
  GroupState& g = *w.group;
  g.progress();
  return std::none_of(g.pending.begin(), g.pending.end(), [&](const auto& p) { return p.get() == &w; });
}

void drain(GroupState& g) {
  while (!g.pending.empty()) {
    auto w = g.pending.back();
    poll_until([&] { return settled(*w); }, default_timeout(), [&] { return w->describe(); });
  }
}

std::shared_ptr<GroupState> make_group(std::vector<int> ranks, int my_rank, std::string name, MPI_Comm base) {
  auto g = std::make_shared<GroupState>();
  g->ranks = std::move(ranks);
  g->my_rank = my_rank;
  g->name = std::move(name);
  if (base != MPI_COMM_NULL) {
    check_mpi(MPI_Comm_dup(base, &g->control), "MPI_Comm_dup");
    check_mpi(MPI_Comm_dup(base, &g->data), "MPI_Comm_dup");
  }
  runtime().groups.push_back(g);
  return g;
}

// Sends this rank's descriptor and queues the collective; the data start in progress().
std::shared_ptr<WorkState> submit(const ProcessGroup& pg, Kind kind, const Tensor* t, ReduceOp op, int root,
                                  const char* fn) {
  const GroupState& cg = member_of(pg, fn);
  auto g = resolve(pg, fn);
  auto w = std::make_shared<WorkState>();
  w->group = g.get();
  w->keep = g;
  w->kind = kind;
  w->op = op;
  w->root = root;
  if (t != nullptr) {
    OXM_CHECK(t->defined(), InvalidArgument, "distributed::", fn, ": the tensor is undefined");
    w->dtype = t->dtype();
    w->shape = t->shape();
    OXM_CHECK(t->numel() <= static_cast<int64_t>(INT32_MAX), InvalidArgument, "distributed::", fn, ": ",
              dtype_name(t->dtype()), ' ', t->shape(), " has ", t->numel(),
              " elements, more than one MPI call takes (2^31 - 1); split it into smaller tensors");
    OXM_CHECK(op != ReduceOp::Avg || is_floating(t->dtype()) || kind == Kind::Broadcast || kind == Kind::AllGather,
              UnsupportedDType, "distributed::", fn, ": ReduceOp::Avg needs f32 or f64, got ", dtype_name(t->dtype()),
              ' ', t->shape(), "; reduce with ReduceOp::Sum and divide");
  }
  Descriptor& d = w->desc;
  d.fill(0);
  d[0] = static_cast<int64_t>(kind);
  if (t != nullptr) {
    d[1] = static_cast<int64_t>(w->dtype);
    d[2] = (kind == Kind::AllReduce || kind == Kind::ReduceScatter) ? static_cast<int64_t>(op) : 0;
    d[3] = kind == Kind::Broadcast ? root : 0;
    d[4] = static_cast<int64_t>(w->shape.size());
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < w->shape.size(); ++i) {
      if (i < static_cast<size_t>(kMaxDims))
        d[5 + i] = w->shape[i];
      else
        h = (h ^ static_cast<uint64_t>(w->shape[i])) * 1099511628211ull;
    }
    d[kHash] = w->shape.size() > static_cast<size_t>(kMaxDims) ? static_cast<int64_t>(h >> 1) : 0;
    w->nccl_wanted = t->device().is_cuda() && detail::nccl_api() != nullptr && cg.nccl_refused.empty() &&
                     ::oxmera::detail::device_memory_is_cuda(t->device());
    const int64_t bytes = t->numel() * static_cast<int64_t>(itemsize(t->dtype()));
    const bool ring_wanted = kind == Kind::AllReduce && ring_min_bytes() > 0 && bytes >= ring_min_bytes();
    d[kTransport] = (w->nccl_wanted ? kWantsNccl : 0) | (ring_wanted ? kWantsRing : 0);
  }
  w->all_desc.assign(static_cast<size_t>(kDesc) * cg.ranks.size(), 0);
  check_mpi(
      MPI_Iallgather(d.data(), kDesc, MPI_INT64_T, w->all_desc.data(), kDesc, MPI_INT64_T, g->control, &w->check_req),
      "sending a collective's shape check");
  g->pending.push_back(w);
  return w;
}

// The handle of a submitted collective whose buffers are set. Each call also advances the collectives queued
// before it (MPI_Test, non-blocking), so an async collective's data start while the caller goes on issuing
// others (DDP's buckets during backward), not only at the first wait.
Work handle(std::shared_ptr<WorkState> w) {
  w->group->progress();
  return Work(std::move(w));
}

}  // namespace

bool is_available() noexcept { return true; }

std::string backend_description() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) return "MPI (version unknown)";
  std::string s(v, static_cast<size_t>(len));
  const auto nl = s.find_first_of("\n\r,");
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string cuda_transport() {
  std::string why;
  if (const detail::NcclApi* api = detail::nccl_api(&why))
    return "NCCL " + detail::nccl_version_string(api->version) + " (" + api->path + ")";
  return "host memory + MPI (NCCL: " + why + ")";
}
std::string cuda_transport(const ProcessGroup& group) {
  OXM_CHECK(group.defined(), InvalidArgument,
            "distributed::cuda_transport: the group is undefined (a default-made ProcessGroup); pass world() or one "
            "from new_group()");
  if (!group.state()->nccl_refused.empty()) return "host memory + MPI (NCCL: " + group.state()->nccl_refused + ")";
  return cuda_transport();
}

void init() {
  Runtime& r = runtime();
  if (r.initialized && !r.finalized) return;
  OXM_CHECK(!r.finalized, InvalidArgument,
            "distributed::init: called after distributed::finalize(); MPI cannot be started twice in one process");
  const LaunchEnvironment env = launch_environment();
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &r.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &r.size), "MPI_Comm_size");
  OXM_CHECK(r.rank == env.rank && r.size == env.world_size, Backend, "distributed::init: MPI says rank ", r.rank,
            " of ", r.size, " but the ", env.launcher, " environment says rank ", env.rank, " of ", env.world_size,
            "; the program was started by one launcher with another's MPI (launch it with the mpirun of the MPI "
            "oxmera was built with)");
  if (env.local_rank >= 0) {
    r.local_rank = env.local_rank;
  } else {
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r.rank, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    MPI_Comm_rank(node, &r.local_rank);
    MPI_Comm_free(&node);
  }
  std::vector<int> all(static_cast<size_t>(r.size));
  for (int i = 0; i < r.size; ++i) all[static_cast<size_t>(i)] = i;
  r.initialized = true;
  r.world = make_group(std::move(all), r.rank, "world", MPI_COMM_WORLD);
}

bool is_initialized() noexcept { return runtime().initialized && !runtime().finalized; }

void finalize() {
  Runtime& r = runtime();
  if (!r.initialized || r.finalized) return;
  std::string first_error;
  ErrorKind first_kind = ErrorKind::Backend;
  for (auto& wg : r.groups) {
    if (auto g = wg.lock()) {
      try {
        drain(*g);
      } catch (const Error& e) {
        g->nccl_unhealthy = true;
        if (first_error.empty()) {
          first_error = e.what();
          first_kind = e.kind() == ErrorKind::Timeout ? ErrorKind::Timeout : ErrorKind::Backend;
        }
      }
      g->free_comms();
    }
  }
  r.groups.clear();
  r.world.reset();
  r.finalized = true;
  MPI_Finalize();
  if (!first_error.empty())
    oxmera::detail::throw_error(first_kind,
                                "distributed::finalize: a collective still in flight did not complete: " + first_error);
}

int rank() { return started("rank").rank; }
int world_size() { return started("world_size").size; }
int local_rank() { return started("local_rank").local_rank; }

bool ProcessGroup::is_member() const { return resolve(*this, "ProcessGroup::is_member")->my_rank >= 0; }
int ProcessGroup::rank() const { return resolve(*this, "ProcessGroup::rank")->my_rank; }
int ProcessGroup::size() const { return static_cast<int>(resolve(*this, "ProcessGroup::size")->ranks.size()); }
const std::vector<int>& ProcessGroup::ranks() const { return resolve(*this, "ProcessGroup::ranks")->ranks; }

ProcessGroup world() { return ProcessGroup(started("world").world); }

ProcessGroup new_group(const std::vector<int>& ranks) {
  Runtime& r = started("new_group");
  std::string problem;
  std::vector<bool> seen(static_cast<size_t>(r.size), false);
  for (int x : ranks) {
    if (x < 0 || x >= r.size) {
      problem = "rank " + std::to_string(x) + " is not in [0, " + std::to_string(r.size) + ")";
      break;
    }
    if (seen[static_cast<size_t>(x)]) {
      problem = "rank " + std::to_string(x) + " is listed twice";
      break;
    }
    seen[static_cast<size_t>(x)] = true;
  }
  if (ranks.empty()) problem = "the list is empty";
  std::ostringstream name;
  name << "group [";
  for (size_t i = 0; i < ranks.size(); ++i) name << (i ? ", " : "") << ranks[i];
  name << ']';
  // Every rank learns whether every rank passed the same valid list before any communicator is made.
  uint64_t h = 1469598103934665603ull;
  for (int x : ranks) h = (h ^ static_cast<uint64_t>(static_cast<uint32_t>(x))) * 1099511628211ull;
  int64_t mine[2] = {problem.empty() ? 0 : 1, static_cast<int64_t>(h >> 1)};
  std::vector<int64_t> all(2 * static_cast<size_t>(r.size));
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, r.world->control, &req),
            "new_group's agreement check");
  wait_request(req, "new_group's agreement check on world");
  OXM_CHECK(problem.empty(), InvalidArgument, "distributed::new_group(", name.str(), "): ", problem);
  for (int i = 0; i < r.size; ++i) {
    OXM_CHECK(all[2 * static_cast<size_t>(i)] == 0, InvalidArgument, "distributed::new_group: world rank ", i,
              " passed an invalid rank list (its error says which)");
    OXM_CHECK(all[2 * static_cast<size_t>(i) + 1] == mine[1], InvalidArgument, "distributed::new_group(", name.str(),
              "): world rank ", i, " passed a different rank list; every process must pass the same list");
  }
  MPI_Group world_group = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
  check_mpi(MPI_Comm_group(r.world->control, &world_group), "MPI_Comm_group");
  check_mpi(MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &sub), "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  // On the world's control communicator, whose operations are always in call order (see the top of this file).
  const int rc = MPI_Comm_create(r.world->control, sub, &comm);
  MPI_Group_free(&sub);
  MPI_Group_free(&world_group);
  check_mpi(rc, "MPI_Comm_create");
  int my = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == r.rank) my = static_cast<int>(i);
  auto g = make_group(ranks, my, name.str(), comm);
  if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  return ProcessGroup(std::move(g));
}

void Work::wait(std::optional<std::chrono::milliseconds> timeout) {
  OXM_CHECK(state_, InvalidArgument, "distributed::Work::wait: the handle is empty");
  started("Work::wait");
  auto& w = *state_;
  const auto limit = timeout.value_or(default_timeout());
  OXM_CHECK(limit.count() > 0, InvalidArgument, "distributed::Work::wait: the timeout must be positive, got ",
            limit.count(), " ms");
  if (!settled(w)) {
    poll_until([&] { return settled(w); }, limit,
               [&] {
                 return w.describe() + (w.phase == WorkState::Phase::Checking
                                            ? " (waiting for the other ranks to call it)"
                                            : " (its data are in flight)");
               });
  }
  if (w.phase == WorkState::Phase::Failed) oxmera::detail::throw_error(w.error_kind, w.error_message);
  w.waited = true;
}

bool Work::is_completed() {
  OXM_CHECK(state_, InvalidArgument, "distributed::Work::is_completed: the handle is empty");
  started("Work::is_completed");
  if (!settled(*state_)) return false;
  if (state_->phase == WorkState::Phase::Failed) oxmera::detail::throw_error(state_->error_kind, state_->error_message);
  state_->waited = true;
  return true;
}

Tensor Work::result() const {
  OXM_CHECK(state_, InvalidArgument, "distributed::Work::result: the handle is empty");
  OXM_CHECK(state_->kind == Kind::AllGather || state_->kind == Kind::ReduceScatter, InvalidArgument,
            "distributed::Work::result: ", kind_name(state_->kind),
            " has no result tensor (it writes into the tensor it was given)");
  OXM_CHECK(state_->waited, InvalidArgument, "distributed::Work::result: not waited for yet; call wait() first");
  return state_->result;
}

Work all_reduce_async(Tensor& tensor, ReduceOp op, const ProcessGroup& group) {
  auto w = submit(group, Kind::AllReduce, &tensor, op, 0, "all_reduce");
  w->target = tensor;
  w->out_device = tensor.device();
  w->send = w->nccl_wanted ? device_contiguous(tensor) : host_contiguous(tensor);
  return handle(std::move(w));
}
void all_reduce(Tensor& tensor, ReduceOp op, const ProcessGroup& group) { all_reduce_async(tensor, op, group).wait(); }

Work broadcast_async(Tensor& tensor, int src, const ProcessGroup& group) {
  const GroupState& g = member_of(group, "broadcast");
  int root = -1;
  for (size_t i = 0; i < g.ranks.size(); ++i)
    if (g.ranks[i] == src) root = static_cast<int>(i);
  OXM_CHECK(root >= 0, InvalidArgument, "distributed::broadcast: the source, world rank ", src, ", is not a member of ",
            g.name);
  auto w = submit(group, Kind::Broadcast, &tensor, ReduceOp::Sum, root, "broadcast");
  w->target = tensor;
  w->out_device = tensor.device();
  // Only the root's values are read; the others receive into a fresh buffer unless the tensor is one already.
  if (w->nccl_wanted)
    w->send = (root == g.my_rank || tensor.is_contiguous()) ? device_contiguous(tensor)
                                                            : empty(tensor.shape(), tensor.dtype(), tensor.device());
  else
    w->send = (root == g.my_rank || (tensor.device().is_cpu() && tensor.is_contiguous()))
                  ? host_contiguous(tensor)
                  : empty(tensor.shape(), tensor.dtype());
  return handle(std::move(w));
}
void broadcast(Tensor& tensor, int src, const ProcessGroup& group) { broadcast_async(tensor, src, group).wait(); }

Work all_gather_async(const Tensor& input, const ProcessGroup& group) {
  auto w = submit(group, Kind::AllGather, &input, ReduceOp::Sum, 0, "all_gather");
  w->out_device = input.device();
  w->send = w->nccl_wanted ? device_contiguous(input) : host_contiguous(input);
  w->out_shape.push_back(static_cast<int64_t>(resolve(group, "all_gather")->ranks.size()));
  for (size_t i = 0; i < input.shape().size(); ++i) w->out_shape.push_back(input.shape()[i]);
  return handle(std::move(w));
}
Tensor all_gather(const Tensor& input, const ProcessGroup& group) {
  Work w = all_gather_async(input, group);
  w.wait();
  return w.result();
}

Work reduce_scatter_async(const Tensor& input, ReduceOp op, const ProcessGroup& group) {
  const GroupState& g = member_of(group, "reduce_scatter");
  OXM_CHECK(input.defined() && input.dim() >= 1 && input.size(0) == static_cast<int64_t>(g.ranks.size()), ShapeMismatch,
            "distributed::reduce_scatter: the input's first dim must be the group size (", g.ranks.size(), " for ",
            g.name, "), got ", input.defined() ? dtype_name(input.dtype()) : "undefined", ' ',
            input.defined() ? input.shape() : Shape{}, "; stack the per-rank parts along a new dim 0");
  auto w = submit(group, Kind::ReduceScatter, &input, op, 0, "reduce_scatter");
  w->out_device = input.device();
  w->send = w->nccl_wanted ? device_contiguous(input) : host_contiguous(input);
  for (size_t i = 1; i < input.shape().size(); ++i) w->out_shape.push_back(input.shape()[i]);
  return handle(std::move(w));
}
Tensor reduce_scatter(const Tensor& input, ReduceOp op, const ProcessGroup& group) {
  Work w = reduce_scatter_async(input, op, group);
  w.wait();
  return w.result();
}

Work barrier_async(const ProcessGroup& group) {
  return handle(submit(group, Kind::Barrier, nullptr, ReduceOp::Sum, 0, "barrier"));
}
void barrier(const ProcessGroup& group) { barrier_async(group).wait(); }

#endif  // OXMERA_WITH_MPI

}  // namespace oxmera::distributed
