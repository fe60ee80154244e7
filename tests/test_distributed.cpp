// oxmera::distributed: the launcher environment (any build, no launcher needed) and, under mpirun, every
// collective on every rank. Run by ctest under `mpirun -np 2` and `mpirun -np 4` (tests/distributed/run_mpi.sh).
//
// Under MPI every rank runs every test, and each test's collectives are called by all ranks whatever their
// assertions find (EXPECT, not ASSERT, before a collective), so a failure on one rank cannot leave the others
// waiting. At the end the ranks all-reduce their failure flags: a failure anywhere fails every process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "demo_training.hpp"
#include "fake_device.hpp"
#include "oxmera/data.hpp"
#include "oxmera/distributed.hpp"
#include "oxmera/oxmera.hpp"

using namespace oxmera;
namespace dist = oxmera::distributed;

namespace {

bool g_launched = false;

// Sets/unsets environment variables for a scope, restoring what was there.
class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::string> names) {
    for (auto& n : names) {
      const char* v = std::getenv(n.c_str());
      saved_[n] = v ? std::optional<std::string>(v) : std::nullopt;
      unsetenv(n.c_str());
    }
  }
  void set(const std::string& n, const std::string& v) { setenv(n.c_str(), v.c_str(), 1); }
  ~EnvGuard() {
    for (auto& [n, v] : saved_) {
      if (v)
        setenv(n.c_str(), v->c_str(), 1);
      else
        unsetenv(n.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};
const std::vector<std::string> kLauncherVars = {"OMPI_COMM_WORLD_RANK",
                                                "OMPI_COMM_WORLD_SIZE",
                                                "OMPI_COMM_WORLD_LOCAL_RANK",
                                                "PMI_RANK",
                                                "PMI_SIZE",
                                                "MPI_LOCALRANKID",
                                                "PMI_LOCAL_RANK",
                                                "SLURM_PROCID",
                                                "SLURM_NTASKS",
                                                "SLURM_LOCALID"};

template <class F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& needles, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << what << ": " << e.what();
    for (auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << what << ": " << e.what();
  }
}

// ---------------------------------------------------------------- launcher environment (no MPI needed)

TEST(DistributedEnv, NoLauncherIsInvalidArgumentNamingEachLaunchersVariables) {
  EnvGuard env(kLauncherVars);
  expect_error([] { dist::launch_environment(); }, ErrorKind::InvalidArgument,
               {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "mpirun", "srun"}, "no launcher");
}

TEST(DistributedEnv, ReadsEachLauncher) {
  {
    EnvGuard env(kLauncherVars);
    env.set("OMPI_COMM_WORLD_RANK", "2");
    env.set("OMPI_COMM_WORLD_SIZE", "5");
    env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    const auto e = dist::launch_environment();
    EXPECT_EQ(e.rank, 2);
    EXPECT_EQ(e.world_size, 5);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.launcher, "mpirun (Open MPI)");
  }
  {
    EnvGuard env(kLauncherVars);
    env.set("PMI_RANK", "0");
    env.set("PMI_SIZE", "3");
    env.set("MPI_LOCALRANKID", "0");
    const auto e = dist::launch_environment();
    EXPECT_EQ(e.rank, 0);
    EXPECT_EQ(e.world_size, 3);
    EXPECT_EQ(e.local_rank, 0);
    EXPECT_EQ(e.launcher, "PMI");
  }
  {
    EnvGuard env(kLauncherVars);
    env.set("PMI_RANK", "1");
    env.set("PMI_SIZE", "2");
    const auto e = dist::launch_environment();
    EXPECT_EQ(e.local_rank, -1) << "PMI without a local rank: init() asks MPI";
  }
  {
    EnvGuard env(kLauncherVars);
    env.set("SLURM_PROCID", "7");
    env.set("SLURM_NTASKS", "8");
    env.set("SLURM_LOCALID", "3");
    const auto e = dist::launch_environment();
    EXPECT_EQ(e.rank, 7);
    EXPECT_EQ(e.world_size, 8);
    EXPECT_EQ(e.local_rank, 3);
    EXPECT_EQ(e.launcher, "srun (Slurm)");
  }
}

TEST(DistributedEnv, PartialOrBadValuesAreInvalidArgumentNamingTheVariable) {
  {
    EnvGuard env(kLauncherVars);
    env.set("SLURM_PROCID", "0");
    expect_error([] { dist::launch_environment(); }, ErrorKind::InvalidArgument, {"SLURM_PROCID", "SLURM_NTASKS"},
                 "rank without size");
  }
  {
    EnvGuard env(kLauncherVars);
    env.set("PMI_SIZE", "4");
    expect_error([] { dist::launch_environment(); }, ErrorKind::InvalidArgument, {"PMI_RANK", "PMI_SIZE"},
                 "size without rank");
  }
  {
    EnvGuard env(kLauncherVars);
    env.set("OMPI_COMM_WORLD_RANK", "two");
    env.set("OMPI_COMM_WORLD_SIZE", "4");
    expect_error([] { dist::launch_environment(); }, ErrorKind::InvalidArgument, {"OMPI_COMM_WORLD_RANK", "two"},
                 "not a number");
  }
  {
    EnvGuard env(kLauncherVars);
    env.set("OMPI_COMM_WORLD_RANK", "4");
    env.set("OMPI_COMM_WORLD_SIZE", "4");
    expect_error([] { dist::launch_environment(); }, ErrorKind::InvalidArgument,
                 {"OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4"}, "rank >= size");
  }
  {
    EnvGuard env(kLauncherVars);
    env.set("OMPI_COMM_WORLD_RANK", "0");
    env.set("OMPI_COMM_WORLD_SIZE", "0");
    expect_error([] { dist::launch_environment(); }, ErrorKind::InvalidArgument, {"OMPI_COMM_WORLD_SIZE"}, "size 0");
  }
}

TEST(DistributedEnv, DefaultTimeoutIsFiveMinutesAndSettable) {
  const auto before = dist::default_timeout();
  if (!g_launched) {
    EXPECT_EQ(before, std::chrono::minutes(5));
  }
  dist::set_default_timeout(std::chrono::seconds(7));
  EXPECT_EQ(dist::default_timeout(), std::chrono::seconds(7));
  expect_error([] { dist::set_default_timeout(std::chrono::milliseconds(0)); }, ErrorKind::InvalidArgument,
               {"set_default_timeout", "positive"}, "zero timeout");
  dist::set_default_timeout(before);
}

// `oxmera train --distributed --device cuda`: each rank of a node on its own GPU, as torch users do by hand.
TEST(DistributedEnv, RankDeviceSpreadsTheRanksOfANodeOverItsGpus) {
  using workloads::rank_device;
  EXPECT_EQ(rank_device("cuda", 0, 4), Device::cuda(0));
  EXPECT_EQ(rank_device("cuda", 3, 4), Device::cuda(3));
  EXPECT_EQ(rank_device("cuda", 5, 4), Device::cuda(1)) << "more ranks than GPUs: round robin";
  EXPECT_EQ(rank_device("cuda", 7, 1), Device::cuda(0));
  EXPECT_EQ(rank_device("cuda", 2, 0), Device::cuda(0)) << "no GPU visible: cuda:0, whose use says why";
  EXPECT_EQ(rank_device("cuda", -1, 4), Device::cuda(0)) << "local rank unknown";
  EXPECT_EQ(rank_device("cuda:2", 1, 4), Device::cuda(2)) << "an explicit index is taken as given";
  EXPECT_EQ(rank_device("cuda:0", 3, 4), Device::cuda(0));
  EXPECT_EQ(rank_device("cpu", 3, 4), Device::cpu());
  expect_error([] { rank_device("gpu", 0, 1); }, ErrorKind::InvalidArgument, {"gpu"}, "bad name");
}

// Not launched: init() says why it cannot start; everything else says to call init() first (or, without MPI,
// that MPI is not compiled in).
TEST(DistributedNotLaunched, InitAndCollectivesAreTypedErrors) {
  if (g_launched) GTEST_SKIP() << "started by a launcher: MPI is already initialised";
  EnvGuard env(kLauncherVars);
  Tensor t = ones({3});
  if (!dist::is_available()) {
    EXPECT_EQ(dist::backend_description(), "not compiled in");
    expect_error([] { dist::init(); }, ErrorKind::BackendUnavailable, {"distributed::init", "OXMERA_MPI=ON"},
                 "init without MPI");
    expect_error([&] { dist::all_reduce(t); }, ErrorKind::BackendUnavailable, {"all_reduce"}, "all_reduce");
    expect_error([] { dist::rank(); }, ErrorKind::BackendUnavailable, {"rank"}, "rank");
    return;
  }
  EXPECT_NE(dist::backend_description().find("MPI"), std::string::npos) << dist::backend_description();
  expect_error([] { dist::rank(); }, ErrorKind::InvalidArgument, {"distributed::rank", "init()"}, "rank first");
  expect_error([] { dist::world(); }, ErrorKind::InvalidArgument, {"init()"}, "world first");
  expect_error([] { dist::init(); }, ErrorKind::InvalidArgument, {"launcher", "mpirun -np N"}, "init unlaunched");
  EXPECT_FALSE(dist::is_initialized());
}

// ---------------------------------------------------------------- collectives (under mpirun)

