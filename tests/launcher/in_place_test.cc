// In-place recovery end to end: braidrun --restart-policy=replace running
// examples/train_mlp --recovery=in-place on 4 ranks, with real signals sent
// to real workers mid-training (kill -9 of one, of two at once, SIGSTOP of
// one). Each must end with the job succeeding, the survivors having resumed
// without a restart, the replacements having joined, every live rank
// holding bit-identical parameters after every step (--verify-steps fails
// the job otherwise) and at the end (the same final hash on all 4), and no
// finished step done twice by a survivor.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "catch2/catch.hpp"
#include "tests/harness/subprocess.h"
#include "tests/launcher/launcher_test_util.h"

namespace braid {
namespace {

struct StepFile {
  int rank = 0;
  pid_t pid = 0;
  std::vector<int64_t> steps;
};

// Every DIR/<rank>.<pid>.steps file (train_mlp --step-log).
std::vector<StepFile> ReadStepFiles(const std::string& dir) {
  std::vector<StepFile> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* entry = readdir(d)) {
    const std::vector<std::string> parts = absl::StrSplit(entry->d_name, '.');
    StepFile f;
    if (parts.size() != 3 || parts[2] != "steps" || !absl::SimpleAtoi(parts[0], &f.rank) ||
        !absl::SimpleAtoi(parts[1], &f.pid)) {
      continue;
    }
    for (absl::string_view line : absl::StrSplit(ReadFile(absl::StrCat(dir, "/", entry->d_name)), '\n',
                                                 absl::SkipEmpty())) {
      int64_t step = 0;
      const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
      if (!fields.empty() && absl::SimpleAtoi(fields[0], &step)) f.steps.push_back(step);
    }
    files.push_back(std::move(f));
  }
  closedir(d);
  return files;
}

// The first process of `rank` once it has finished `steps` steps.
pid_t AwaitSteps(const std::string& dir, int rank, size_t steps) {
  const Deadline deadline = DeadlineIn(absl::Seconds(60));
  while (!Expired(deadline)) {
    for (const StepFile& f : ReadStepFiles(dir)) {
      if (f.rank == rank && f.steps.size() >= steps) return f.pid;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  FAIL("rank " << rank << " never finished " << steps << " steps");
  return -1;
}

class InPlaceJob {
 public:
  explicit InPlaceJob(std::string timeout_sec = "5") {
    dir_ = absl::StrCat(TestTempDir(), "/in_place_", getpid(), "_", counter_++);
    const std::vector<std::string> argv = {Runfile("launcher/braidrun"),
                                           "--standalone",
                                           "--nproc-per-node=4",
                                           "--restart-policy=replace",
                                           "--max-restarts=3",
                                           Runfile("examples/train_mlp"),
                                           "--recovery=in-place",
                                           "--epochs=3",
                                           "--samples=2048",
                                           "--batch-size=32",
                                           "--step-sleep-ms=40",
                                           "--verify-steps",
                                           absl::StrCat("--step-log=", dir_)};
    tag_ = absl::StrCat("in_place_job_", counter_);
    pid_ = Spawn(argv, {{"BRAID_TIMEOUT_SEC", timeout_sec}}, tag_, kWorkerContract);
    REQUIRE(pid_ > 0);
  }

  const std::string& dir() const { return dir_; }

  ProcessExit Wait() { return WaitAll({pid_}, {tag_}, DeadlineIn(absl::Seconds(120)))[0]; }

 private:
  static inline int counter_ = 0;
  std::string dir_;
  std::string tag_;
  pid_t pid_ = -1;
};

// The job ended well: every rank identical at the end, the survivors never
// restarted, and none of them did a finished step twice.
void RequireRecovered(const ProcessExit& exit, const std::string& dir, const std::set<int>& replaced) {
  INFO(Dump(exit));
  REQUIRE(exit.code == 0);
  REQUIRE(absl::StrContains(exit.out, "recovered in place"));
  std::set<std::string> hashes;
  int finals = 0;
  for (absl::string_view line : absl::StrSplit(exit.out, '\n')) {
    const size_t at = line.find("final parameters: hash ");
    if (at == absl::string_view::npos) continue;
    ++finals;
    hashes.insert(std::string(line.substr(at + 23, 16)));
  }
  REQUIRE(finals == 4);
  REQUIRE(hashes.size() == 1);
  for (int rank : replaced) REQUIRE(absl::StrContains(exit.out, absl::StrCat("rank ", rank, " joined the running group")));
  std::map<int, int> processes;
  for (const StepFile& f : ReadStepFiles(dir)) {
    ++processes[f.rank];
    // No finished step is done again by the process that finished it (a
    // survivor that was a step behind the others skips one, taking theirs).
    for (size_t i = 1; i < f.steps.size(); ++i) REQUIRE(f.steps[i] > f.steps[i - 1]);
  }
  for (int rank = 0; rank < 4; ++rank) REQUIRE(processes[rank] == (replaced.count(rank) ? 2 : 1));
}

TEST_CASE("in-place: kill -9 of one of 4 ranks mid-training, the replacement joins", "[launcher][in_place]") {
  InPlaceJob job;
  const pid_t victim = AwaitSteps(job.dir(), 2, 8);
  REQUIRE(kill(victim, SIGKILL) == 0);
  const ProcessExit exit = job.Wait();
  RequireRecovered(exit, job.dir(), {2});
  REQUIRE(absl::StrContains(exit.err + exit.out, "--restart-policy=replace"));
}

TEST_CASE("in-place: kill -9 of two ranks at once", "[launcher][in_place]") {
  InPlaceJob job;
  const pid_t first = AwaitSteps(job.dir(), 1, 8);
  const pid_t second = AwaitSteps(job.dir(), 3, 8);
  REQUIRE(kill(first, SIGKILL) == 0);
  REQUIRE(kill(second, SIGKILL) == 0);
  RequireRecovered(job.Wait(), job.dir(), {1, 3});
}

TEST_CASE("in-place: a rank that hangs (SIGSTOP) is left out at the timeout and replaced", "[launcher][in_place]") {
  InPlaceJob job("2");
  const pid_t victim = AwaitSteps(job.dir(), 1, 8);
  const absl::Time stopped = absl::Now();
  REQUIRE(kill(victim, SIGSTOP) == 0);
  const ProcessExit exit = job.Wait();
  RequireRecovered(exit, job.dir(), {1});
  // Found by the 2 s deadline, not the 600 s default.
  REQUIRE(absl::Now() - stopped < absl::Seconds(60));
}

}  // namespace
}  // namespace braid
