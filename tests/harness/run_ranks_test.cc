// Tests of the RunRanks harness itself, with real threads, real forked
// processes and real sockets. Ranks never assert: they return a Status, and
// every REQUIRE runs on the main thread.
#include "tests/harness/run_ranks.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "tests/harness/statuses.h"

namespace braid::testing {
namespace {

// True when this process has no child left, reaped or not.
bool NoChildrenLeft() {
  errno = 0;
  const pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
  return pid == -1 && errno == ECHILD;
}

int OpenFdCount() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;  // the directory's own fd
}

// Rank `rank`'s contribution to round `round`: distinct per rank and round.
// A pseudo-random 4 KiB block, repeated (cheap even under sanitizers); the
// block length is odd-sized so repeats do not line up with 4 KiB boundaries.
std::string Payload(int rank, int round, size_t bytes) {
  std::string block(std::min<size_t>(bytes, 4093), '\0');
  uint32_t x = 2654435761u * static_cast<uint32_t>(rank + 1) + 40503u * static_cast<uint32_t>(round);
  for (char& c : block) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  std::string text;
  text.reserve(bytes);
  while (text.size() < bytes) text.append(block, 0, std::min(block.size(), bytes - text.size()));
  return text;
}

// `want(r)` is what rank r contributed.
template <typename Want>
absl::Status ExpectGathered(const RankContext& ctx, const std::vector<std::string>& got,
                            Want want, absl::string_view what) {
  if (static_cast<int>(got.size()) != ctx.size()) {
    return absl::InternalError(absl::StrCat("rank ", ctx.rank(), ": ", what, ": got ", got.size(),
                                            " contributions, want ", ctx.size()));
  }
  for (int r = 0; r < ctx.size(); ++r) {
    const std::string expected = want(r);
    if (got[r] != expected) {
      return absl::InternalError(absl::StrCat("rank ", ctx.rank(), ": ", what,
                                              ": wrong bytes from rank ", r, " (", got[r].size(),
                                              " bytes, want ", expected.size(), ")"));
    }
  }
  return absl::OkStatus();
}

TEST_CASE("RunRanks: every rank returns OK and sees its rank, size and deadline", "[harness]") {
  const RankMode mode = GENERATE(RankMode::kThreads, RankMode::kProcesses);
  const int n = GENERATE(1, 2, 4);
  CAPTURE(mode, n);
  const int fds_before = OpenFdCount();
  const absl::Time start = absl::Now();
  const pid_t parent = ::getpid();
  const std::vector<absl::Status> statuses = RunRanks(
      n, mode,
      [=](RankContext& ctx) -> absl::Status {
        if (ctx.size() != n || ctx.rank() < 0 || ctx.rank() >= n || ctx.mode() != mode) {
          return absl::InternalError(absl::StrCat("bad context: rank ", ctx.rank(), " size ", ctx.size()));
        }
        if (ctx.deadline() < start + absl::Seconds(29) || ctx.deadline() > absl::Now() + absl::Seconds(30)) {
          return absl::InternalError("deadline is not the run's timeout from its start");
        }
        // A process rank runs in its own child; a thread rank in this process.
        if ((mode == RankMode::kProcesses) == (::getpid() == parent)) {
          return absl::InternalError(absl::StrCat("rank ", ctx.rank(), " runs in pid ", ::getpid()));
        }
        return absl::OkStatus();
      },
      {.timeout = absl::Seconds(30)});
  REQUIRE(statuses.size() == static_cast<size_t>(n));
  CHECK_ALL_OK(statuses);
  CHECK(NoChildrenLeft());
  CHECK(OpenFdCount() == fds_before);
}

TEST_CASE("RunRanks: AllGather returns every rank's bytes in rank order", "[harness]") {
  const RankMode mode = GENERATE(RankMode::kThreads, RankMode::kProcesses);
  const int n = GENERATE(1, 2, 4);
  // bytes < 0: rank r sends r bytes (rank 0 sends nothing).
  const int bytes = GENERATE(0, 1, 100, 1 << 20, -1);
  CAPTURE(mode, n, bytes);
  auto size_of = [bytes](int rank) { return static_cast<size_t>(bytes < 0 ? rank : bytes); };
  const std::vector<absl::Status> statuses = RunRanks(
      n, mode,
      [=](RankContext& ctx) -> absl::Status {
        for (int round = 0; round < 3; ++round) {
          BRAID_ASSIGN_OR_RETURN(std::vector<std::string> got,
                                 ctx.AllGather(Payload(ctx.rank(), round, size_of(ctx.rank()))));
          BRAID_RETURN_IF_ERROR(ExpectGathered(
              ctx, got, [&](int r) { return Payload(r, round, size_of(r)); },
              absl::StrCat("round ", round)));
          BRAID_RETURN_IF_ERROR(ctx.Barrier());
        }
        if (ctx.exchanges() != 6) return absl::InternalError("exchange count");
        return absl::OkStatus();
      },
      {.timeout = absl::Seconds(30)});
  REQUIRE(statuses.size() == static_cast<size_t>(n));
  CHECK_ALL_OK(statuses);
  CHECK(NoChildrenLeft());
}

TEST_CASE("RunRanks: many small exchanges stay in step", "[harness]") {
  const RankMode mode = GENERATE(RankMode::kThreads, RankMode::kProcesses);
  CAPTURE(mode);
  constexpr int kRanks = 4;
  constexpr int kRounds = 200;
  const std::vector<absl::Status> statuses = RunRanks(
      kRanks, mode,
      [](RankContext& ctx) -> absl::Status {
        for (int round = 0; round < kRounds; ++round) {
          BRAID_ASSIGN_OR_RETURN(auto got, ctx.AllGather(absl::StrCat(round, "/", ctx.rank())));
          for (int r = 0; r < ctx.size(); ++r) {
            if (got[r] != absl::StrCat(round, "/", r)) {
              return absl::InternalError(absl::StrCat("round ", round, ": got \"", got[r], "\""));
            }
          }
        }
        return absl::OkStatus();
      },
      {.timeout = absl::Seconds(30)});
  CHECK_ALL_OK(statuses);
}

TEST_CASE("RunRanks: one rank's error is exactly that rank's status", "[harness]") {
  const RankMode mode = GENERATE(RankMode::kThreads, RankMode::kProcesses);
  const int n = GENERATE(1, 2, 4);
  CAPTURE(mode, n);
  const int failing = n - 1;
  // Code and message must travel intact, bytes and all.
  static const char kMessage[] = "rank lost its keys: \xc3\xbc\n\ttab \0nul";
  const std::string message(kMessage, sizeof(kMessage) - 1);
  const std::vector<absl::Status> statuses = RunRanks(
      n, mode,
      [=](RankContext& ctx) -> absl::Status {
        if (ctx.rank() == failing) return absl::NotFoundError(message);
        return absl::OkStatus();
      },
      {.timeout = absl::Seconds(30)});
  INFO(DescribeStatuses(statuses));
  REQUIRE(statuses.size() == static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (r == failing) {
      CHECK(statuses[r] == absl::NotFoundError(message));
    } else {
      CHECK(statuses[r].ok());
    }
  }
  CHECK(NoChildrenLeft());
}

TEST_CASE("RunRanks: a rank that returns before an exchange aborts the others' exchange",
          "[harness]") {
  const RankMode mode = GENERATE(RankMode::kThreads, RankMode::kProcesses);
  const int n = GENERATE(2, 4);
  // The quitter leaves after this many exchanges; the others try one more.
  const int rounds_before_quitting = GENERATE(0, 2);
  CAPTURE(mode, n, rounds_before_quitting);
  const int quitter = 1;
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = RunRanks(
      n, mode,
      [=](RankContext& ctx) -> absl::Status {
        for (int round = 0; round < rounds_before_quitting; ++round) {
          BRAID_RETURN_IF_ERROR(ctx.AllGather("x").status());
        }
        if (ctx.rank() == quitter) return absl::FailedPreconditionError("quitting early");
        BRAID_RETURN_IF_ERROR(ctx.AllGather("y").status());
        return absl::InternalError("AllGather completed without the quitter");
      },
      {.timeout = absl::Seconds(30)});
  INFO(DescribeStatuses(statuses));
  REQUIRE(statuses.size() == static_cast<size_t>(n));
  CHECK(absl::Now() - start < absl::Seconds(10));
  CHECK(statuses[quitter] == absl::FailedPreconditionError("quitting early"));
  for (int r = 0; r < n; ++r) {
    if (r == quitter) continue;
    CHECK(statuses[r].code() == absl::StatusCode::kAborted);
    CHECK(absl::StrContains(statuses[r].message(), "rank 1 returned without joining it"));
    CHECK(absl::StrContains(statuses[r].message(), "quitting early"));
    CHECK(absl::StrContains(statuses[r].message(),
                            absl::StrCat("AllGather #", rounds_before_quitting)));
  }
  CHECK(NoChildrenLeft());
}

TEST_CASE("RunRanks: a rank that crashes is reported with its signal; the others do not hang",
          "[harness]") {
  const int n = GENERATE(1, 2, 4);
  const int signal_number = GENERATE(SIGSEGV, SIGABRT);
  const bool others_wait = GENERATE(true, false);
  CAPTURE(n, signal_number, others_wait);
  const int crasher = n - 1;
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = RunRanks(
      n, RankMode::kProcesses,
      [=](RankContext& ctx) -> absl::Status {
        if (ctx.rank() == crasher) {
          if (signal_number == SIGABRT) std::abort();
          ::raise(signal_number);
          return absl::InternalError("survived the signal");
        }
        if (others_wait) return ctx.Barrier();
        return absl::OkStatus();
      },
      {.timeout = absl::Seconds(30)});
  INFO(DescribeStatuses(statuses));
  REQUIRE(statuses.size() == static_cast<size_t>(n));
  CHECK(absl::Now() - start < absl::Seconds(10));
  const std::string killed_by =
      absl::StrCat("rank ", crasher, " killed by signal ", SignalName(signal_number));
  CHECK(statuses[crasher].code() == absl::StatusCode::kInternal);
  CHECK(absl::StrContains(statuses[crasher].message(), killed_by));
  for (int r = 0; r < crasher; ++r) {
    if (others_wait) {
      CHECK(statuses[r].code() == absl::StatusCode::kAborted);
      CHECK(absl::StrContains(statuses[r].message(), absl::StrCat("rank ", crasher)));
      CHECK(absl::StrContains(statuses[r].message(), "Barrier #0"));
    } else {
      CHECK(statuses[r].ok());
    }
  }
  CHECK(NoChildrenLeft());
}

TEST_CASE("RunRanks: an escaping C++ exception is kInternal naming the rank", "[harness]") {
  const RankMode mode = GENERATE(RankMode::kThreads, RankMode::kProcesses);
  const int n = GENERATE(1, 2, 4);
  CAPTURE(mode, n);
  const int thrower = n - 1;
  const std::vector<absl::Status> statuses = RunRanks(
      n, mode,
      [=](RankContext& ctx) -> absl::Status {
        if (ctx.rank() == thrower) throw std::runtime_error("boom");
        if (ctx.rank() == 0 && n > 2) throw 42;  // not a std::exception
        return absl::OkStatus();
      },
      {.timeout = absl::Seconds(30)});
  INFO(DescribeStatuses(statuses));
  REQUIRE(statuses.size() == static_cast<size_t>(n));
  CHECK(statuses[thrower].code() == absl::StatusCode::kInternal);
  CHECK(absl::StrContains(statuses[thrower].message(), absl::StrCat("rank ", thrower)));
  CHECK(absl::StrContains(statuses[thrower].message(), "boom"));
  if (n > 2) {
    CHECK(statuses[0].code() == absl::StatusCode::kInternal);
    CHECK(absl::StrContains(statuses[0].message(), "rank 0: uncaught C++ exception"));
  }
  CHECK(NoChildrenLeft());
}

TEST_CASE("RunRanks: a child that exits without reporting gives its exit code", "[harness]") {
  const int n = GENERATE(1, 2);
  CAPTURE(n);
  const std::vector<absl::Status> statuses = RunRanks(
      n, RankMode::kProcesses,
      [](RankContext& ctx) -> absl::Status {
        if (ctx.rank() == ctx.size() - 1) ::_exit(3);
        return absl::OkStatus();
      },
      {.timeout = absl::Seconds(30)});
  INFO(DescribeStatuses(statuses));
  REQUIRE(statuses.size() == static_cast<size_t>(n));
  CHECK(statuses[n - 1].code() == absl::StatusCode::kInternal);
  CHECK(absl::StrContains(statuses[n - 1].message(),
                          absl::StrCat("rank ", n - 1, " exited with code 3")));
  if (n > 1) CHECK(statuses[0].ok());
  CHECK(NoChildrenLeft());
}

TEST_CASE("RunRanks: ranks calling different exchanges get kInvalidArgument", "[harness]") {
  const RankMode mode = GENERATE(RankMode::kThreads, RankMode::kProcesses);
  CAPTURE(mode);
  const std::vector<absl::Status> statuses = RunRanks(
      2, mode,
      [](RankContext& ctx) -> absl::Status {
        if (ctx.rank() == 0) return ctx.Barrier();
        return ctx.AllGather("data").status();
      },
      {.timeout = absl::Seconds(30)});
  INFO(DescribeStatuses(statuses));
  REQUIRE(statuses.size() == 2);
  for (const absl::Status& status : statuses) {
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "rank 0 Barrier, rank 1 AllGather"));
  }
}