#define NEED_MPI()                                                                              \
  do {                                                                                          \
    if (!g_launched) GTEST_SKIP() << "not started by mpirun/srun (ctest runs it under mpirun)"; \
  } while (0)

const DType kDTypes[] = {DType::F32, DType::F64, DType::I64, DType::U8};

Tensor make(const std::vector<double>& v, const Shape& s, DType d) { return from_vector(v, s).to(d); }
std::vector<double> vals(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
}

// A small integer pattern every dtype holds exactly (u8 too, for 4 ranks: at most 4 * 5 = 20 for the sums).
double pattern(int rank, int64_t i) { return static_cast<double>((rank + 1) * (i % 5 + 1) % 11); }

std::string label(DType d, dist::ReduceOp op, int64_t n) {
  return std::string(dtype_name(d)) + " " + dist::reduce_op_name(op) + " n=" + std::to_string(n);
}

double reduce_expected(dist::ReduceOp op, int ranks, int64_t i, int row_offset = 0) {
  double s = 0, mx = -1e300, mn = 1e300;
  for (int r = 0; r < ranks; ++r) {
    const double v = pattern(r, i + row_offset);
    s += v;
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  switch (op) {
    case dist::ReduceOp::Sum:
      return s;
    case dist::ReduceOp::Avg:
      return s / ranks;
    case dist::ReduceOp::Max:
      return mx;
    case dist::ReduceOp::Min:
      return mn;
  }
  return 0;
}

const dist::ReduceOp kOps[] = {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max, dist::ReduceOp::Min};
const int64_t kSizes[] = {1, 7, 1031};

// This rank's pattern as a 1-d tensor of `len` elements.
Tensor pattern_tensor(int rank, int64_t len, DType d) {
  std::vector<double> v(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) v[static_cast<size_t>(i)] = pattern(rank, i);
  return make(v, {len}, d);
}
// t holds the all-reduced pattern of `ranks` ranks (f32 within 1e-6 relative; the rest exactly), in t's dtype d.
void expect_all_reduced(const Tensor& t, dist::ReduceOp op, int ranks, DType d) {
  EXPECT_EQ(t.dtype(), d);
  const auto got = vals(t);
  int bad = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double want = reduce_expected(op, ranks, i);
    const double tol = d == DType::F32 ? 1e-6 * std::abs(want) : 0.0;
    if (std::abs(got[static_cast<size_t>(i)] - want) > tol && bad++ < 3)
      ADD_FAILURE() << label(d, op, t.numel()) << " [" << i << "]: " << got[static_cast<size_t>(i)] << " != " << want;
  }
}

TEST(Distributed, RanksAndWorld) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  EXPECT_GE(r, 0);
  EXPECT_LT(r, n);
  EXPECT_GE(dist::local_rank(), 0);
  EXPECT_TRUE(dist::is_initialized());
  auto w = dist::world();
  EXPECT_EQ(w.rank(), r);
  EXPECT_EQ(w.size(), n);
  EXPECT_TRUE(w.is_member());
  // The rank sum over the world is n(n-1)/2 (one machine here: local ranks are the world ranks).
  Tensor t = scalar(static_cast<double>(r), DType::I64);
  dist::all_reduce(t);
  EXPECT_EQ(t.item<int64_t>(), static_cast<int64_t>(n) * (n - 1) / 2);
  EXPECT_EQ(t.dim(), 0);
}

TEST(Distributed, AllReduceEveryOpDtypeAndSize) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : kDTypes)
    for (dist::ReduceOp op : kOps)
      for (int64_t len : kSizes) {
        Tensor t = pattern_tensor(r, len, d);
        if (op == dist::ReduceOp::Avg && !is_floating(d)) {
          expect_error([&] { dist::all_reduce(t, op); }, ErrorKind::UnsupportedDType, {"Avg", dtype_name(d)},
                       label(d, op, len));
          continue;
        }
        dist::all_reduce(t, op);
        expect_all_reduced(t, op, n, d);
      }
}

// Above 64 KiB an all-reduce runs as a ring of point-to-point messages (segments of uneven sizes here: 70001 is odd
// and prime to 2 and 4); the ctests distributed_ring_np2 / _np4 send every all-reduce of the suite that way.
TEST(Distributed, LargeAllReducesEveryOpAndDtype) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : kDTypes)
    for (dist::ReduceOp op : kOps) {
      if (op == dist::ReduceOp::Avg && !is_floating(d)) continue;
      Tensor t = pattern_tensor(r, 70001, d);
      dist::all_reduce(t, op);
      expect_all_reduced(t, op, n, d);
      Tensor a = pattern_tensor(r, 70001, d), b = pattern_tensor(r, 70001, d);  // two rings in flight at once
      auto wa = dist::all_reduce_async(a, op);
      auto wb = dist::all_reduce_async(b, op);
      wb.wait();
      wa.wait();
      expect_all_reduced(a, op, n, d);
      expect_all_reduced(b, op, n, d);
    }
}

TEST(Distributed, IntegerSumWrapsAsTheDtype) {
  NEED_MPI();
  const int n = dist::world_size();
  Tensor t = full({3}, 200.0, DType::U8);
  dist::all_reduce(t, dist::ReduceOp::Sum);
  for (double x : vals(t)) EXPECT_EQ(x, static_cast<double>((200 * n) % 256));
}

TEST(Distributed, BroadcastEveryDtypeFromEveryRoot) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : kDTypes)
    for (int src = 0; src < n; ++src)
      for (int64_t len : {int64_t{1}, int64_t{1031}}) {
        std::vector<double> v(static_cast<size_t>(len));
        for (int64_t i = 0; i < len; ++i) v[static_cast<size_t>(i)] = pattern(r, i);
        Tensor t = make(v, {len}, d);
        dist::broadcast(t, src);
        const auto got = vals(t);
        for (int64_t i = 0; i < len; ++i)
          if (got[static_cast<size_t>(i)] != pattern(src, i)) {
            ADD_FAILURE() << dtype_name(d) << " from " << src << " [" << i << "]";
            break;
          }
      }
}

TEST(Distributed, AllGatherStacksEveryDtype) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : kDTypes)
    for (int64_t len : kSizes) {
      std::vector<double> v(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) v[static_cast<size_t>(i)] = pattern(r, i);
      Tensor out = dist::all_gather(make(v, {len}, d));
      EXPECT_EQ(out.shape(), Shape({n, len}));
      EXPECT_EQ(out.dtype(), d);
      const auto got = vals(out);
      for (int q = 0; q < n; ++q)
        for (int64_t i = 0; i < len; ++i)
          if (got[static_cast<size_t>(q * len + i)] != pattern(q, i)) {
            ADD_FAILURE() << dtype_name(d) << " n=" << len << " row " << q << " [" << i << "]";
            q = n;
            break;
          }
    }
}

TEST(Distributed, ReduceScatterEveryOpAndDtype) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : kDTypes)
    for (dist::ReduceOp op : kOps)
      for (int64_t len : {int64_t{1}, int64_t{7}}) {
        if (op == dist::ReduceOp::Avg && !is_floating(d)) continue;  // the Avg dtype rule is tested above
        // Row q of rank r's input holds pattern(r, q * 100 + i); rank q receives the reduction of row q.
        std::vector<double> v(static_cast<size_t>(n * len));
        for (int q = 0; q < n; ++q)
          for (int64_t i = 0; i < len; ++i) v[static_cast<size_t>(q * len + i)] = pattern(r, q * 100 + i);
        Tensor out = dist::reduce_scatter(make(v, {n, len}, d), op);
        EXPECT_EQ(out.shape(), Shape({len}));
        const auto got = vals(out);
        for (int64_t i = 0; i < len; ++i) {
          const double want = reduce_expected(op, n, i, r * 100);
          const double tol = d == DType::F32 ? 1e-6 * std::abs(want) : 0.0;
          EXPECT_LE(std::abs(got[static_cast<size_t>(i)] - want), tol) << label(d, op, len) << " [" << i << "]";
        }
      }
  // A first dim other than the group size is refused before any communication (the same on every rank).
  expect_error(
      [&] {
        dist::reduce_scatter(ones({n + 1, 2}));
      },
      ErrorKind::ShapeMismatch, {"reduce_scatter", "group size"}, "wrong first dim");
}

TEST(Distributed, EmptyAndScalarTensors) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : kDTypes) {
    Tensor e = zeros({0}, d);
    dist::all_reduce(e);
    EXPECT_EQ(e.shape(), Shape({0}));
    Tensor e2 = zeros({3, 0}, d);
    dist::broadcast(e2, n - 1);
    EXPECT_EQ(e2.shape(), Shape({3, 0}));
    Tensor g = dist::all_gather(zeros({0}, d));
    EXPECT_EQ(g.shape(), Shape({n, 0}));
    Tensor s = dist::reduce_scatter(zeros({n, 0}, d));
    EXPECT_EQ(s.shape(), Shape({0}));
    Tensor g0 = dist::all_gather(scalar(static_cast<double>(r), d));
    EXPECT_EQ(g0.shape(), Shape({n}));
    const auto got = vals(g0);
    for (int q = 0; q < n; ++q) EXPECT_EQ(got[static_cast<size_t>(q)], q) << dtype_name(d);
  }
}

