// Tests of the worker side of runtime/: ReadWorkerEnv (the torchrun and Open
// MPI environment contracts and their error messages) and ProcessGroup /
// InitFromEnv over real forked processes, through a launcher's store
// (BRAID_STORE_ADDR, served by a StoreServer on port 0 in a helper process)
// or one rank 0 hosts on MASTER_ADDR:MASTER_PORT, over
// every transport; a rank that never arrives; and braid_bench run as two
// real worker processes. Ranks never assert: they return a Status and the
// main thread checks it (Catch2 v2 is not thread-safe).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "runtime/process_group.h"
#include "runtime/worker_env.h"
#include "store/tcp_store.h"
#include "tensor/tensor.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/scoped_env.h"
#include "tests/harness/statuses.h"
#include "tests/harness/subprocess.h"

extern char** environ;

namespace braid {
namespace {

using ::braid::testing::RankContext;
using ::braid::testing::RankMode;
using ::braid::testing::RunRanks;
using ::braid::testing::RunRanksOptions;

// Every variable ReadWorkerEnv or ProcessGroup reads.
constexpr const char* kContractVariables[] = {
    "RANK",          "WORLD_SIZE",           "LOCAL_RANK",           "LOCAL_WORLD_SIZE",
    "GROUP_RANK",    "MASTER_ADDR",          "MASTER_PORT",          "BRAID_STORE_ADDR",
    "BRAID_STORE_PREFIX", "BRAID_TRANSPORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK",
    "TORCHELASTIC_USE_AGENT_STORE"};

// Clears the worker contract on construction and restores the test process's
// own environment on destruction.
struct ScopedContract : ::braid::testing::ScopedEnv {
  ScopedContract() : ScopedEnv({std::begin(kContractVariables), std::end(kContractVariables)}) {}
};

// A port that was free a moment ago: bind port 0, read it, close.
uint16_t FreePort() {
  const uint16_t port = UnusedPort();
  REQUIRE(port != 0);
  return port;
}

// A StoreServer on port 0, in a child process of its own: the launcher's
// store, as the ranks see it. Not in this process, because RunRanks forks the
// ranks from here, and a fork while the server's thread runs copies whatever
// lock that thread holds at that instant: under ASan, the allocator's lock,
// and the rank's first allocation on a new thread then hangs for good.
class StoreProcess {
 public:
  StoreProcess() {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(ready[0]);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start("127.0.0.1", 0);
      const uint16_t port = server.ok() ? (*server)->port() : 0;
      (void)!::write(ready[1], &port, sizeof(port));
      for (;;) ::pause();  // until the test kills it
    }
    ::close(ready[1]);
    const bool got = ::read(ready[0], &port_, sizeof(port_)) == static_cast<ssize_t>(sizeof(port_));
    ::close(ready[0]);
    REQUIRE(got);
    REQUIRE(port_ != 0);
  }
  ~StoreProcess() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

// In a forked rank: the contract for `rank` of `size` on this host, nothing else.
void SetWorkerEnv(int rank, int size) {
  for (const char* name : kContractVariables) ::unsetenv(name);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(size).c_str(), 1);
}

// Runs `check(rank)` in n forked worker processes joined through a launcher's
// store (BRAID_STORE_ADDR, `prefix`) with BRAID_TRANSPORT=`transport`.
std::vector<absl::Status> RunWorkers(int n, const std::string& transport, const std::string& prefix,
                                     const std::function<absl::Status(int rank)>& check) {
  StoreProcess store;
  const std::string address = store.address();
  RunRanksOptions options;
  options.timeout = absl::Seconds(90);
  return RunRanks(
      n, RankMode::kProcesses,
      [&](RankContext& ctx) -> absl::Status {
        SetWorkerEnv(ctx.rank(), n);
        ::setenv("BRAID_STORE_ADDR", address.c_str(), 1);
        ::setenv("BRAID_STORE_PREFIX", prefix.c_str(), 1);
        ::setenv("BRAID_TRANSPORT", transport.c_str(), 1);
        return check(ctx.rank());
      },
      options);
}

// Sum and max all-reduces at a small and a multi-segment size; exact checks.
absl::Status CheckAllReduce(ProcessGroup& group) {
  const int n = group.size();
  const int rank = group.rank();
  for (int64_t count : {int64_t{1000}, int64_t{300000}}) {
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({count}, DType::kF32));
    float* data = t.data<float>();
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank + 1 + (i % 100));
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, group.comm().AllReduce(t, ReduceOp::kSum));
    BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(30))));
    for (int64_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(n * (n + 1) / 2 + n * (i % 100));
      if (data[i] != want) {
        return absl::InternalError(absl::StrCat("rank ", rank, ": sum element ", i, " is ", data[i], ", want ", want));
      }
    }
    BRAID_ASSIGN_OR_RETURN(Tensor m, Tensor::Empty({count}, DType::kI32));
    int32_t* ints = m.data<int32_t>();
    for (int64_t i = 0; i < count; ++i) ints[i] = static_cast<int32_t>((rank * 31 + i) % 97);
    BRAID_ASSIGN_OR_RETURN(work, group.comm().AllReduce(m, ReduceOp::kMax));
    BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(30))));
    for (int64_t i = 0; i < count; ++i) {
      int32_t want = 0;
      for (int r = 0; r < n; ++r) want = std::max(want, static_cast<int32_t>((r * 31 + i) % 97));
      if (ints[i] != want) {
        return absl::InternalError(absl::StrCat("rank ", rank, ": max element ", i, " is ", ints[i], ", want ", want));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status InitAndCheck(const std::string& expected_transport, int size, int rank) {
  ProcessGroupOptions options;
  options.timeout = absl::Seconds(30);
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, InitFromEnv(options));
  if (group->rank() != rank || group->size() != size) {
    return absl::InternalError(absl::StrCat("group says rank ", group->rank(), " of ", group->size(), ", want ", rank,
                                            " of ", size));
  }
  if (group->comm().transport_name() != expected_transport) {
    return absl::InternalError(
        absl::StrCat("transport is ", group->comm().transport_name(), ", want ", expected_transport));
  }
  return CheckAllReduce(*group);
}

// ---------------------------------------------------------------------------
// ReadWorkerEnv

TEST_CASE("ReadWorkerEnv: torchrun's variables", "[runtime]") {
  ScopedContract env;
  env.Set("RANK", "2");
  env.Set("WORLD_SIZE", "4");
  env.Set("LOCAL_RANK", "0");
  env.Set("LOCAL_WORLD_SIZE", "2");
  env.Set("GROUP_RANK", "1");
  env.Set("MASTER_ADDR", "10.0.0.1");
  env.Set("MASTER_PORT", "29500");
  absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
  INFO(worker.status());
  REQUIRE(worker.ok());
  CHECK(worker->rank == 2);
  CHECK(worker->world_size == 4);
  CHECK(worker->local_rank == 0);
  CHECK(worker->local_world_size == 2);
  CHECK(worker->group_rank == 1);
  CHECK(worker->master_addr == "10.0.0.1");
  CHECK(worker->master_port == 29500);
  CHECK(worker->StorePort() == 29500);
  CHECK(worker->store_addr.empty());
  CHECK_FALSE(worker->under_mpirun);
  // torchrun 2.x: its agent hosts torch's store on MASTER_PORT.
  env.Set("TORCHELASTIC_USE_AGENT_STORE", "True");
  worker = ReadWorkerEnv();
  REQUIRE(worker.ok());
  CHECK(worker->master_port == 29500);
  CHECK(worker->StorePort() == 29501);
  env.Set("MASTER_PORT", "65535");
  CHECK(ReadWorkerEnv().status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ReadWorkerEnv: RANK missing says how to start workers", "[runtime]") {
  ScopedContract env;
  env.Set("WORLD_SIZE", "2");
  env.Set("MASTER_ADDR", "127.0.0.1");
  env.Set("MASTER_PORT", "29500");
  absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
  INFO(worker.status());
  REQUIRE(worker.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(worker.status().message(), "RANK"));
  CHECK(absl::StrContains(worker.status().message(), "braidrun"));
  CHECK(absl::StrContains(worker.status().message(), "MASTER_PORT"));
}

TEST_CASE("ReadWorkerEnv: malformed and out-of-range values", "[runtime]") {
  ScopedContract env;
  env.Set("MASTER_ADDR", "127.0.0.1");
  env.Set("MASTER_PORT", "29500");
  SECTION("RANK >= WORLD_SIZE") {
    env.Set("RANK", "2");
    env.Set("WORLD_SIZE", "2");
    absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
    INFO(worker.status());
    REQUIRE(worker.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(worker.status().message(), "rank 2"));
    CHECK(absl::StrContains(worker.status().message(), "world size 2"));
  }
  SECTION("RANK not a number") {
    env.Set("RANK", "one");
    env.Set("WORLD_SIZE", "2");
    absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
    INFO(worker.status());
    REQUIRE(worker.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(worker.status().message(), "RANK"));
  }
  SECTION("MASTER_PORT missing with several ranks and no launcher store") {
    ::unsetenv("MASTER_PORT");
    env.Set("RANK", "0");
    env.Set("WORLD_SIZE", "2");
    absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
    INFO(worker.status());
    REQUIRE(worker.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(worker.status().message(), "MASTER_PORT"));
  }
  SECTION("one rank needs no MASTER_*") {
    ::unsetenv("MASTER_ADDR");
    ::unsetenv("MASTER_PORT");
    env.Set("RANK", "0");
    env.Set("WORLD_SIZE", "1");
    absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
    INFO(worker.status());
    CHECK(worker.ok());
  }
}

TEST_CASE("ReadWorkerEnv: Open MPI's variables when RANK is unset", "[runtime]") {
  ScopedContract env;
  env.Set("OMPI_COMM_WORLD_RANK", "3");
  env.Set("OMPI_COMM_WORLD_SIZE", "4");
  env.Set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.Set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  env.Set("OMPI_COMM_WORLD_NODE_RANK", "1");
  env.Set("BRAID_STORE_ADDR", "127.0.0.1:1234");
  absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
  INFO(worker.status());
  REQUIRE(worker.ok());
  CHECK(worker->under_mpirun);
  CHECK(worker->rank == 3);
  CHECK(worker->world_size == 4);
  CHECK(worker->local_rank == 1);
  CHECK(worker->local_world_size == 2);
  CHECK(worker->group_rank == 1);
  CHECK(worker->store_addr == "127.0.0.1:1234");

  SECTION("RANK wins over Open MPI's") {
    env.Set("RANK", "0");
    env.Set("WORLD_SIZE", "2");
    absl::StatusOr<WorkerEnv> torchrun = ReadWorkerEnv();
    INFO(torchrun.status());
    REQUIRE(torchrun.ok());
    CHECK_FALSE(torchrun->under_mpirun);
    CHECK(torchrun->rank == 0);
    CHECK(torchrun->world_size == 2);
  }
}

// ---------------------------------------------------------------------------
// ProcessGroup over real processes

TEST_CASE("ProcessGroup: launcher store (BRAID_STORE_ADDR), every transport, 1-3 ranks", "[runtime]") {
  const std::string transport = GENERATE(as<std::string>{}, "shm", "tcp", "auto");
  const int n = GENERATE(1, 2, 3);
  CAPTURE(transport, n);
  const std::string expected = transport == "auto" ? "shm" : transport;  // every rank is on this host
  const std::vector<absl::Status> statuses = RunWorkers(
      n, transport, absl::StrCat("run-", transport, "-", n), [&](int rank) { return InitAndCheck(expected, n, rank); });
  REQUIRE_ALL_OK(statuses);
}

// CommFor in one rank: CPU tensors to comm(); CUDA tensors per the build,
// the GPUs and BRAID_TRANSPORT (process_group.h). With GPUs, an exact sum.
absl::Status CheckCommFor(const std::string& transport, int size, int rank) {
  ProcessGroupOptions options;
  options.timeout = absl::Seconds(30);
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, InitFromEnv(options));
  BRAID_ASSIGN_OR_RETURN(Communicator * cpu, group->CommFor(Device::Cpu()));
  if (cpu != &group->comm()) return absl::InternalError("CommFor(cpu) is not comm()");
  // One GPU per rank when there are enough (NCCL), else all on GPU 0 (staged).
  const int gpus = CudaDeviceCount();
  const Device device = Device::Cuda(gpus >= size ? rank : 0);
  BRAID_ASSIGN_OR_RETURN(Communicator * cuda, group->CommFor(device));
  const bool expect_nccl = CudaCompiledIn() && gpus >= size && transport == "auto";
  if (group->has_device_comm() != expect_nccl || (cuda == &group->comm()) == expect_nccl) {
    return absl::InternalError(absl::StrCat("CommFor(", ToString(device), ") over ", transport, " with ", gpus,
                                            " GPUs: ", cuda->transport_name(), ", expected ",
                                            expect_nccl ? "nccl" : group->comm().transport_name()));
  }
  if (gpus == 0) {
    if (!CudaCompiledIn()) {
      static float fake[8];
      const Tensor view = Tensor::View(fake, {8}, DType::kF32, device);
      absl::StatusOr<WorkHandle> work = cuda->AllReduce(view, ReduceOp::kSum);
      if (work.ok() || work.status().code() != absl::StatusCode::kUnimplemented ||
          !absl::StrContains(work.status().message(), "--config=cuda")) {
        return absl::InternalError(absl::StrCat("plain build: a CUDA tensor gave ",
                                                work.ok() ? "OK" : work.status().ToString()));
      }
    }
    // (A CUDA build without a GPU fails that call in CUDA and aborts comm():
    // not issued here, so the group stays usable for the check below.)
    return CheckAllReduce(*group);
  }
  std::vector<int32_t> values(5000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(rank * 1000 + i);
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::View(values.data(), {5000}, DType::kI32).Clone(device));
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, cuda->AllReduce(t, ReduceOp::kSum));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(30))));
  BRAID_ASSIGN_OR_RETURN(Tensor back, t.Clone(Device::Cpu()));
  for (int64_t i = 0; i < 5000; ++i) {
    const int32_t want = static_cast<int32_t>(1000 * size * (size - 1) / 2 + size * i);
    if (back.data<int32_t>()[i] != want) {
      return absl::InternalError(absl::StrCat("rank ", rank, ": element ", i, " is ", back.data<int32_t>()[i]));
    }
  }
  return absl::OkStatus();
}

