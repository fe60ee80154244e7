// What the launcher (mpirun, a PMI launcher, srun) tells a process about its place in the job; no MPI needed.
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

#include "oxmera/distributed.hpp"

namespace oxmera::distributed {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

int parse_int(const char* name, const char* value, int lo) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  OXM_CHECK(errno == 0 && end != value && *end == '\0' && v >= lo && v <= INT_MAX, InvalidArgument,
            "distributed::launch_environment: ", name, "='", value, "' is not an integer >= ", lo,
            "; it is set by the launcher (mpirun / srun): unset it or start the program through the launcher");
  return static_cast<int>(v);
}

struct Scheme {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local[2];  // alternatives, the first that is set wins
};
constexpr Scheme kSchemes[] = {
    {"mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", {"OMPI_COMM_WORLD_LOCAL_RANK", nullptr}},
    {"PMI", "PMI_RANK", "PMI_SIZE", {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}},
    {"srun (Slurm)", "SLURM_PROCID", "SLURM_NTASKS", {"SLURM_LOCALID", nullptr}},
};

}  // namespace

LaunchEnvironment launch_environment() {
  for (const Scheme& s : kSchemes) {
    const char* r = env(s.rank);
    const char* n = env(s.size);
    if (r == nullptr && n == nullptr) continue;
    OXM_CHECK(r != nullptr && n != nullptr, InvalidArgument, "distributed::launch_environment: ", r ? s.rank : s.size,
              " is set but ", r ? s.size : s.rank, " is not; a ", s.launcher,
              " launch sets both: start the program through the launcher, or set both");
    LaunchEnvironment e;
    e.launcher = s.launcher;
    e.rank = parse_int(s.rank, r, 0);
    e.world_size = parse_int(s.size, n, 1);
    OXM_CHECK(e.rank < e.world_size, InvalidArgument, "distributed::launch_environment: ", s.rank, "=", e.rank,
              " is not below ", s.size, "=", e.world_size);
    for (const char* name : s.local) {
      if (name == nullptr) continue;
      if (const char* l = env(name)) {
        e.local_rank = parse_int(name, l, 0);
        break;
      }
    }
    return e;
  }
  OXM_FAIL(InvalidArgument,
           "distributed::launch_environment: this process was not started by a launcher: none of "
           "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_RANK/PMI_SIZE (MPICH, Intel MPI) "
           "or SLURM_PROCID/SLURM_NTASKS (srun) is set; start it with `mpirun -np N program` or `srun -n N program`");
}

const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

InitGuard::~InitGuard() {
  try {
    finalize();
  } catch (...) {  // a destructor must not throw; finalize's errors are for explicit callers
  }
}

}  // namespace oxmera::distributed