TEST(Distributed, NonContiguousInputsAreWrittenBackIntoTheirViews) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : kDTypes) {
    // A transposed [5, 3] view: reduced in a copy and written back through the view.
    Tensor base = make(std::vector<double>(15, static_cast<double>(r + 1)), {3, 5}, d);
    Tensor view = base.t();
    ASSERT_FALSE(view.is_contiguous());
    dist::all_reduce(view, dist::ReduceOp::Sum);
    for (double x : vals(base)) EXPECT_EQ(x, n * (n + 1) / 2) << dtype_name(d);
    EXPECT_TRUE(view.shares_storage(base));
    // Every other element of a row: the others must stay as they were.
    Tensor row = make(std::vector<double>(9, static_cast<double>(r + 1)), {9}, d);
    Tensor strided = row.slice(0, 0, 9, 2);
    dist::broadcast(strided, n - 1);
    const auto got = vals(row);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], i % 2 == 0 ? static_cast<double>(n) : static_cast<double>(r + 1)) << dtype_name(d) << " " << i;
    // all_gather and reduce_scatter read a non-contiguous input.
    Tensor g = dist::all_gather(base.t());
    EXPECT_EQ(g.shape(), Shape({n, 5, 3}));
    Tensor src = make(std::vector<double>(static_cast<size_t>(2 * n), 1.0), {2, n}, d).t();
    Tensor rs = dist::reduce_scatter(src, dist::ReduceOp::Sum);
    EXPECT_EQ(vals(rs), std::vector<double>(2, static_cast<double>(n))) << dtype_name(d);
  }
}

TEST(Distributed, SubGroups) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  std::vector<int> evens, odds, reversed;
  for (int q = 0; q < n; ++q) (q % 2 == 0 ? evens : odds).push_back(q);
  for (int q = n - 1; q >= 0; --q) reversed.push_back(q);
  auto ge = dist::new_group(evens);
  auto go = dist::new_group(odds);
  auto gr = dist::new_group(reversed);
  auto& mine = r % 2 == 0 ? ge : go;
  auto& other = r % 2 == 0 ? go : ge;
  const auto& members = r % 2 == 0 ? evens : odds;
  EXPECT_TRUE(mine.is_member());
  EXPECT_FALSE(other.is_member());
  EXPECT_EQ(other.rank(), -1);
  EXPECT_EQ(mine.rank(), r / 2);
  EXPECT_EQ(mine.size(), static_cast<int>(members.size()));
  EXPECT_EQ(mine.ranks(), members);
  EXPECT_EQ(gr.rank(), n - 1 - r);
  // Sum of the members' world ranks, within each half.
  Tensor t = scalar(static_cast<double>(r), DType::I64);
  dist::all_reduce(t, dist::ReduceOp::Sum, mine);
  int64_t want = 0;
  for (int q : members) want += q;
  EXPECT_EQ(t.item<int64_t>(), want);
  // broadcast names the source by its world rank; all_gather stacks in group-rank order.
  Tensor b = scalar(static_cast<double>(r), DType::I64);
  dist::broadcast(b, members.back(), mine);
  EXPECT_EQ(b.item<int64_t>(), members.back());
  EXPECT_EQ(vals(dist::all_gather(scalar(static_cast<double>(r), DType::F64), gr)), [&] {
    std::vector<double> v;
    for (int q : reversed) v.push_back(q);
    return v;
  }());
  dist::barrier(mine);
  // Non-members, and sources outside the group, are refused locally.
  expect_error([&] { dist::all_reduce(t, dist::ReduceOp::Sum, other); }, ErrorKind::InvalidArgument,
               {"not a member", "group ["}, "non-member");
  if (n > 1)
    expect_error([&] { dist::broadcast(b, other.ranks().front(), mine); }, ErrorKind::InvalidArgument,
                 {"source", "not a member"}, "source outside");
  // A default-constructed group is the world.
  dist::ProcessGroup none;
  EXPECT_EQ(none.size(), n);
  EXPECT_EQ(none.rank(), r);
  Tensor one = ones({1});
  dist::all_reduce(one, dist::ReduceOp::Sum, none);
  EXPECT_EQ(one.item<float>(), static_cast<float>(n));
}

TEST(Distributed, NewGroupDisagreementIsAnErrorOnEveryRank) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int> list = {0, 1};
  if (r == 0) list = {0};
  expect_error([&] { dist::new_group(list); }, ErrorKind::InvalidArgument, {"new_group", "different rank list"},
               "different lists");
  expect_error(
      [&] {
        dist::new_group({0, n});
      },
      ErrorKind::InvalidArgument, {"new_group", "not in [0"}, "out of range");
  expect_error([&] { dist::new_group({1, 1}); }, ErrorKind::InvalidArgument, {"listed twice"}, "duplicate");
  // A valid group still forms afterwards.
  auto g = dist::new_group({1, 0});
  EXPECT_EQ(g.rank(), r <= 1 ? 1 - r : -1);
}

TEST(Distributed, AsyncHandlesCompleteInAnyWaitOrder) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  Tensor a = full({5}, r + 1.0, DType::F64), b = full({3, 3}, r + 1.0, DType::F32).t();
  Tensor c = scalar(static_cast<double>(r), DType::I64);
  auto wa = dist::all_reduce_async(a, dist::ReduceOp::Max);
  auto wb = dist::all_reduce_async(b, dist::ReduceOp::Avg);
  auto wc = dist::broadcast_async(c, n - 1);
  auto wg = dist::all_gather_async(full({2}, r, DType::I64));
  auto ws = dist::reduce_scatter_async(ones({n, 4}, DType::F64));
  auto wbar = dist::barrier_async();
  // The gathered tensor is there only once waited for (whether or not the data have arrived yet).
  expect_error([&] { wg.result(); }, ErrorKind::InvalidArgument, {"wait() first"}, "result before wait");
  expect_error([&] { wa.result(); }, ErrorKind::InvalidArgument, {"no result tensor"}, "result of all_reduce");
  wbar.wait();
  ws.wait();
  while (!wc.is_completed()) {
  }
  wb.wait();
  wg.wait();
  wa.wait();
  EXPECT_EQ(vals(a), std::vector<double>(5, n));
  EXPECT_EQ(vals(b), std::vector<double>(9, (n + 1) / 2.0));
  EXPECT_EQ(c.item<int64_t>(), n - 1);
  EXPECT_EQ(wg.result().shape(), Shape({n, 2}));
  EXPECT_EQ(vals(ws.result()), std::vector<double>(4, n));
  wa.wait();  // waiting again is a no-op
  // A dropped handle's collective still completes (here, in the barrier's progress) and writes its tensor.
  Tensor d = full({4}, 1.0);
  dist::all_reduce_async(d);
  dist::barrier();
  EXPECT_EQ(vals(d), std::vector<double>(4, n));
}

TEST(Distributed, MismatchedCollectivesAreTypedErrorsOnEveryRank) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  // Shapes differ on rank 0.
  Tensor s = ones({r == 0 ? 3 : 4});
  expect_error([&] { dist::all_reduce(s); }, ErrorKind::ShapeMismatch,
               {"all_reduce", "mismatched", "rank 0: all_reduce f32 sum [3]", "rank 1: all_reduce f32 sum [4]"},
               "shapes");
  // Dtypes differ.
  Tensor t = ones({2}, r == 1 ? DType::F64 : DType::F32);
  expect_error([&] { dist::all_reduce(t); }, ErrorKind::DTypeMismatch, {"rank 1: all_reduce f64"}, "dtypes");
  // Ops differ.
  Tensor u = ones({2});
  expect_error([&] { dist::all_reduce(u, r == 0 ? dist::ReduceOp::Max : dist::ReduceOp::Sum); },
               ErrorKind::InvalidArgument, {"rank 0: all_reduce f32 max", "rank 1: all_reduce f32 sum"}, "ops");
  // Roots differ.
  expect_error([&] { dist::broadcast(u, r == 0 ? 0 : 1); }, ErrorKind::InvalidArgument, {"from rank 0", "from rank 1"},
               "roots");
  // Different collectives.
  expect_error(
      [&] {
        if (r == 0)
          dist::all_reduce(u);
        else
          dist::all_gather(u);
      },
      ErrorKind::InvalidArgument, {"rank 0: all_reduce", "rank 1: all_gather"}, "collectives");
  // all_gather needs one shape too.
  expect_error([&] { dist::all_gather(ones({r + 1, 2})); }, ErrorKind::ShapeMismatch, {"all_gather"}, "gather");
  // The data the failed calls carried were not touched, and the next collective works.
  EXPECT_EQ(vals(s), std::vector<double>(static_cast<size_t>(r == 0 ? 3 : 4), 1.0));
  Tensor ok = ones({2});
  dist::all_reduce(ok);
  EXPECT_EQ(vals(ok), std::vector<double>(2, n));
  // Async: the mismatch is raised by wait(), on every rank.
  Tensor a = ones({r + 2});
  auto w = dist::all_reduce_async(a);
  expect_error([&] { w.wait(); }, ErrorKind::ShapeMismatch, {"mismatched"}, "async shapes");
}