TEST_CASE("ProcessGroup: CommFor sends CPU tensors to comm() and CUDA tensors to NCCL or host staging", "[runtime]") {
  const std::string transport = GENERATE(as<std::string>{}, "auto", "shm");
  const int n = GENERATE(1, 2);
  CAPTURE(transport, n);
  // No CUDA call in this (the parent) process: the ranks are forked from it.
  const std::vector<absl::Status> statuses = RunWorkers(
      n, transport, absl::StrCat("commfor-", transport, "-", n), [&](int rank) { return CheckCommFor(transport, n, rank); });
  REQUIRE_ALL_OK(statuses);
}

TEST_CASE("ProcessGroup: rank 0 hosts the store on MASTER_ADDR:MASTER_PORT", "[runtime]") {
  const std::string transport = GENERATE(as<std::string>{}, "shm", "tcp");
  const int n = GENERATE(2, 3);
  CAPTURE(transport, n);
  const uint16_t port = FreePort();
  RunRanksOptions options;
  options.timeout = absl::Seconds(90);
  std::vector<absl::Status> statuses = RunRanks(
      n, RankMode::kProcesses,
      [&](RankContext& ctx) -> absl::Status {
        SetWorkerEnv(ctx.rank(), n);
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        ::setenv("BRAID_TRANSPORT", transport.c_str(), 1);
        return InitAndCheck(transport, n, ctx.rank());
      },
      options);
  REQUIRE_ALL_OK(statuses);
}