TEST_CASE("RunRanks: a hanging process is killed at the deadline", "[harness]") {
  const int n = GENERATE(1, 2, 4);
  const bool others_wait = GENERATE(true, false);
  if (n == 1 && !others_wait) return;  // same as n == 1 with others_wait
  CAPTURE(n, others_wait);
  const int sleeper = n - 1;
  const absl::Duration timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = RunRanks(
      n, RankMode::kProcesses,
      [=](RankContext& ctx) -> absl::Status {
        if (ctx.rank() == sleeper) {
          while (true) ::pause();  // ignores its deadline
        }
        if (others_wait) return ctx.AllGather("waiting").status();
        return absl::OkStatus();
      },
      {.timeout = timeout});
  const absl::Duration elapsed = absl::Now() - start;
  INFO(DescribeStatuses(statuses));
  INFO("elapsed " << absl::FormatDuration(elapsed));
  REQUIRE(statuses.size() == static_cast<size_t>(n));
  CHECK(elapsed >= timeout);
  CHECK(elapsed < timeout + absl::Seconds(3));
  CHECK(statuses[sleeper] ==
        absl::DeadlineExceededError(absl::StrCat("rank ", sleeper, " did not finish within 1s; killed")));
  for (int r = 0; r < sleeper; ++r) {
    if (others_wait) {
      CHECK(statuses[r].code() == absl::StatusCode::kDeadlineExceeded);
      CHECK(absl::StrContains(statuses[r].message(),
                              absl::StrCat("never joined by rank(s) ", sleeper)));
    } else {
      CHECK(statuses[r].ok());
    }
  }
  CHECK(NoChildrenLeft());
}

