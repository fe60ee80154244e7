// A stand-in for libnccl.so.2 in tests without GPUs: the NCCL calls oxmera makes (src/distributed/nccl.hpp),
// carried out with MPI on the host-memory test device's buffers (its "device pointers" are host memory). It
// checks what a real NCCL would not forgive: a collective on an unknown communicator, a type or operation outside
// those oxmera maps, a communicator made twice from one id. Loaded by the tests through OXMERA_NCCL_LIBRARY;
// `oxmera_fake_nccl_stats` says what was called, so a test can tell that the NCCL path ran.
//
// Communicators: ncclGetUniqueId records the caller's world rank and a fresh sequence number; at
// ncclCommInitRank every member sends its world rank to the id's maker, which answers with the member list in
// NCCL rank order, and the members make an MPI communicator of exactly them (MPI_Comm_create_group, collective
// over the members only, as NCCL's own bootstrap is).
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

namespace {

constexpr int kMagic = 0x0dcc1f00;
constexpr int kTagBase = 0x5cc1;  // world-communicator tags for the bootstrap (the library itself uses none)

struct Id {  // laid out in the 128 bytes of ncclUniqueId
  int magic;
  int maker;  // world rank
  int sequence;
};
struct Comm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
};

std::atomic<int64_t> g_collectives{0}, g_comms{0}, g_bytes{0};
std::atomic<int> g_sequence{0};
std::mutex g_mu;
std::set<Comm*> g_live;

bool live(void* c) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_live.count(static_cast<Comm*>(c)) != 0;
}
MPI_Datatype type_of(int t) {
  switch (t) {
    case 1:
      return MPI_UINT8_T;
    case 4:
      return MPI_INT64_T;
    case 7:
      return MPI_FLOAT;
    case 8:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;
  }
}
MPI_Op op_of(int op) {
  switch (op) {
    case 0:
      return MPI_SUM;
    case 2:
      return MPI_MAX;
    case 3:
      return MPI_MIN;
    default:
      return MPI_OP_NULL;
  }
}
int size_of(int t) { return t == 1 ? 1 : t == 7 ? 4 : 8; }

constexpr int kSuccess = 0, kInternalError = 3, kInvalidArgument = 4, kInvalidUsage = 5;

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int ncclGetVersion(int* version) {
  *version = 21805;
  return kSuccess;
}

__attribute__((visibility("default"))) const char* ncclGetErrorString(int result) {
  switch (result) {
    case kSuccess:
      return "no error";
    case kInternalError:
      return "internal error (fake NCCL: MPI failed)";
    case kInvalidArgument:
      return "invalid argument (fake NCCL)";
    case kInvalidUsage:
      return "invalid usage (fake NCCL)";
    default:
      return "unknown result (fake NCCL)";
  }
}

__attribute__((visibility("default"))) int ncclGetUniqueId(void* out) {
  Id id{kMagic, 0, g_sequence.fetch_add(1)};
  MPI_Comm_rank(MPI_COMM_WORLD, &id.maker);
  std::memset(out, 0, 128);
  std::memcpy(out, &id, sizeof id);
  return kSuccess;
}

// The id arrives by value: 128 bytes, as ncclUniqueId is passed.
struct UniqueId {
  char internal[128];
};

__attribute__((visibility("default"))) int ncclCommInitRank(void** comm, int nranks, UniqueId unique, int rank) {
  Id id{};
  std::memcpy(&id, unique.internal, sizeof id);
  if (id.magic != kMagic || nranks < 1 || rank < 0 || rank >= nranks) return kInvalidArgument;
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const int tag = kTagBase + (id.sequence % 1000);
  std::vector<int> members(static_cast<size_t>(nranks), -1);
  if (rank == 0) {
    if (world_rank != id.maker) return kInvalidUsage;  // NCCL rank 0 must be the id's maker
    members[0] = world_rank;
    for (int k = 1; k < nranks; ++k) {
      int msg[2];
      MPI_Status st;
      if (MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &st) != MPI_SUCCESS) return kInternalError;
      if (msg[0] <= 0 || msg[0] >= nranks || members[static_cast<size_t>(msg[0])] != -1) return kInvalidUsage;
      members[static_cast<size_t>(msg[0])] = msg[1];
    }
    for (int k = 1; k < nranks; ++k)
      MPI_Send(members.data(), nranks, MPI_INT, members[static_cast<size_t>(k)], tag, MPI_COMM_WORLD);
  } else {
    int msg[2] = {rank, world_rank};
    MPI_Send(msg, 2, MPI_INT, id.maker, tag, MPI_COMM_WORLD);
    MPI_Recv(members.data(), nranks, MPI_INT, id.maker, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Group world = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, nranks, members.data(), &sub);
  auto* c = new Comm;
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, sub, tag, &c->mpi);
  MPI_Group_free(&sub);
  MPI_Group_free(&world);
  if (rc != MPI_SUCCESS) {
    delete c;
    return kInternalError;
  }
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->size);
  if (c->rank != rank || c->size != nranks) return kInternalError;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_live.insert(c);
  }
  ++g_comms;
  *comm = c;
  return kSuccess;
}