// The ranks that came return OK when InitFromEnv failed as it should:
// kDeadlineExceeded naming `missing`, within `limit`.
absl::Status InitExpectingMissingRank(int missing, absl::Duration limit) {
  ProcessGroupOptions options;
  options.timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = InitFromEnv(options);
  const absl::Duration took = absl::Now() - start;
  if (group.ok()) return absl::InternalError("InitFromEnv succeeded without every rank");
  const absl::Status& status = group.status();
  if (status.code() != absl::StatusCode::kDeadlineExceeded) {
    return absl::InternalError(absl::StrCat("want kDeadlineExceeded, got ", status.ToString()));
  }
  if (!absl::StrContains(status.message(), absl::StrCat("rank ", missing))) {
    return absl::InternalError(absl::StrCat("the error does not name rank ", missing, ": ", status.ToString()));
  }
  if (took > limit) {
    return absl::InternalError(absl::StrCat("took ", absl::FormatDuration(took), " with a 2 s timeout"));
  }
  return absl::OkStatus();
}

// 2 s, plus the store client's grace for the server's own answer, plus slack
// for a loaded (or sanitized) machine.
constexpr absl::Duration kMissingRankLimit = absl::Seconds(6);

TEST_CASE("ProcessGroup: BRAID_SHM_WINDOW_KB sizes shm's windows; 0 turns them off; a bad value is refused",
          "[runtime]") {
  for (const char* kib : {"4", "0"}) {
    INFO("BRAID_SHM_WINDOW_KB=" << kib);
    std::vector<absl::Status> statuses = RunWorkers(3, "shm", absl::StrCat("window", kib), [&](int rank) {
      ::setenv("BRAID_SHM_WINDOW_KB", kib, 1);
      ::setenv("BRAID_ALGO", "direct", 1);  // 4 KiB windows: several rounds at CheckAllReduce's sizes
      return InitAndCheck("shm", 3, rank);
    });
    REQUIRE_ALL_OK(statuses);
  }
  std::vector<absl::Status> statuses = RunWorkers(2, "shm", "window_bad", [&](int) -> absl::Status {
    ::setenv("BRAID_SHM_WINDOW_KB", "6", 1);
    ProcessGroupOptions options;
    options.timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<ProcessGroup>> group = InitFromEnv(options);
    if (group.ok()) return absl::InternalError("BRAID_SHM_WINDOW_KB=6 was accepted");
    if (!absl::StrContains(group.status().message(), "BRAID_SHM_WINDOW_KB=6: must be 0 or a positive multiple of 4")) {
      return absl::InternalError(absl::StrCat("unexpected error: ", group.status().ToString()));
    }
    return absl::OkStatus();
  });
  REQUIRE_ALL_OK(statuses);
}

