// probe_worker: the worker program the launcher tests and the start-up bench
// run under braidrun. It checks the environment contract, joins the group
// (InitFromEnv), runs an exactly checked all-reduce, and can fail, sleep or
// record times on request. Flags (all optional):
//   --env                 print the contract variables and fail if one is missing
//   --allreduce           InitFromEnv, barrier, an int64 all-reduce checked exactly
//   --rounds=N --round-sleep=S
//                         N such all-reduces, S seconds apart (default 1)
//   --mismatch-rank=R     rank R all-reduces 999 elements, the others 1000
//   --fail-rank=R --fail-attempt=K|all --exit-code=C [--fail-after=S: sleep S seconds first]
//                         on rank R in restart K (or every one), fail with exit code C (after the
//                         all-reduce when there is one); C=-N raises signal N
//   --error-file          when failing, write TORCHELASTIC_ERROR_FILE first
//   --pid-dir=DIR         write DIR/<rank>.pid at start
//   --start-log=DIR       append this process's pid to DIR/<rank>.starts at start (a line per start)
//   --replacement-exit=C  when started as a replacement (BRAID_JOIN_RUNNING=1, --restart-policy=replace),
//                         print "replacement rank R (restart count K)" and exit with C at once
//                         (C=-N raises signal N)
//   --sleep=S             sleep S seconds before exiting
//   --wait-world=N        while WORLD_SIZE < N, sleep (a restart will come)
//   --trap=SIG --signal-dir=DIR [--ignore-rank=R]
//                         on SIG (USR1, TERM, ...), write its name to DIR/<rank>.signal and exit 0;
//                         rank R ignores SIG instead (its agent must SIGKILL it). Set up before
//                         --pid-dir's file is written, so a test may signal once that file exists
//   --barrier-times=DIR   after the first barrier, write DIR/<attempt>.<rank> with
//                         CLOCK_REALTIME in ns, and DIR/died.<rank> when failing
//                         on purpose (bench/launcher_bench.sh reads them)
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/process_group.h"
#include "tensor/tensor.h"

namespace {

const char* kContract[] = {"RANK",          "LOCAL_RANK",      "WORLD_SIZE",
                           "LOCAL_WORLD_SIZE", "GROUP_RANK",  "GROUP_WORLD_SIZE",
                           "ROLE_RANK",     "ROLE_WORLD_SIZE", "ROLE_NAME",
                           "MASTER_ADDR",   "MASTER_PORT",     "TORCHELASTIC_RESTART_COUNT",
                           "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
                           "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS", "BRAID_STORE_ADDR",
                           "BRAID_STORE_PREFIX", "BRAID_JOB_SECRET"};

int EnvInt(const char* name) {
  const char* value = std::getenv(name);
  int parsed = -1;
  if (value == nullptr || !absl::SimpleAtoi(value, &parsed)) return -1;
  return parsed;
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == name) return "1";
    if (absl::ConsumePrefix(&arg, name + "=")) return std::string(arg);
  }
  return fallback;
}

int Fail(const std::string& why) {
  std::fprintf(stderr, "probe_worker: %s\n", why.c_str());
  return 1;
}

// What the --trap handler writes, prepared before it can run (a handler may
// only make async-signal-safe calls).
int trap_fd = -1;
std::string trap_text;

void RecordSignalAndExit(int) {
  (void)!write(trap_fd, trap_text.data(), trap_text.size());
  _exit(0);
}

int SignalNumber(const std::string& name) {
  for (int sig = 1; sig < SIGRTMIN; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev != nullptr && (name == abbrev || name == absl::StrCat("SIG", abbrev))) return sig;
  }
  return 0;
}

