#pragma once
// Collectives over processes (oxmera::distributed): several processes, started by `mpirun` or Slurm's `srun`,
// each holding its own tensors, combine them through MPI. CPU tensors are handed to MPI in place; CUDA tensors
// go through NCCL when it is present at run time (cuda_transport()), else are staged through host memory. A build
// without MPI (OXMERA_MPI=OFF, or no MPI found at configure time) compiles all of this, and init() is a typed
// BackendUnavailable error.
//
// Rules, as in torch.distributed: every process of a group calls the same collectives in the same order, with
// tensors of the same shape and dtype (checked: a mismatch is a typed error on every rank, raised before any data
// moves). Collectives run on the calling thread; calls from several threads at once are not supported.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oxmera/tensor.hpp"

namespace oxmera::distributed {

// True when this build has MPI support compiled in.
bool is_available() noexcept;
// "Open MPI v4.1.4, ..." (MPI_Get_library_version) when compiled in, else "not compiled in".
std::string backend_description();
// How this process's collectives move CUDA tensors: "NCCL 2.18.5 (libnccl.so.2)" when NCCL loads, else
// "host memory + MPI (NCCL: <why not>)". NCCL is found at run time, never linked: OXMERA_NCCL_LIBRARY names another
// file than libnccl.so.2, and OXMERA_NCCL=0 turns it off. A collective goes through NCCL when every rank of its
// group passes a CUDA tensor and has NCCL; otherwise every rank stages it through host memory and MPI (same results).
std::string cuda_transport();
class ProcessGroup;
// The same for one group: also "host memory + MPI (NCCL: ranks 0 and 1 of world share one GPU (...) ...)" once the
// group's first CUDA collective has found two of its ranks on one GPU (NCCL needs one per rank; the group then
// stages every CUDA collective). InvalidArgument for an undefined group.
std::string cuda_transport(const ProcessGroup& group);

// What the launcher told this process. Read from, in this order: Open MPI's mpirun (OMPI_COMM_WORLD_RANK,
// OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK), a PMI launcher such as MPICH's or Intel's (PMI_RANK,
// PMI_SIZE, local rank from MPI_LOCALRANKID or PMI_LOCAL_RANK) and Slurm's srun (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID). local_rank is -1 when the launcher does not say (init() then asks MPI for it).
struct LaunchEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;
  std::string launcher;  // "mpirun (Open MPI)", "PMI", "srun (Slurm)"
};
// Reads the environment without starting MPI. InvalidArgument naming the variables when no launcher's are set,
// when one is set without its partner (e.g. SLURM_PROCID without SLURM_NTASKS), or a value is not a number in range.
LaunchEnvironment launch_environment();

// Starts MPI for this process (idempotent). BackendUnavailable in a build without MPI; InvalidArgument when
// launch_environment() finds no launcher; Backend when MPI disagrees with the environment.
void init();
bool is_initialized() noexcept;
// Waits for every collective still in flight (with the default timeout; Timeout when one does not complete), then
// shuts MPI down. Idempotent; after it, init() may not be called again (MPI forbids it: InvalidArgument).
void finalize();
// init() on construction, finalize() on destruction (errors there are swallowed: a destructor must not throw).
class InitGuard {
 public:
  InitGuard() { init(); }
  ~InitGuard();
  InitGuard(const InitGuard&) = delete;
  InitGuard& operator=(const InitGuard&) = delete;
};

// Of the world (every process the launcher started). InvalidArgument before init().
int rank();
int world_size();
int local_rank();  // the rank among the processes on this machine

// How long a collective's wait() may take before it is a typed Timeout error naming the collective, its group and
// the limit (a peer that stopped calling collectives, or one that died without MPI aborting the job). Default 5
// minutes.
void set_default_timeout(std::chrono::milliseconds timeout);
std::chrono::milliseconds default_timeout();

namespace detail {
struct GroupState;
struct WorkState;
}  // namespace detail

// A set of processes that run collectives together: world(), or new_group(ranks). A default-constructed group
// stands for the world (as torch.distributed's group=None), so the collectives' default argument needs no init().
class ProcessGroup {
 public:
  ProcessGroup() = default;
  explicit ProcessGroup(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}
  bool defined() const noexcept { return state_ != nullptr; }
  // Whether this process belongs to the group. A collective on a group this process is not in is InvalidArgument.
  bool is_member() const;
  int rank() const;  // this process's rank within the group; -1 when not a member
  int size() const;
  const std::vector<int>& ranks() const;  // the world ranks of the members, in group-rank order
  const std::shared_ptr<detail::GroupState>& state() const noexcept { return state_; }

 private:
  std::shared_ptr<detail::GroupState> state_;
};
// Every process. InvalidArgument before init().
ProcessGroup world();
// A group of the given world ranks (group rank i is ranks[i]). Collective over the world: every process calls
// it with the same list, members or not (as torch.distributed.new_group); a different list on some rank, a
// duplicate or an out-of-range rank is InvalidArgument on every rank.
ProcessGroup new_group(const std::vector<int>& ranks);

enum class ReduceOp { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op) noexcept;

// A collective in flight. wait() returns once it, and every collective called before it on the same group, is
// complete on this process (results written to the tensors given, or available from result()); it throws a Timeout
// error after `timeout` (default: the default timeout) and the collective stays in flight: wait() may be called again.
// A shape/dtype mismatch between the ranks is raised by wait() on every rank. Dropping a Work without waiting leaves
// the collective running: it is completed (and its result written) no later than the wait() of a collective called
// after it on the same group, or finalize().
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  void wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Non-blocking: advances the collective and says whether it is complete (throws what wait() would).
  bool is_completed();
  // The output of all_gather_async / reduce_scatter_async, once waited for (InvalidArgument before, or for the
  // in-place collectives, which write into their argument).
  Tensor result() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

// In place: every rank's `tensor` becomes the reduction over the group (Avg: the sum divided by the group size,
// f32/f64 only; integer Sum wraps as the dtype's arithmetic does). Any dtype, any layout (a non-contiguous
// tensor is reduced in a contiguous copy and written back), any device (CUDA: staged through host memory).
void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum, const ProcessGroup& group = {});
Work all_reduce_async(Tensor& tensor, ReduceOp op = ReduceOp::Sum, const ProcessGroup& group = {});
// In place: every rank's `tensor` becomes the tensor of world rank `src` (a member of the group).
void broadcast(Tensor& tensor, int src, const ProcessGroup& group = {});
Work broadcast_async(Tensor& tensor, int src, const ProcessGroup& group = {});
// Stacks the members' tensors: the result has shape [group.size(), *input.shape()], row i from group rank i,
// on input's device.
Tensor all_gather(const Tensor& input, const ProcessGroup& group = {});
Work all_gather_async(const Tensor& input, const ProcessGroup& group = {});
// The inverse layout of all_gather: input has shape [group.size(), *s]; group rank i receives the reduction
// over the members of input[i], shape s.
Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::Sum, const ProcessGroup& group = {});
Work reduce_scatter_async(const Tensor& input, ReduceOp op = ReduceOp::Sum, const ProcessGroup& group = {});
void barrier(const ProcessGroup& group = {});
Work barrier_async(const ProcessGroup& group = {});

}  // namespace oxmera::distributed