TEST_CASE("ProcessGroup: a rank that never arrives fails the others within the timeout", "[runtime]") {
  RunRanksOptions options;
  options.timeout = absl::Seconds(30);
  SECTION("launcher store: rank 2 of 3 missing") {
    StoreProcess store;
    const std::string address = store.address();
    std::vector<absl::Status> statuses = RunRanks(
        2, RankMode::kProcesses,
        [&](RankContext& ctx) -> absl::Status {
          SetWorkerEnv(ctx.rank(), 3);
          ::setenv("BRAID_STORE_ADDR", address.c_str(), 1);
          ::setenv("BRAID_STORE_PREFIX", "missing", 1);
          return InitExpectingMissingRank(2, kMissingRankLimit);
        },
        options);
    REQUIRE_ALL_OK(statuses);
  }
  SECTION("rank 0 hosts the store: rank 1 of 2 missing") {
    // A half-built group on rank 0 must not wait for the others to finish
    // with the store it hosts: the error comes back within the limit.
    const uint16_t port = FreePort();
    std::vector<absl::Status> statuses = RunRanks(
        1, RankMode::kProcesses,
        [&](RankContext& ctx) -> absl::Status {
          SetWorkerEnv(ctx.rank(), 2);
          ::setenv("MASTER_ADDR", "127.0.0.1", 1);
          ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
          ::setenv("BRAID_TRANSPORT", "tcp", 1);
          return InitExpectingMissingRank(1, kMissingRankLimit);
        },
        options);
    REQUIRE_ALL_OK(statuses);
  }
}

