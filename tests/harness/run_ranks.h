// RunRanks: the multi-rank test harness every collective test uses. It runs
// one function as `n` ranks, either as threads of the test process or as
// forked child processes, and returns one absl::Status per rank, collected on
// the calling (main) thread, so a Catch2 test asserts on the vector there.
// Catch2 v2's assertions are not thread-safe: a rank never calls REQUIRE or
// CHECK, it returns a Status.
//
//   std::vector<absl::Status> statuses = RunRanks(4, RankMode::kProcesses,
//       [](RankContext& ctx) -> absl::Status {
//         BRAID_ASSIGN_OR_RETURN(auto all, ctx.AllGather(std::to_string(ctx.rank())));
//         ...
//         return absl::OkStatus();
//       });
//   for (const absl::Status& s : statuses) REQUIRE(s.ok());
//
// Ranks exchange a few bytes (addresses, ports, checksums) through a hub that
// runs in the test process: each rank holds one end of its own socketpair and
// the thread that called RunRanks relays between them with poll(2), so both
// modes behave the same. Every wait has the run's deadline. When a rank leaves
// (returns, throws, crashes, exits) before joining an exchange that others are
// in, the others' AllGather / Barrier returns kAborted naming that rank instead
// of hanging; at the deadline, ranks still blocked in an exchange are told
// (kDeadlineExceeded naming the ranks that never joined).
//
// Modes:
//  - kProcesses forks `n` children without exec (stdout/stderr are flushed
//    first; children are forked before anything else starts, while the caller
//    is the only thread the harness knows of). A child resets the fatal signal
//    handlers (Catch2's, a sanitizer's) so a crash is a crash, sets its log
//    rank, runs `fn`, sends its Status (code and message) to the parent and
//    calls _exit: it never returns into Catch2. A child that is killed by a
//    signal or exits without reporting gets a status naming the rank and the
//    signal ("rank 2 killed by signal SIGSEGV") or the exit code. At the
//    deadline every child still running its own code gets SIGKILL and
//    kDeadlineExceeded ("rank 1 did not finish within 2s; killed"); ranks blocked
//    in an exchange get a short grace to report the exchange's error first.
//    Every child is reaped before RunRanks returns; no fd is left open.
//  - kThreads runs `n` std::threads. A thread cannot be killed: a rank still
//    running at the deadline (plus the grace) is reported kDeadlineExceeded and
//    its thread is detached and left to finish on its own. That is safe for the
//    harness: the straggler owns everything it touches (its RankContext and its
//    copy of `fn`; the hub side is gone, so its exchanges fail kUnavailable).
//    Whatever `fn` captures by reference must outlive such a thread, so a test
//    that may hang should use kProcesses, and one that uses kThreads with a
//    straggler should capture shared_ptrs and let the straggler finish.
//
// A C++ exception escaping `fn` becomes kInternal naming the rank, in both modes.
#ifndef BRAID_TESTS_HARNESS_RUN_RANKS_H_
#define BRAID_TESTS_HARNESS_RUN_RANKS_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/fd.h"

namespace braid::testing {

enum class RankMode { kThreads, kProcesses };

absl::string_view RankModeName(RankMode mode);  // "threads" / "processes"
std::ostream& operator<<(std::ostream& os, RankMode mode);

struct RunRanksOptions {
  // The whole run's budget. Ranks see it as RankContext::deadline(); past it,
  // stragglers are killed (processes) or abandoned (threads).
  absl::Duration timeout = absl::Seconds(60);
};

// One rank's view of the run. Owned by that rank (its thread, or its child
// process) and used only by it: not thread-safe. AllGather and Barrier are
// collective: every rank must call them in the same order.
class RankContext {
 public:
  RankContext(RankContext&&) = default;
  RankContext& operator=(RankContext&&) = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  RankMode mode() const { return mode_; }
  // When the run ends; pass it (or something sooner) to every wait in `fn`.
  Deadline deadline() const { return deadline_; }

  // Blocks until every rank has called AllGather for the same exchange, then
  // returns every rank's bytes in rank order (empty contributions allowed).
  // kAborted naming the rank when one left before joining; kDeadlineExceeded at
  // the run's deadline; kInvalidArgument when ranks called different exchanges
  // (AllGather on one, Barrier on another); kUnavailable if the hub is gone.
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine);

  // Blocks until every rank has called Barrier; errors as AllGather.
  absl::Status Barrier();

  // How many exchanges (AllGather or Barrier) this rank has joined.
  int64_t exchanges() const { return sequence_; }

 private:
  friend class RankRunner;
  RankContext(int rank, int size, RankMode mode, Deadline deadline, UniqueFd hub)
      : rank_(rank), size_(size), mode_(mode), deadline_(deadline), hub_(std::move(hub)) {}

  // Sends one contribution of kind `op` and waits for the hub's answer; for an
  // AllGather, fills `gathered` (nullptr for a Barrier).
  absl::Status Exchange(uint32_t op, absl::string_view mine, std::vector<std::string>* gathered);

  int rank_ = 0;
  int size_ = 0;
  RankMode mode_ = RankMode::kThreads;
  Deadline deadline_;
  UniqueFd hub_;  // this rank's end of its socketpair with the hub
  int64_t sequence_ = 0;
};

// Runs `fn` as ranks 0..n-1 (n >= 1) and returns their statuses, index = rank.
// Blocks the calling thread, which runs the hub, until every rank has finished
// or the deadline (plus a grace of at most 0.5 s for ranks blocked in an
// exchange) has passed. Call it from one thread at a time per test (it may be
// called concurrently, but process-mode forks then copy the other run's
// threads' state). In process mode `fn` runs in a forked child: anything it
// changes there (globals, the environment) is not seen by the parent.
std::vector<absl::Status> RunRanks(int n, RankMode mode,
                                   std::function<absl::Status(RankContext&)> fn,
                                   RunRanksOptions options = {});

// The name of a signal for messages: "SIGSEGV", or "signal 77" if unknown.
std::string SignalName(int signal_number);

}  // namespace braid::testing

#endif  // BRAID_TESTS_HARNESS_RUN_RANKS_H_