static int release(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_live.erase(c) == 0) return kInvalidArgument;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&c->mpi);
  delete c;
  return kSuccess;
}
__attribute__((visibility("default"))) int ncclCommDestroy(void* comm) { return release(comm); }
__attribute__((visibility("default"))) int ncclCommAbort(void* comm) { return release(comm); }

__attribute__((visibility("default"))) int ncclCommGetAsyncError(void* comm, int* async) {
  if (!live(comm)) return kInvalidArgument;
  *async = kSuccess;
  return kSuccess;
}

__attribute__((visibility("default"))) int ncclAllReduce(const void* send, void* recv, size_t count, int type, int op,
                                                         void* comm, void* /*stream*/) {
  if (!live(comm) || type_of(type) == MPI_DATATYPE_NULL || op_of(op) == MPI_OP_NULL) return kInvalidArgument;
  ++g_collectives;
  g_bytes += static_cast<int64_t>(count) * size_of(type);
  return MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), type_of(type), op_of(op),
                       static_cast<Comm*>(comm)->mpi) == MPI_SUCCESS
             ? kSuccess
             : kInternalError;
}

__attribute__((visibility("default"))) int ncclBroadcast(const void* send, void* recv, size_t count, int type, int root,
                                                         void* comm, void* /*stream*/) {
  if (!live(comm) || type_of(type) == MPI_DATATYPE_NULL) return kInvalidArgument;
  Comm* c = static_cast<Comm*>(comm);
  if (root < 0 || root >= c->size) return kInvalidArgument;
  ++g_collectives;
  g_bytes += static_cast<int64_t>(count) * size_of(type);
  if (c->rank == root && send != recv) std::memmove(recv, send, count * static_cast<size_t>(size_of(type)));
  return MPI_Bcast(recv, static_cast<int>(count), type_of(type), root, c->mpi) == MPI_SUCCESS ? kSuccess
                                                                                              : kInternalError;
}

__attribute__((visibility("default"))) int ncclAllGather(const void* send, void* recv, size_t count, int type,
                                                         void* comm, void* /*stream*/) {
  if (!live(comm) || type_of(type) == MPI_DATATYPE_NULL) return kInvalidArgument;
  ++g_collectives;
  g_bytes += static_cast<int64_t>(count) * size_of(type);
  return MPI_Allgather(send, static_cast<int>(count), type_of(type), recv, static_cast<int>(count), type_of(type),
                       static_cast<Comm*>(comm)->mpi) == MPI_SUCCESS
             ? kSuccess
             : kInternalError;
}

__attribute__((visibility("default"))) int ncclReduceScatter(const void* send, void* recv, size_t recv_count, int type,
                                                             int op, void* comm, void* /*stream*/) {
  if (!live(comm) || type_of(type) == MPI_DATATYPE_NULL || op_of(op) == MPI_OP_NULL) return kInvalidArgument;
  ++g_collectives;
  g_bytes += static_cast<int64_t>(recv_count) * size_of(type);
  return MPI_Reduce_scatter_block(send, recv, static_cast<int>(recv_count), type_of(type), op_of(op),
                                  static_cast<Comm*>(comm)->mpi) == MPI_SUCCESS
             ? kSuccess
             : kInternalError;
}

// For the tests: collectives run, communicators made, communicators alive, payload bytes.
__attribute__((visibility("default"))) void oxmera_fake_nccl_stats(int64_t* collectives, int64_t* comms_made,
                                                                   int64_t* comms_live, int64_t* bytes) {
  *collectives = g_collectives.load();
  *comms_made = g_comms.load();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    *comms_live = static_cast<int64_t>(g_live.size());
  }
  *bytes = g_bytes.load();
}

}  // extern "C"