TEST(Distributed, WaitTimesOutWithATypedErrorAndCanBeWaitedAgain) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int> all;
  for (int q = 0; q < n; ++q) all.push_back(q);
  auto g = dist::new_group(all);
  Tensor x = full({3}, r + 1.0, DType::F64);
  if (r == 0) {
    // The others only join after the world barrier, which rank 0 reaches after its wait has given up.
    auto w = dist::all_reduce_async(x, dist::ReduceOp::Sum, g);
    expect_error([&] { w.wait(std::chrono::milliseconds(50)); }, ErrorKind::Timeout,
                 {"all_reduce f64 [3]", "on group [", "did not complete within 50 ms (0.05 s)",
                  "waiting for the other ranks", "Work::wait(timeout)", "set_default_timeout"},
                 "timeout");
    dist::barrier();
    w.wait();
  } else {
    dist::barrier();
    dist::all_reduce(x, dist::ReduceOp::Sum, g);
  }
  EXPECT_EQ(vals(x), std::vector<double>(3, n * (n + 1) / 2.0));
  expect_error([&] { dist::barrier_async(g).wait(std::chrono::milliseconds(-1)); }, ErrorKind::InvalidArgument,
               {"positive"}, "negative timeout");
  dist::barrier(g);  // the barrier above was issued everywhere: let it complete
}

TEST(Distributed, CudaTensorsAreStagedThroughHostMemory) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  auto* fake = oxt_fake::register_host_memory_device();  // a host-memory stand-in unless a real GPU is there
  if (fake != nullptr) fake->claims_cuda_memory = false;
  ASSERT_TRUE(device_available(Device::cuda()));
  Tensor t = full({6}, r + 1.0).to(Device::cuda());
  const int64_t d2h = fake != nullptr ? fake->device_to_host.load() : 0;
  dist::all_reduce(t, dist::ReduceOp::Sum);
  if (fake != nullptr) {  // the test device's memory is not CUDA memory: staged, even when an NCCL is loaded
    EXPECT_EQ(fake->device_to_host.load(), d2h + 1) << "one device-to-host copy";
  }
  EXPECT_TRUE(t.device().is_cuda());
  EXPECT_EQ(vals(t), std::vector<double>(6, n * (n + 1) / 2.0));
  Tensor b = full({2, 3}, static_cast<double>(r)).to(Device::cuda()).t();
  dist::broadcast(b, 0);
  EXPECT_EQ(vals(b), std::vector<double>(6, 0.0));
  Tensor g = dist::all_gather(full({2}, static_cast<double>(r)).to(Device::cuda()));
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(g.shape(), Shape({n, 2}));
  Tensor s = dist::reduce_scatter(ones({n, 2}).to(Device::cuda()), dist::ReduceOp::Avg);
  EXPECT_TRUE(s.device().is_cuda());
  EXPECT_EQ(vals(s), std::vector<double>(2, 1.0));
}

// ---------------------------------------------------------------- CUDA tensors through NCCL
// ctest distributed_nccl_np2 / _np4 run these with OXMERA_NCCL_LIBRARY naming tests/distributed/fake_nccl.cpp's
// library (MPI behind NCCL's calls) and the host-memory test device: what is tested is oxmera's side (loading,
// the communicator's bootstrap, the choice of transport, buffers, stream markers, write-back), not NCCL.

std::shared_ptr<nn::Sequential> demo_mlp(uint64_t seed, DType dtype);
// One optimizer step on the cross entropy of model(x) against y (model: a module or a DistributedDataParallel).
template <class Model>
void cross_entropy_step(optim::Optimizer& opt, Model& model, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  nn::cross_entropy(model(x), y).backward();
  opt.step();
}
void expect_same_parameters(const nn::Module& a, const nn::Module& b, double rtol, const std::string& what);

struct FakeNcclStats {
  int64_t collectives = 0, comms_made = 0, comms_live = 0, bytes = 0;
};
// The fake's counters, when OXMERA_NCCL_LIBRARY names it and oxmera has loaded it.
std::optional<FakeNcclStats> fake_nccl_stats() {
  const char* path = std::getenv("OXMERA_NCCL_LIBRARY");
  if (path == nullptr) return std::nullopt;
  void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return std::nullopt;
  using StatsFn = void (*)(int64_t*, int64_t*, int64_t*, int64_t*);
  auto fn = reinterpret_cast<StatsFn>(dlsym(lib, "oxmera_fake_nccl_stats"));
  dlclose(lib);  // oxmera's handle keeps it loaded
  if (fn == nullptr) return std::nullopt;
  FakeNcclStats st;
  fn(&st.collectives, &st.comms_made, &st.comms_live, &st.bytes);
  return st;
}

#define NEED_FAKE_NCCL(fake)                                                                                    \
  do {                                                                                                          \
    NEED_MPI();                                                                                                 \
    if (dist::cuda_transport().rfind("NCCL ", 0) != 0 || !fake_nccl_stats())                                    \
      GTEST_SKIP() << "OXMERA_NCCL_LIBRARY does not name the test NCCL (ctest distributed_nccl_np2 / _np4 do)"; \
    fake = oxt_fake::register_host_memory_device();                                                             \
    if (fake == nullptr) GTEST_SKIP() << "a real GPU is present: the test NCCL works on host memory only";      \
    fake->claims_cuda_memory = true;                                                                            \
  } while (0)

TEST(DistributedNccl, TransportSaysWhichAndWhy) {
  const std::string t = dist::cuda_transport();
  if (!dist::is_available()) {
    EXPECT_EQ(t, "none: this oxmera was built without MPI");
    return;
  }
  const char* off = std::getenv("OXMERA_NCCL");
  const std::string lib = std::getenv("OXMERA_NCCL_LIBRARY") != nullptr ? std::getenv("OXMERA_NCCL_LIBRARY") : "";
  if (off != nullptr && std::string(off) == "0") {
    EXPECT_EQ(t, "host memory + MPI (NCCL: turned off by OXMERA_NCCL=0)");
  } else if (lib == "libm.so.6") {
    EXPECT_EQ(t,
              "host memory + MPI (NCCL: libm.so.6 is not a usable NCCL: it has no ncclGetVersion (NCCL 2.4 or "
              "later is needed))");
  } else if (lib.rfind("/nonexistent/", 0) == 0) {
    EXPECT_EQ(t.rfind("host memory + MPI (NCCL: " + lib + " did not load (", 0), 0u) << t;
  } else if (lib.find("fake_nccl") != std::string::npos) {
    EXPECT_EQ(t, "NCCL 2.18.5 (" + lib + ")");
  } else {
    EXPECT_TRUE(t.rfind("NCCL 2.", 0) == 0 || t.rfind("host memory + MPI (NCCL: libnccl.so.2 did not load (", 0) == 0)
        << t;
  }
}

// Every collective, dtype and op through NCCL: right values on the caller's device, and no host copy.
TEST(DistributedNccl, CudaCollectivesGoThroughNcclWithoutHostCopies) {
  oxt_fake::HostMemoryDevice* fake = nullptr;
  NEED_FAKE_NCCL(fake);
  const int r = dist::rank(), n = dist::world_size();
  const FakeNcclStats before = *fake_nccl_stats();
  int64_t expected = 0;
  auto host_copies = [&] { return fake->device_to_host.load() + fake->host_to_device.load(); };
  for (DType d : {DType::F32, DType::I64, DType::U8})  // the dtypes a CUDA tensor has
    for (dist::ReduceOp op : kOps)
      for (int64_t len : kSizes) {
        if (op == dist::ReduceOp::Avg && !is_floating(d)) continue;
        Tensor t = pattern_tensor(r, len, d).to(Device::cuda());
        const int64_t copies = host_copies();
        dist::all_reduce(t, op);
        ++expected;
        EXPECT_EQ(host_copies(), copies) << label(d, op, len) << ": the data stayed on the device";
        EXPECT_TRUE(t.device().is_cuda());
        expect_all_reduced(t, op, n, d);
      }
  // Broadcast into a non-contiguous view (a device buffer, then written back) and from a contiguous root.
  for (int src = 0; src < n; ++src) {
    Tensor b = full({2, 3}, static_cast<double>(r)).to(Device::cuda()).t();
    const int64_t copies = host_copies();
    dist::broadcast(b, src);
    ++expected;
    EXPECT_EQ(host_copies(), copies);
    EXPECT_EQ(b.shape(), Shape({3, 2}));
    EXPECT_EQ(vals(b), std::vector<double>(6, static_cast<double>(src))) << "from " << src;
  }
  Tensor g = dist::all_gather(full({3}, static_cast<double>(r), DType::I64).to(Device::cuda()));
  ++expected;
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(g.shape(), Shape({n, 3}));
  const auto gv = vals(g);
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(gv[static_cast<size_t>(k * 3 + j)], k);
  Tensor s = dist::reduce_scatter((ones({n, 2}) * (r + 1.0)).to(Device::cuda()), dist::ReduceOp::Avg);
  ++expected;
  EXPECT_TRUE(s.device().is_cuda());
  EXPECT_EQ(vals(s), std::vector<double>(2, (n + 1) / 2.0));
  // An empty tensor goes nowhere near NCCL; async handles waited in reverse order; results on autograd's version.
  Tensor e = zeros({0, 3}).to(Device::cuda());
  dist::all_reduce(e);
  EXPECT_EQ(e.shape(), Shape({0, 3}));
  Tensor a1 = full({5}, 1.0).to(Device::cuda()), a2 = full({4}, 2.0, DType::I64).to(Device::cuda());
  auto w1 = dist::all_reduce_async(a1);
  auto w2 = dist::all_reduce_async(a2, dist::ReduceOp::Max);
  w2.wait();
  w1.wait();
  expected += 2;
  EXPECT_EQ(vals(a1), std::vector<double>(5, static_cast<double>(n)));
  EXPECT_EQ(vals(a2), std::vector<double>(4, 2.0));
  const FakeNcclStats after = *fake_nccl_stats();
  EXPECT_EQ(after.collectives - before.collectives, expected);
  EXPECT_LE(after.comms_made - before.comms_made, 1) << "one communicator for the world, made once";
}