// ---------------------------------------------------------------------------
// braid_bench as real worker processes

// braid_bench with `args`, as one worker of a job whose contract is `extra`.
pid_t SpawnBench(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra,
                 const std::string& tag) {
  std::vector<std::string> argv = {Runfile("bench/braid_bench")};
  argv.insert(argv.end(), args.begin(), args.end());
  return Spawn(argv, extra, tag, std::vector<std::string>(std::begin(kContractVariables), std::end(kContractVariables)));
}

TEST_CASE("braid_bench: two worker processes, exact check, nccl-tests table", "[runtime][bench]") {
  const uint16_t port = FreePort();
  const std::vector<std::string> args = {"-b", "8", "-e", "1M", "-f", "4", "-n", "2", "-w", "1", "-c", "1"};
  std::vector<pid_t> pids;
  std::vector<std::string> tags;
  for (int rank = 0; rank < 2; ++rank) {
    const std::map<std::string, std::string> env = {
        {"RANK", std::to_string(rank)},      {"WORLD_SIZE", "2"},       {"LOCAL_RANK", std::to_string(rank)},
        {"LOCAL_WORLD_SIZE", "2"},           {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)},
        {"BRAID_TIMEOUT_SEC", "60"}};
    tags.push_back(absl::StrCat("bench_rank", rank));
    pids.push_back(SpawnBench(args, env, tags.back()));
    REQUIRE(pids.back() > 0);
  }
  const std::vector<ProcessExit> exits = WaitAll(pids, tags, DeadlineIn(absl::Seconds(120)));
  INFO("rank 0 stdout:\n" << exits[0].out << "\nrank 0 stderr:\n" << exits[0].err << "\nrank 1 stderr:\n"
                          << exits[1].err);
  REQUIRE(exits[0].code == 0);
  REQUIRE(exits[1].code == 0);
  CHECK(exits[1].out.empty());  // only rank 0 prints the table

  const std::string& out = exits[0].out;
  CHECK(absl::StrContains(out, "\n# Out of bounds values : 0 OK\n"));
  CHECK(absl::StrContains(out, "\n# Avg bus bandwidth    : "));
  CHECK(absl::StrContains(out, "out-of-place"));
  CHECK(absl::StrContains(out, "#       size         count      type   redop    root     time   algbw   busbw #wrong"));
  // 8 B .. 1 MiB by x4: 8, 32, ..., 512 KiB: nine rows, each checked with 0 wrong.
  std::vector<std::string> rows;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (!line.empty() && line[0] != '#') rows.emplace_back(line);
  }
  REQUIRE(rows.size() == 9);
  uint64_t size = 8;
  for (const std::string& row : rows) {
    std::vector<std::string> fields = absl::StrSplit(row, ' ', absl::SkipEmpty());
    INFO(row);
    REQUIRE(fields.size() == 13);
    CHECK(fields[0] == std::to_string(size));
    CHECK(fields[1] == std::to_string(size / 4));
    CHECK(fields[2] == "float");
    CHECK(fields[3] == "sum");
    CHECK(fields[4] == "-1");
    CHECK(fields[8] == "0");
    CHECK(fields[12] == "0");
    CHECK(row.size() == 116);  // nccl-tests' row width
    size *= 4;
  }
}