TEST_CASE("RunRanks: a thread still running at the deadline is reported, not waited for",
          "[harness]") {
  // A cooperative straggler: it ignores the deadline, but the test releases it
  // afterwards and waits until it is gone, so no thread outlives this test.
  struct Shared {
    std::atomic<bool> release{false};
    std::atomic<bool> finished{false};
    absl::Status late_status;  // written by the straggler before `finished`
  };
  auto shared = std::make_shared<Shared>();
  const absl::Duration timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  const int fds_before = OpenFdCount();
  const std::vector<absl::Status> statuses = RunRanks(
      2, RankMode::kThreads,
      [shared](RankContext& ctx) -> absl::Status {
        if (ctx.rank() == 0) return ctx.Barrier();
        const absl::Time give_up = absl::Now() + absl::Seconds(20);
        while (!shared->release.load() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
        // The hub is gone by now: an exchange must fail cleanly, not crash.
        shared->late_status = ctx.Barrier();
        shared->finished.store(true);
        return absl::OkStatus();
      },
      {.timeout = timeout});
  const absl::Duration elapsed = absl::Now() - start;
  shared->release.store(true);
  INFO(DescribeStatuses(statuses));
  INFO("elapsed " << absl::FormatDuration(elapsed));
  REQUIRE(statuses.size() == 2);
  CHECK(elapsed < timeout + absl::Seconds(3));
  CHECK(statuses[0].code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(statuses[0].message(), "never joined by rank(s) 1"));
  CHECK(statuses[1].code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(statuses[1].message(), "rank 1 did not finish within 1s"));
  CHECK(absl::StrContains(statuses[1].message(), "threads cannot be killed"));

  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!shared->finished.load() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  REQUIRE(shared->finished.load());
  CHECK(shared->late_status.code() == absl::StatusCode::kUnavailable);
  // Let the detached thread finish reporting to nobody and exit.
  absl::SleepFor(absl::Milliseconds(100));
  CHECK(OpenFdCount() == fds_before);
}

TEST_CASE("RunRanks: a rank that ignores its deadline after an exchange error is killed too",
          "[harness]") {
  // Rank 0 is blocked in AllGather at the deadline, gets the error, then hangs:
  // it is killed at the end of the grace, rank 1 right at the deadline.
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = RunRanks(
      2, RankMode::kProcesses,
      [](RankContext& ctx) -> absl::Status {
        if (ctx.rank() == 0) (void)ctx.AllGather("x");
        while (true) ::pause();
      },
      {.timeout = absl::Milliseconds(500)});
  INFO(DescribeStatuses(statuses));
  CHECK(absl::Now() - start < absl::Seconds(3));
  for (int r = 0; r < 2; ++r) {
    CHECK(statuses[r] == absl::DeadlineExceededError(
                             absl::StrCat("rank ", r, " did not finish within 500ms; killed")));
  }
  CHECK(NoChildrenLeft());
}

TEST_CASE("SignalName names signals", "[harness]") {
  CHECK(SignalName(SIGSEGV) == "SIGSEGV");
  CHECK(SignalName(SIGKILL) == "SIGKILL");
  CHECK(SignalName(SIGABRT) == "SIGABRT");
  CHECK(SignalName(12345) == "signal 12345");
}

}  // namespace
}  // namespace braid::testing