// A group's NCCL communicator is its own; a rank passing a CPU tensor sends every rank through MPI.
TEST(DistributedNccl, SubGroupsAndMixedDevices) {
  oxt_fake::HostMemoryDevice* fake = nullptr;
  NEED_FAKE_NCCL(fake);
  const int r = dist::rank(), n = dist::world_size();
  std::vector<int> odds;
  for (int k = 1; k < n; k += 2) odds.push_back(k);
  std::vector<int> reversed;
  for (int k = n - 1; k >= 0; --k) reversed.push_back(k);
  auto godd = dist::new_group(odds);
  auto grev = dist::new_group(reversed);
  FakeNcclStats before = *fake_nccl_stats();
  if (godd.is_member()) {
    Tensor t = full({3}, static_cast<double>(r)).to(Device::cuda());
    dist::all_reduce(t, dist::ReduceOp::Sum, godd);
    double want = 0;
    for (int k : odds) want += k;
    EXPECT_EQ(vals(t), std::vector<double>(3, want));
  }
  Tensor g = dist::all_gather(full({1}, static_cast<double>(r)).to(Device::cuda()), grev);
  const auto gv = vals(g);
  for (int k = 0; k < n; ++k) EXPECT_EQ(gv[static_cast<size_t>(k)], n - 1 - k) << "group rank order";
  FakeNcclStats after = *fake_nccl_stats();
  EXPECT_EQ(after.collectives - before.collectives, godd.is_member() ? 2 : 1);
  EXPECT_EQ(after.comms_made - before.comms_made, godd.is_member() ? 2 : 1);
  // Mixed: rank 0's tensor is on the CPU, the others' on CUDA. Every rank stages; results as ever.
  before = after;
  Tensor m = full({4}, r + 1.0);
  if (r != 0) m = m.to(Device::cuda());
  dist::all_reduce(m);
  EXPECT_EQ(m.device().is_cuda(), r != 0);
  EXPECT_EQ(vals(m), std::vector<double>(4, n * (n + 1) / 2.0));
  Tensor mg = dist::all_gather(r == 0 ? ones({2}) : ones({2}).to(Device::cuda()));
  EXPECT_EQ(mg.device().is_cuda(), r != 0);
  EXPECT_EQ(vals(mg), std::vector<double>(static_cast<size_t>(2 * n), 1.0));
  after = *fake_nccl_stats();
  EXPECT_EQ(after.collectives, before.collectives) << "a CPU tensor on one rank: MPI for all";
  // A mismatch is still the same typed error on every rank before anything reaches NCCL.
  Tensor bad = zeros({r == 0 ? 3 : 4}).to(Device::cuda());
  expect_error([&] { dist::all_reduce(bad); }, ErrorKind::ShapeMismatch, {"mismatched"}, "shape mismatch");
  EXPECT_EQ(fake_nccl_stats()->collectives, after.collectives);
}

// Ranks on one GPU (every rank drives cuda:0): NCCL would refuse them, so the group stages, on every rank alike, and
// says why; a group whose ranks have their own devices still takes NCCL.
TEST(DistributedNccl, RanksSharingAGpuAreStaged) {
  oxt_fake::HostMemoryDevice* fake = nullptr;
  NEED_FAKE_NCCL(fake);
  const int r = dist::rank(), n = dist::world_size();
  std::vector<int> all;
  for (int k = 0; k < n; ++k) all.push_back(k);
  fake->share_identity = true;
  auto shared = dist::new_group(all);  // a fresh group: no communicator yet
  const FakeNcclStats before = *fake_nccl_stats();
  EXPECT_EQ(dist::cuda_transport(shared), dist::cuda_transport()) << "nothing known before its first collective";
  for (int round = 0; round < 2; ++round) {
    Tensor t = full({5}, r + 1.0).to(Device::cuda());
    const int64_t d2h = fake->device_to_host.load();
    dist::all_reduce(t, dist::ReduceOp::Sum, shared);
    EXPECT_EQ(fake->device_to_host.load(), d2h + 1) << "staged through host memory, round " << round;
    EXPECT_TRUE(t.device().is_cuda());
    EXPECT_EQ(vals(t), std::vector<double>(5, n * (n + 1) / 2.0));
  }
  Tensor g = dist::all_gather(full({2}, static_cast<double>(r)).to(Device::cuda()), shared);
  EXPECT_EQ(g.shape(), Shape({n, 2}));
  EXPECT_EQ(vals(g)[static_cast<size_t>(2 * n - 1)], n - 1.0);
  const FakeNcclStats after = *fake_nccl_stats();
  EXPECT_EQ(after.collectives, before.collectives);
  EXPECT_EQ(after.comms_made, before.comms_made) << "NCCL was not asked for a communicator";
  EXPECT_EQ(dist::cuda_transport(shared),
            std::string("host memory + MPI (NCCL: ranks 0 and 1 of group [0, 1") + (n == 4 ? ", 2, 3" : "") +
                "] share one GPU (host-memory test device (shared)), and NCCL needs a GPU per rank; give each rank "
                "its own (CUDA_VISIBLE_DEVICES))");
  fake->share_identity = false;
  auto own = dist::new_group(all);
  Tensor t = full({3}, 1.0).to(Device::cuda());
  dist::all_reduce(t, dist::ReduceOp::Sum, own);
  EXPECT_EQ(vals(t), std::vector<double>(3, static_cast<double>(n)));
  EXPECT_EQ(fake_nccl_stats()->collectives, after.collectives + 1);
  EXPECT_EQ(dist::cuda_transport(own), dist::cuda_transport());
  expect_error([] { dist::cuda_transport(dist::ProcessGroup()); }, ErrorKind::InvalidArgument, {"undefined"},
               "undefined group");
}

// DDP's buckets on the device go through NCCL and train as one process on the global batch.
TEST(DistributedNccl, DataParallelOnTheDeviceMatchesOneProcess) {
  oxt_fake::HostMemoryDevice* fake = nullptr;
  NEED_FAKE_NCCL(fake);
  const int r = dist::rank(), n = dist::world_size();
  const FakeNcclStats before = *fake_nccl_stats();
  const int64_t per_rank = 8, global = per_rank * n;
  Tensor x = randn({global, 2}, 11, DType::F32), y = randint(0, 2, {global}, 12);
  auto ref = demo_mlp(5, DType::F32);
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.2, .momentum = 0.9});
  auto net = demo_mlp(5 + static_cast<uint64_t>(r), DType::F32);
  net->to(Device::cuda());
  nn::DistributedDataParallel ddp(net, {}, {.bucket_cap_bytes = 1024});
  optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
  Tensor xd = x.to(Device::cuda()), yd = y.to(Device::cuda());
  for (int step = 0; step < 3; ++step) {
    cross_entropy_step(ref_opt, *ref, x, y);
    cross_entropy_step(opt, ddp, xd.narrow(0, r * per_rank, per_rank), yd.narrow(0, r * per_rank, per_rank));
  }
  expect_same_parameters(*net, *ref, 1e-6, "f32 DDP through NCCL");
  EXPECT_GE(fake_nccl_stats()->collectives - before.collectives, static_cast<int64_t>(3 * ddp.buckets().size()))
      << "every bucket of every step";
}

// ---------------------------------------------------------------- nn::DistributedDataParallel

std::shared_ptr<nn::Sequential> demo_mlp(uint64_t seed, DType dtype) {
  Generator gen(seed);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(2, 32, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 32, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 2, true, gen)});
  if (dtype != DType::F32) net->to(dtype);
  return net;
}

void expect_same_parameters(const nn::Module& a, const nn::Module& b, double rtol, const std::string& what) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size()) << what;
  for (size_t k = 0; k < pa.size(); ++k) {
    const auto va = vals(pa[k].second), vb = vals(pb[k].second);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      scale = std::max(scale, std::abs(vb[i]));
      worst = std::max(worst, std::abs(va[i] - vb[i]));
    }
    EXPECT_LE(worst, rtol * std::max(scale, 1e-30)) << what << ": " << pa[k].first;
  }
}