// Runs braid_bench with each of `cases` (no worker environment): each must be a
// flag error, one line on stderr naming `needle` (when not empty), exit 2.
void ExpectFlagErrors(const std::vector<std::vector<std::string>>& cases, const std::string& needle) {
  static int run = 0;
  for (const std::vector<std::string>& args : cases) {
    const std::string tag = absl::StrCat("bad_flag_", run++);
    const pid_t pid = SpawnBench(args, {}, tag);
    REQUIRE(pid > 0);
    const std::vector<ProcessExit> exits = WaitAll({pid}, {tag}, DeadlineIn(absl::Seconds(30)));
    INFO(absl::StrJoin(args, " ") << " -> exit " << exits[0].code << ", stderr: " << exits[0].err);
    CHECK(exits[0].code == 2);
    CHECK(exits[0].out.empty());
    CHECK(std::count(exits[0].err.begin(), exits[0].err.end(), '\n') == 1);
    CHECK(absl::StartsWith(exits[0].err, "braid_bench: "));
    if (!needle.empty()) CHECK(absl::StrContains(exits[0].err, needle));
  }
}

TEST_CASE("braid_bench: bad flags are one line on stderr and exit status 2", "[runtime][bench]") {
  ExpectFlagErrors({{"--bogus"}, {"-d", "float7"}, {"-e", "12Q"}, {"-C", "gather"}, {"-t", "carrier-pigeon"},
                    {"-a", "ring,wat"}, {"-b", "1M", "-e", "1K"}, {"--device", "tpu"}},
                   "");
}

TEST_CASE("braid_bench: -t nccl and --device cuda need --config=cuda; nccl runs native only", "[runtime][bench]") {
  if (!CudaCompiledIn()) {
    ExpectFlagErrors({{"-t", "nccl"}, {"--device", "cuda"}, {"-t", "nccl", "-c", "1", "-a", "native"}},
                     "--config=cuda");
  } else {
    ExpectFlagErrors({{"-t", "nccl", "-a", "ring"}, {"-t", "nccl", "-a", "native,tree"}}, "NCCL's own collectives only");
    ExpectFlagErrors({{"-t", "nccl", "--device", "cpu"}}, "drop --device cpu");
  }
}

}  // namespace
}  // namespace braid