// --trap / --ignore-rank; false when the flags are malformed.
bool SetUpTrap(int argc, char** argv, int rank) {
  const std::string trap = Flag(argc, argv, "--trap");
  if (trap.empty()) return true;
  const int sig = SignalNumber(trap);
  if (sig == 0) return false;
  if (Flag(argc, argv, "--ignore-rank") == absl::StrCat(rank)) return signal(sig, SIG_IGN) != SIG_ERR;
  const std::string path = absl::StrCat(Flag(argc, argv, "--signal-dir", "."), "/", rank, ".signal");
  trap_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  trap_text = absl::StrCat("SIG", sigabbrev_np(sig), "\n");
  return trap_fd >= 0 && signal(sig, RecordSignalAndExit) != SIG_ERR;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path + ".tmp");
  out << text;
  out.close();
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Started by srun with no agent, a worker has only Slurm's rank until InitFromEnv.
  const int rank = EnvInt("RANK") >= 0 ? EnvInt("RANK") : EnvInt("SLURM_PROCID");
  const int attempt = EnvInt("TORCHELASTIC_RESTART_COUNT");
  const int world = EnvInt("WORLD_SIZE");
  if (!SetUpTrap(argc, argv, rank)) return Fail("bad --trap or --signal-dir");
  if (std::string dir = Flag(argc, argv, "--pid-dir"); !dir.empty()) {
    WriteFile(absl::StrCat(dir, "/", rank, ".pid"), absl::StrCat(getpid()));
  }
  if (std::string dir = Flag(argc, argv, "--start-log"); !dir.empty()) {
    const std::string line = absl::StrCat(getpid(), "\n");
    const int fd = open(absl::StrCat(dir, "/", rank, ".starts").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return Fail(absl::StrCat("cannot append to ", dir, "/", rank, ".starts"));
    }
    close(fd);
  }
  if (std::string code_text = Flag(argc, argv, "--replacement-exit");
      !code_text.empty() && std::getenv("BRAID_JOIN_RUNNING") != nullptr &&
      std::string(std::getenv("BRAID_JOIN_RUNNING")) == "1") {
    int code = 0;
    if (!absl::SimpleAtoi(code_text, &code)) return Fail("bad --replacement-exit");
    std::printf("replacement rank %d (restart count %d)\n", rank, attempt);
    std::fflush(stdout);
    if (code < 0) {
      signal(-code, SIG_DFL);
      raise(-code);
    }
    std::_Exit(code);
  }
  if (!Flag(argc, argv, "--env").empty()) {
    for (const char* name : kContract) {
      const char* value = std::getenv(name);
      if (value == nullptr) return Fail(absl::StrCat(name, " is not set"));
      std::printf("%s=%s\n", name, value);
    }
    std::fflush(stdout);
  }
  if (std::string want = Flag(argc, argv, "--wait-world"); !want.empty()) {
    int needed = 0;
    if (absl::SimpleAtoi(want, &needed) && world < needed) {
      std::printf("waiting for a world of %d (have %d)\n", needed, world);
      std::fflush(stdout);
      absl::SleepFor(absl::Seconds(120));
      return Fail("no restart came");
    }
  }

  std::unique_ptr<braid::ProcessGroup> group;
  if (!Flag(argc, argv, "--allreduce").empty()) {
    absl::StatusOr<std::unique_ptr<braid::ProcessGroup>> created = braid::InitFromEnv();
    if (!created.ok()) return Fail(created.status().ToString());
    group = std::move(*created);
    absl::StatusOr<braid::WorkHandle> barrier = group->comm().Barrier();
    absl::Status barrier_status = barrier.ok() ? (*barrier)->Wait() : barrier.status();
    if (!barrier_status.ok()) return Fail(barrier_status.ToString());
    if (std::string dir = Flag(argc, argv, "--barrier-times"); !dir.empty()) {
      WriteFile(absl::StrCat(dir, "/", attempt, ".", rank), absl::StrCat(absl::ToUnixNanos(absl::Now())));
    }
    int rounds = 1;
    double round_sleep = 0;
    (void)absl::SimpleAtoi(Flag(argc, argv, "--rounds", "1"), &rounds);
    (void)absl::SimpleAtod(Flag(argc, argv, "--round-sleep", "0"), &round_sleep);
    for (int round = 0; round < rounds; ++round) {
      if (round > 0) absl::SleepFor(absl::Seconds(round_sleep));
      // Element i of rank r holds r * 1000 + i + round: the sum is exact and known.
      // --mismatch-rank: that rank issues a different count, as a buggy trainer would.
      const int64_t kCount = Flag(argc, argv, "--mismatch-rank") == absl::StrCat(rank) ? 999 : 1000;
      absl::StatusOr<braid::Tensor> tensor = braid::Tensor::Empty({kCount}, braid::DType::kI64);
      if (!tensor.ok()) return Fail(tensor.status().ToString());
      for (int64_t i = 0; i < kCount; ++i) tensor->data<int64_t>()[i] = rank * 1000 + i + round;
      absl::StatusOr<braid::WorkHandle> work = group->comm().AllReduce(*tensor, braid::ReduceOp::kSum);
      absl::Status status = work.ok() ? (*work)->Wait() : work.status();
      if (!status.ok()) return Fail(status.ToString());
      const int64_t n = group->size();
      for (int64_t i = 0; i < kCount; ++i) {
        const int64_t expected = 1000 * n * (n - 1) / 2 + n * (i + round);
        if (tensor->data<int64_t>()[i] != expected) {
          return Fail(absl::StrCat("round ", round, ": element ", i, " is ", tensor->data<int64_t>()[i],
                                   ", expected ", expected));
        }
      }
    }
    std::printf("all-reduce ok: rank %d of %d (attempt %d)\n", group->rank(), group->size(), attempt);
    std::fflush(stdout);
  }

  const std::string fail_rank = Flag(argc, argv, "--fail-rank");
  if (!fail_rank.empty() && fail_rank == absl::StrCat(rank) &&
      (Flag(argc, argv, "--fail-attempt", "0") == absl::StrCat(attempt) ||
       Flag(argc, argv, "--fail-attempt") == "all")) {
    double after = 0;
    if (absl::SimpleAtod(Flag(argc, argv, "--fail-after", "0"), &after) && after > 0) {
      absl::SleepFor(absl::Seconds(after));
    }
    int code = 1;
    (void)absl::SimpleAtoi(Flag(argc, argv, "--exit-code", "1"), &code);
    std::fprintf(stderr, "probe_worker: rank %d failing on purpose in attempt %d\n", rank, attempt);
    if (!Flag(argc, argv, "--error-file").empty()) {
      WriteFile(std::getenv("TORCHELASTIC_ERROR_FILE"),
                absl::StrCat("{\"message\": {\"message\": \"ProbeError: rank ", rank, " gave up\"}}\n"));
    }
    std::fflush(stderr);
    if (std::string dir = Flag(argc, argv, "--barrier-times"); !dir.empty()) {
      WriteFile(absl::StrCat(dir, "/died.", rank), absl::StrCat(absl::ToUnixNanos(absl::Now())));
    }
    if (code < 0) {
      signal(-code, SIG_DFL);  // a sanitizer's handler would turn it into an abort
      raise(-code);
    }
    std::_Exit(code);  // no group teardown: the others see a dead peer
  }
  if (std::string sleep = Flag(argc, argv, "--sleep"); !sleep.empty()) {
    double seconds = 0;
    if (absl::SimpleAtod(sleep, &seconds)) absl::SleepFor(absl::Seconds(seconds));
  }
  return 0;
}