// Each rank trains on its equal share of the global batch; averaging the gradients makes every replica take the
// step one process takes on the whole batch (mean losses over equal shards average to the global mean).
TEST(DistributedDataParallel, DemoMlpMatchesOneProcessOnTheGlobalBatch) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : {DType::F64, DType::F32})
    for (int64_t cap : {int64_t{1}, int64_t{25} << 20}) {
      const int64_t per_rank = 8, global = per_rank * n;
      Tensor x = randn({global, 2}, 11, d), y = randint(0, 2, {global}, 12);
      auto ref = demo_mlp(5, d);
      optim::SGD ref_opt(ref->parameters(), {.lr = 0.2, .momentum = 0.9});
      auto net = demo_mlp(5 + static_cast<uint64_t>(r), d);  // different on each rank until DDP broadcasts rank 0's
      nn::DistributedDataParallel ddp(net, {}, {.bucket_cap_bytes = cap});
      EXPECT_EQ(ddp.buckets().size(), cap == 1 ? size_t{6} : size_t{1});
      EXPECT_EQ(ddp.buckets().front().front(), "4.bias") << "reverse registration order";
      optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
      for (int step = 0; step < 4; ++step) {
        cross_entropy_step(ref_opt, *ref, x, y);
        cross_entropy_step(opt, ddp, x.narrow(0, r * per_rank, per_rank), y.narrow(0, r * per_rank, per_rank));
      }
      expect_same_parameters(*net, *ref, d == DType::F64 ? 1e-12 : 1e-6,
                             std::string(dtype_name(d)) + " cap " + std::to_string(cap));
    }
}

std::shared_ptr<nn::Sequential> small_cnn(uint64_t seed, DType dtype) {
  Generator gen(seed);
  nn::Conv2dOptions co;
  co.padding = {1, 1};
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 4, nn::Pair{3, 3}, co, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(nn::Pair{2, 2}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 4 * 4, 3, true, gen)});
  if (dtype != DType::F32) net->to(dtype);
  return net;
}

// The same for a small CNN (conv, relu, max-pool, linear), trained twice: the f64 parameters of the two runs are
// bit-identical (the reduction order does not depend on timing).
TEST(DistributedDataParallel, SmallCnnMatchesOneProcessAndRepeatsBitForBit) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : {DType::F64, DType::F32}) {
    const int64_t per_rank = 3, global = per_rank * n;
    Tensor x = randn({global, 1, 8, 8}, 31, d), y = randint(0, 3, {global}, 32);
    auto ref = small_cnn(8, d);
    optim::Adam ref_opt(ref->parameters(), {.lr = 0.01});
    for (int step = 0; step < 3; ++step) cross_entropy_step(ref_opt, *ref, x, y);
    std::vector<std::vector<double>> first;
    for (int run = 0; run < 2; ++run) {
      auto net = small_cnn(8 + static_cast<uint64_t>(r), d);
      nn::DistributedDataParallel ddp(net, {}, {.bucket_cap_bytes = 512});
      optim::Adam opt(net->parameters(), {.lr = 0.01});
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        nn::cross_entropy(ddp(x.narrow(0, r * per_rank, per_rank)), y.narrow(0, r * per_rank, per_rank)).backward();
        opt.step();
      }
      // Adam divides by sqrt(v): f32 rounding differences are amplified more than SGD's.
      expect_same_parameters(*net, *ref, d == DType::F64 ? 1e-12 : 1e-5, std::string("cnn ") + dtype_name(d));
      std::vector<std::vector<double>> now;
      for (auto& p : net->parameters()) now.push_back(vals(p));
      if (run == 0) {
        first = now;
      } else if (d == DType::F64) {
        EXPECT_EQ(now, first) << "two identical f64 runs differ";
      }
    }
  }
}

// Buffers (here BatchNorm1d's running statistics) are broadcast from the first rank at construction too.
TEST(DistributedDataParallel, BroadcastsParametersAndBuffersAtConstruction) {
  NEED_MPI();
  const int r = dist::rank();
  auto net = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(4)});
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : net->named_parameters()) t.fill_(r + 0.5);
    for (auto& [name, t] : net->named_buffers())
      if (is_floating(t.dtype())) t.fill_(r + 0.25);
  }
  nn::DistributedDataParallel ddp(net);
  for (auto& [name, t] : net->named_parameters())
    for (double v : vals(t)) EXPECT_EQ(v, 0.5) << name;
  int floating_buffers = 0;
  for (auto& [name, t] : net->named_buffers()) {
    if (!is_floating(t.dtype())) continue;
    ++floating_buffers;
    for (double v : vals(t)) EXPECT_EQ(v, 0.25) << name;
  }
  EXPECT_EQ(floating_buffers, 2) << "running_mean and running_var";
}

TEST(DistributedDataParallel, NoSyncAccumulationEqualsTheLargeBatch) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  const int64_t micro = 4, global = 2 * micro * n;
  Tensor x = randn({global, 2}, 21, DType::F64), y = randint(0, 2, {global}, 22);
  auto ref = demo_mlp(9, DType::F64);
  nn::cross_entropy((*ref)(x), y).backward();
  auto net = demo_mlp(9, DType::F64);
  nn::DistributedDataParallel ddp(net);
  const int64_t base = r * 2 * micro;
  {
    auto guard = ddp.no_sync();
    (nn::cross_entropy(ddp(x.narrow(0, base, micro)), y.narrow(0, base, micro)) * 0.5).backward();
  }
  (nn::cross_entropy(ddp(x.narrow(0, base + micro, micro)), y.narrow(0, base + micro, micro)) * 0.5).backward();
  const auto pn = net->named_parameters(), pr = ref->named_parameters();
  for (size_t k = 0; k < pn.size(); ++k) {
    const auto a = vals(pn[k].second.grad()), b = vals(pr[k].second.grad());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12 * (1 + std::abs(b[i]))) << pn[k].first;
  }
}

// gradient_as_bucket_view: the same f64 parameters, bit for bit, as the copying DDP over steps with zero_grad and
// with gradients accumulated over a no_sync micro-batch (the grads then already lie in their buckets); after a
// reduction the grads of one bucket share its buffer.
TEST(DistributedDataParallel, GradientAsBucketViewMatchesTheCopyingReduction) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  const int64_t micro = 4, global = 2 * micro * n;
  Tensor x = randn({global, 2}, 41, DType::F64), y = randint(0, 2, {global}, 42);
  for (int64_t cap : {int64_t{1}, int64_t{25} << 20}) {
    std::vector<std::vector<double>> runs[2];
    for (int view = 0; view < 2; ++view) {
      auto net = demo_mlp(13, DType::F64);
      nn::DistributedDataParallel ddp(net, {}, {.bucket_cap_bytes = cap, .gradient_as_bucket_view = view == 1});
      optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
      const int64_t base = r * 2 * micro;
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        if (step == 2) {  // accumulate: the second backward adds into the grads the first reduction left
          auto guard = ddp.no_sync();
          (nn::cross_entropy(ddp(x.narrow(0, base, micro)), y.narrow(0, base, micro)) * 0.5).backward();
        }
        (nn::cross_entropy(ddp(x.narrow(0, base + micro, micro)), y.narrow(0, base + micro, micro)) * 0.5).backward();
        opt.step();
      }
      if (view == 1 && cap > 1) {
        const auto ps = net->parameters();
        EXPECT_TRUE(ps[0].grad().shares_storage(ps[1].grad())) << "one bucket: its grads view one buffer";
      }
      for (auto& p : net->parameters()) runs[view].push_back(vals(p));
    }
    EXPECT_EQ(runs[1], runs[0]) << "cap " << cap;
  }
}

// A module with a parameter its forward never uses: the reduction cannot finish, and the next forward says so.
struct WithUnusedParameter : nn::Module {
  std::shared_ptr<nn::Sequential> net = demo_mlp(3, DType::F32);
  Tensor unused;
  WithUnusedParameter() {
    register_module("net", net);
    unused = register_parameter("unused", ones({3}));
  }
  Tensor forward(const Tensor& x) override { return (*net)(x); }
};

// Each rank reads its DistributedSampler shard through a DataLoader (a worker thread, shuffled per epoch): the
// ranks' shards are disjoint and together the whole dataset, each epoch's shuffle differs, and two epochs of DDP
// steps give the parameters of one process stepping on the union of the ranks' k-th batches.
TEST(DistributedDataParallel, DistributedSamplerShardsCoverTheDatasetAndTrainingMatchesOneProcess) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  ASSERT_EQ(12 % n, 0) << "the test splits a global batch of 12";
  const int64_t examples = 48, per_rank_batch = 12 / n, seed = 77;
  Tensor x = randn({examples, 2}, 21, DType::F64), y = randint(0, 2, {examples}, 22);
  auto dataset = data::tensor_dataset({x, y});
  data::DataLoaderOptions lo;
  lo.batch_size = per_rank_batch;
  lo.seed = seed;
  lo.num_workers = 1;
  lo.sampler = std::make_shared<data::DistributedSampler>(examples, n, r);
  data::DataLoader loader(dataset, lo);
  ASSERT_EQ(loader.size(), examples / n / per_rank_batch);

  auto ref = demo_mlp(5, DType::F64);
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.2, .momentum = 0.9});
  auto net = demo_mlp(5 + static_cast<uint64_t>(r), DType::F64);
  nn::DistributedDataParallel ddp(net, {}, {.bucket_cap_bytes = 1024});
  optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
  std::vector<int64_t> first_epoch;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    // What every rank's loader visits this epoch, gathered: [n, examples / n].
    const std::vector<int64_t> mine = loader.order(epoch);
    ASSERT_EQ(static_cast<int64_t>(mine.size()), examples / n);
    Tensor all = dist::all_gather(from_vector(mine, Shape{static_cast<int64_t>(mine.size())}));
    std::vector<int64_t> flat;
    for (double v : vals(all)) flat.push_back(static_cast<int64_t>(v));
    if (epoch == 0) first_epoch = flat;
    std::vector<int64_t> sorted = flat;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < examples; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i) << "epoch " << epoch;
    if (epoch == 1) {
      EXPECT_NE(flat, first_epoch) << "the shuffle must change with the epoch";
    }

    int64_t k = 0;
    for (auto& batch : loader) {
      // The rank's batch is its shard's k-th slice; the global batch is the ranks' k-th slices in rank order.
      std::vector<int64_t> rows;
      for (int q = 0; q < n; ++q)
        for (int64_t j = 0; j < per_rank_batch; ++j)
          rows.push_back(flat[static_cast<size_t>(q * (examples / n) + k * per_rank_batch + j)]);
      Tensor index = from_vector(rows, Shape{static_cast<int64_t>(rows.size())});
      EXPECT_EQ(vals(batch[0]), vals(x.index_select(0, index).narrow(0, r * per_rank_batch, per_rank_batch)))
          << "epoch " << epoch << " batch " << k;
      cross_entropy_step(ref_opt, *ref, x.index_select(0, index), y.index_select(0, index));
      cross_entropy_step(opt, ddp, batch[0], batch[1]);
      ++k;
    }
    EXPECT_EQ(k, loader.size());
  }
  expect_same_parameters(*net, *ref, 1e-12, "DistributedSampler + DataLoader");
}

TEST(DistributedDataParallel, AParameterWithoutGradientIsAnErrorNamingIt) {
  NEED_MPI();
  auto m = std::make_shared<WithUnusedParameter>();
  nn::DistributedDataParallel ddp(m, {}, {.bucket_cap_bytes = 1});
  Tensor x = randn({4, 2}, 1);
  ddp(x).sum().backward();
  expect_error([&] { ddp(x); }, ErrorKind::InvalidArgument,
               {"DistributedDataParallel", "unused", "no gradient", "find_unused_parameters=true"}, "unused parameter");
  // The abandoned round was cleaned up on every rank: collectives still line up.
  dist::barrier();
}

// The same module with find_unused_parameters: the graph walk marks `unused` ready, backward completes, and since
// no rank used it its gradient stays undefined; the used parameters get the global average.
TEST(DistributedDataParallel, FindUnusedParametersLetsAParameterSitOut) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  const int64_t per_rank = 4;
  Tensor x = randn({per_rank * n, 2}, 31, DType::F64);
  auto ref = std::make_shared<WithUnusedParameter>();
  ref->to(DType::F64);
  (ref->forward(x).sum() * (1.0 / n)).backward();
  auto m = std::make_shared<WithUnusedParameter>();
  m->to(DType::F64);
  nn::DistributedDataParallel ddp(m, {}, {.bucket_cap_bytes = 1, .find_unused_parameters = true});
  for (int round = 0; round < 2; ++round) {  // a second round: the first finished cleanly
    m->zero_grad();
    ddp(x.narrow(0, r * per_rank, per_rank)).sum().backward();
    EXPECT_FALSE(m->unused.grad().defined()) << "round " << round;
    const auto pm = m->net->named_parameters(), pr = ref->net->named_parameters();
    for (size_t k = 0; k < pm.size(); ++k) {
      ASSERT_TRUE(pm[k].second.grad().defined()) << pm[k].first;
      const auto a = vals(pm[k].second.grad()), b = vals(pr[k].second.grad());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12 * (1 + std::abs(b[i]))) << pm[k].first;
    }
  }
  dist::barrier();
}

// Two branches; the input's third column picks one (the same for a rank's whole batch), so which parameters a
// rank's backward reaches depends on the rank and the step. `never` is registered but no forward uses it.
struct TwoBranches : nn::Module {
  std::shared_ptr<nn::Linear> a, b, never, head;
  explicit TwoBranches(uint64_t seed) {
    Generator gen(seed);
    a = register_module("a", std::make_shared<nn::Linear>(2, 8, true, gen));
    b = register_module("b", std::make_shared<nn::Linear>(2, 8, true, gen));
    never = register_module("never", std::make_shared<nn::Linear>(2, 2, true, gen));
    head = register_module("head", std::make_shared<nn::Linear>(8, 2, true, gen));
    to(DType::F64);
  }
  Tensor forward(const Tensor& x) override {
    const bool use_b = x.select(1, 2).select(0, 0).item<double>() > 0.5;
    const Tensor features = x.narrow(1, 0, 2);
    return (*head)((use_b ? (*b)(features) : (*a)(features)).tanh());
  }
};

// Which branch rank q takes at `step`: both branches on different ranks (steps 0, 1), b on no rank (step 2),
// b on rank 0 only (step 3).
bool takes_b(int q, int step) { return step < 2 ? (q + step) % 2 == 1 : step == 3 && q == 0; }

TEST(DistributedDataParallel, FindUnusedParametersMatchesOneProcessWhenRanksTakeDifferentBranches) {
  NEED_MPI();
  const int r = dist::rank(), n = dist::world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int64_t per_rank = 6, global = per_rank * n;
  Tensor features = randn({global, 2}, 41, DType::F64), y = randint(0, 2, {global}, 42);
  auto batch_of = [&](int q, int step) {
    Tensor choice = full({per_rank, 1}, takes_b(q, step) ? 1.0 : 0.0, DType::F64);
    return cat({features.narrow(0, q * per_rank, per_rank), choice}, 1);
  };
  for (int64_t cap : {int64_t{1}, int64_t{25} << 20}) {
    auto ref = std::make_shared<TwoBranches>(7);
    optim::SGD ref_opt(ref->parameters(), {.lr = 0.3, .momentum = 0.9});
    auto net = std::make_shared<TwoBranches>(7 + static_cast<uint64_t>(r));  // rank 0's after the broadcast
    nn::DistributedDataParallel ddp(net, {}, {.bucket_cap_bytes = cap, .find_unused_parameters = true});
    optim::SGD opt(net->parameters(), {.lr = 0.3, .momentum = 0.9});
    const std::string what = "cap " + std::to_string(cap);
    for (int step = 0; step < 4; ++step) {
      // One process: the mean over ranks of each rank's mean loss on its branch (what averaging the gradients
      // computes, zeros counted for the ranks that did not use a parameter).
      ref_opt.zero_grad();
      Tensor total;
      for (int q = 0; q < n; ++q) {
        Tensor l = nn::cross_entropy((*ref)(batch_of(q, step)), y.narrow(0, q * per_rank, per_rank));
        total = q == 0 ? l : total + l;
      }
      (total * (1.0 / n)).backward();
      ref_opt.step();

      opt.zero_grad();
      nn::cross_entropy(ddp(batch_of(r, step)), y.narrow(0, r * per_rank, per_rank)).backward();
      EXPECT_FALSE(net->never->weight.grad().defined()) << what << " step " << step;
      EXPECT_FALSE(net->never->bias.grad().defined()) << what << " step " << step;
      EXPECT_TRUE(net->a->weight.grad().defined()) << what << " step " << step << ": some rank used a";
      // b: used somewhere at steps 0, 1 and 3 (averaged onto every rank), nowhere at step 2 (left undefined).
      EXPECT_EQ(net->b->weight.grad().defined(), step != 2) << what << " step " << step;
      EXPECT_EQ(net->b->bias.grad().defined(), step != 2) << what << " step " << step;
      opt.step();
    }
    expect_same_parameters(*net, *ref, 1e-12, "two branches, " + what);

    // A globally unused parameter's existing gradient is left as it is: not averaged, not zeroed.
    opt.zero_grad();
    net->never->weight.set_grad(full({2, 2}, r + 1.0, DType::F64));
    nn::cross_entropy(ddp(batch_of(r, 0)), y.narrow(0, r * per_rank, per_rank)).backward();
    EXPECT_EQ(vals(net->never->weight.grad()), std::vector<double>(4, r + 1.0)) << what;
    EXPECT_FALSE(net->never->bias.grad().defined()) << what;
  }
  dist::barrier();
}

TEST(DistributedDataParallel, ConstructionErrors) {
  NEED_MPI();
  expect_error([] { nn::DistributedDataParallel ddp(nullptr); }, ErrorKind::InvalidArgument, {"null"}, "null");
  expect_error([] { nn::DistributedDataParallel ddp(std::make_shared<nn::Tanh>()); }, ErrorKind::InvalidArgument,
               {"no parameters"}, "no parameters");
  expect_error([] { nn::DistributedDataParallel ddp(demo_mlp(1, DType::F32), {}, {.bucket_cap_bytes = 0}); },
               ErrorKind::InvalidArgument, {"bucket_cap_bytes"}, "cap");
}

// Other ranks print only their failures, prefixed with the rank (rank 0 prints the usual report).
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

// `--fault=kill` / `throw` / `stall` (tests/distributed/expect_job_fails.sh): world rank 1 dies (SIGKILL), lets
// an exception escape main, or stays alive without calling the collective, while the others wait in an
// all_reduce. The job must end non-zero; a rank that returns from the collective says so, which fails the test;
// with a stalled peer (or a dead one that mpirun does not clean up after) the others must report the typed
// timeout (2 s here) and exit non-zero.
int fault_scenario(const std::string& mode) {
  dist::init();
  dist::set_default_timeout(std::chrono::seconds(60));
  dist::barrier();
  // 2 s for every mode: mpirun usually ends the job sooner when rank 1 dies (then the others never print), but
  // under orte_enable_recovery (the *-recover tests) it lets them live and the timeout must end them.
  dist::set_default_timeout(std::chrono::seconds(2));
  if (dist::rank() == 1) {
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "stall") std::this_thread::sleep_for(std::chrono::minutes(10));  // alive, never calling
    throw std::runtime_error("fault test: rank 1 fails mid-step");
  }
  Tensor t = ones({4});
  try {
    dist::all_reduce(t);
    std::printf("FAULT-TEST rank %d: the all_reduce completed without rank 1\n", dist::rank());
  } catch (const Error& e) {
    // The stalled peer: the typed timeout, then a non-zero exit, which makes mpirun end the job.
    std::printf("TIMED-OUT rank %d: %s\n", dist::rank(), e.what());
    std::fflush(stdout);
    return 3;
  }
  return 0;
}

// `--fault=ddp-kill` / `ddp-throw` / `ddp-stall`: the same faults in the middle of a DistributedDataParallel
// backward. A first step completes on every rank; in the second, rank 1's post-accumulate-grad hook on the
// parameter of bucket 3 of 6 (one bucket per parameter; the hook runs after DDP's own, so buckets 0-3 have
// started their all-reduces) raises SIGKILL, throws out of backward (the exception escapes main), or throws
// and is caught by a loop that then waits on something else without calling collectives. The other ranks'
// backward is then waiting for bucket 4's all-reduce: a rank whose backward returns says so (FAULT-TEST, the
// test fails); a typed error there is printed (TIMED-OUT) and ends the rank with status 3.
// `--fault=ddp-between-kill`: rank 1 dies between two steps (after step 1, before step 2's forward), so the others
// wait in step 2's first bucket. `--fault=ddp-nosync-kill`: step 2 accumulates under no_sync() on every rank (no
// collective) and rank 1 dies in that backward; the others finish it (nothing to wait for) and must then fail in
// step 3, the synchronising step, whose all-reduce rank 1 never joins.
int ddp_fault_scenario(const std::string& mode) {
  dist::init();
  dist::set_default_timeout(std::chrono::seconds(60));
  const int r = dist::rank(), n = dist::world_size();
  const int64_t per_rank = 4;
  Tensor x = randn({per_rank * n, 2}, 51, DType::F64), y = randint(0, 2, {per_rank * n}, 52);
  auto net = demo_mlp(3, DType::F64);
  nn::DistributedDataParallel ddp(net, {}, {.bucket_cap_bytes = 1});
  const auto buckets = ddp.buckets();
  if (buckets.size() != 6) {
    std::printf("FAULT-TEST setup: expected 6 buckets, got %zu\n", buckets.size());
    return 4;
  }
  const std::string fault_param = buckets[3].front();  // "2.weight"
  int step = 0;
  HookHandle fault_hook;
  for (auto& [name, t] : net->named_parameters())
    if (name == fault_param) {
      fault_hook = t.register_post_accumulate_grad_hook([&](Tensor&) {
        if (r != 1 || step != 1 || mode == "ddp-between-kill") return;
        if (mode == "ddp-nosync-kill")
          std::printf("rank 1 faults (%s) in step 2's no_sync backward (%s done)\n", mode.c_str(), fault_param.c_str());
        else
          std::printf("rank 1 faults (%s) in step 2's backward, after DDP started buckets 0-3 of 6 (%s done)\n",
                      mode.c_str(), fault_param.c_str());
        std::fflush(stdout);
        if (mode == "ddp-kill" || mode == "ddp-nosync-kill") std::raise(SIGKILL);
        throw std::runtime_error("fault test: rank 1 fails in the middle of a DDP backward");
      });
    }
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  auto train_step = [&] {
    opt.zero_grad();
    nn::cross_entropy(ddp(x.narrow(0, r * per_rank, per_rank)), y.narrow(0, r * per_rank, per_rank)).backward();
    opt.step();
  };
  train_step();  // every rank, no fault: DDP works in this job
  dist::barrier();
  dist::set_default_timeout(std::chrono::seconds(2));
  step = 1;
  if (mode == "ddp-between-kill" && r == 1) {
    std::printf("rank 1 dies between steps 1 and 2\n");
    std::fflush(stdout);
    std::raise(SIGKILL);
  }
  try {
    try {
      if (mode == "ddp-nosync-kill") {
        {
          auto guard = ddp.no_sync();
          train_step();  // local accumulation only: completes on the surviving ranks
        }
        std::printf("rank %d: the no_sync step completed (no collective); the synchronising step follows\n", r);
        std::fflush(stdout);
        step = 2;
      }
      train_step();
    } catch (const std::runtime_error& e) {
      if (mode != "ddp-stall" || r != 1) throw;
      // Caught and ignored (a loop that logs and carries on): this rank stays alive but calls no collective.
      std::printf("rank 1 caught: %s; it now stalls\n", e.what());
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::minutes(10));
      return 0;
    }
    std::printf("FAULT-TEST rank %d: the DDP backward completed without rank 1\n", r);
  } catch (const Error& e) {
    std::printf("TIMED-OUT rank %d: %s\n", r, e.what());
    std::fflush(stdout);
    return 3;
  }
  return 0;
}

// `--determinism=PREFIX` (tests/distributed/expect_deterministic.sh): an f64 DDP training job whose result
// must not depend on timing. A 4-128-256-3 tanh MLP, 64 KiB buckets (3 of them: the output layer with the
// hidden bias, the 256 KiB weight alone, the first layer), async all-reduces overlapping backward, SGD with
// momentum, 6 steps on each rank's share of a global batch of 24; every gradient hook sleeps a random 0-1.5 ms
// drawn from the process id and the clock, so the buckets start and complete at different moments in every
// run and on every rank. Each rank saves its parameters to PREFIX.rank<R>.safetensors; the script compares the
// files byte for byte across the ranks of a run and across two runs.
int determinism_job(const std::string& prefix) {
  dist::init();
  dist::set_default_timeout(std::chrono::seconds(120));
  const int r = dist::rank(), n = dist::world_size();
  const int64_t global = 24;
  if (global % n != 0) {
    std::fprintf(stderr, "determinism job: the world size must divide %lld\n", static_cast<long long>(global));
    return 2;
  }
  const int64_t per_rank = global / n;
  Generator gen(17);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 128, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(128, 256, true, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(256, 3, true, gen)});
  net->to(DType::F64);
  nn::DistributedDataParallel ddp(net, {}, {.bucket_cap_bytes = 64 << 10});
  const size_t nb = ddp.buckets().size();
  std::mt19937_64 jitter(static_cast<uint64_t>(getpid()) * 1000003u ^
                         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::vector<HookHandle> hooks;
  for (auto& p : net->parameters())
    hooks.push_back(p.register_post_accumulate_grad_hook(
        [&](Tensor&) { std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 1500)); }));
  Tensor x = randn({global, 4}, 61, DType::F64), y = randint(0, 3, {global}, 62);
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 6; ++step) {
    Tensor xs = (x * (1.0 + 0.1 * step)).narrow(0, r * per_rank, per_rank);
    opt.zero_grad();
    nn::cross_entropy(ddp(xs), y.narrow(0, r * per_rank, per_rank)).backward();
    opt.step();
  }
  const std::string path = prefix + ".rank" + std::to_string(r) + ".safetensors";
  save_safetensors(path, net->named_parameters());
  if (r == 0)
    std::printf("determinism job: %d ranks, %zu buckets, 6 steps; rank files %s.rank*.safetensors\n", n, nb,
                prefix.c_str());
  dist::barrier();
  dist::finalize();
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]).rfind("--determinism=", 0) == 0)
    return determinism_job(std::string(argv[1]).substr(14));
  if (argc == 2 && std::string(argv[1]).rfind("--fault=ddp-", 0) == 0)
    return ddp_fault_scenario(std::string(argv[1]).substr(8));
  if (argc == 2 && std::string(argv[1]).rfind("--fault=", 0) == 0)
    return fault_scenario(std::string(argv[1]).substr(8));
  testing::InitGoogleTest(&argc, argv);
  try {
    dist::launch_environment();
    g_launched = true;
  } catch (const Error&) {
    g_launched = false;
  }
  if (!g_launched || !dist::is_available()) {
    g_launched = false;
    return RUN_ALL_TESTS();
  }
  dist::init();
  dist::set_default_timeout(std::chrono::seconds(120));  // a bug that desynchronises the ranks fails, not hangs
  const int rank = dist::rank();
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
  Tensor failed = scalar(rc != 0 ? 1.0 : 0.0, DType::I64);
  int exit_code = 1;
  try {
    dist::all_reduce(failed, dist::ReduceOp::Max);
    exit_code = failed.item<int64_t>() != 0 ? 1 : 0;
    if (rank == 0 && exit_code != 0 && rc == 0) std::fprintf(stderr, "another rank failed (its failures are above)\n");
    dist::finalize();
  } catch (const Error& e) {
    std::fprintf(stderr, "[rank %d] %s\n", rank, e.what());
  }
  return exit_code;
}
