// FlightRecorder: each communicator's memory of its last collectives, for the
// post-mortem of a hang or a crash (PyTorch's NCCL flight recorder, done
// always-on and cheap).
//
// A ring buffer of the last `capacity` collectives (BRAID_FLIGHT_ENTRIES,
// default 256): op, sequence number, dtype, count, bytes, root, the
// algorithm that runs, state (queued, running, completed, failed) and when
// each state began, plus the error of a failed one. Recording is a few
// stores under a light mutex per collective (why: bench/RESULTS.md, "Where
// the thresholds come from"): the owner's, where it holds one anyway.
//
// Dumps: one JSON file per rank, <dir>/rank<R>.json (dir = BRAID_FLIGHT_DIR,
// default /tmp/braid_flight/<TORCHELASTIC_RUN_ID or "job">; braidrun points
// it into its log folder), overwritten by each dump. The communicator dumps
// when a collective fails (a timeout, a dead peer, a mismatch) and on
// SIGUSR1 (every live recorder in the process; a handler thread does the
// writing, never the signal handler). tools/flight_analyze.py reads every
// rank's dump and names the rank that is behind or diverged.
#ifndef BRAID_COLLECTIVES_FLIGHT_RECORDER_H_
#define BRAID_COLLECTIVES_FLIGHT_RECORDER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/mutex.h"
#include "collectives/transport/frame.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid {

class FlightRecorder {
 public:
  enum class State : uint8_t { kQueued, kRunning, kCompleted, kFailed };

  struct Entry {
    uint64_t seq = 0;
    CollectiveKind kind = CollectiveKind::kNone;
    DType dtype = DType::kF32;
    ReduceOp op = ReduceOp::kSum;
    int root = -1;
    size_t count = 0;
    size_t bytes = 0;
    const char* algorithm = "";  // what runs (selection.h's names); a literal
    State state = State::kQueued;
    absl::Time queued, started, ended;
    std::string error;
  };

  // capacity 0: BRAID_FLIGHT_ENTRIES. `group`: which communicator ("world",
  // or a subgroup's name): its dump is rank<R>.<group>.json. `guard`: the
  // lock that protects the entries, when the owner has one it holds around
  // most records anyway (it calls the *Held forms then); else the recorder's own.
  FlightRecorder(int rank, int size, std::string transport, size_t capacity = 0, std::string group = "world",
                 LightMutex* guard = nullptr);
  ~FlightRecorder();  // stops answering SIGUSR1 for this recorder
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // A collective was issued. Point-to-point calls (seq 0) are recorded too.
  // `algorithm` (a literal) is what runs. `running`: the collective starts
  // at once (Running is not called for it). `now`: the caller's CoarseNow(),
  // when it has one.
  void Queued(const CollectiveArgs& args, size_t bytes, const char* algorithm, bool running = false,
              absl::Time now = CoarseNow()) ABSL_LOCKS_EXCLUDED(*lock_);
  void Running(uint64_t seq) ABSL_LOCKS_EXCLUDED(*lock_);
  void Finished(uint64_t seq, const absl::Status& status) ABSL_LOCKS_EXCLUDED(*lock_);
  // The same, with the guard held by the caller.
  void QueuedHeld(const CollectiveArgs& args, size_t bytes, const char* algorithm, bool running, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(*lock_);
  void RunningHeld(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(*lock_);
  void FinishedHeld(uint64_t seq, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(*lock_);

  // A line the dump carries beside its entries (the last straggler report).
  void Note(std::string line);

  // The entries, oldest first.
  std::vector<Entry> Snapshot() const;
  // This rank's dump as JSON: rank, size, transport, why, time, entries.
  std::string ToJson(const std::string& why) const;
  // Writes ToJson(why) to <dir>/rank<R>.json (rank<R>.<group>.json for a
  // subgroup; atomically: temp file, rename) and returns the path.
  absl::StatusOr<std::string> Dump(const std::string& why) const;
  static std::string DumpDir();

 private:
  Entry* Find(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(*lock_);
  std::string NoteCopy() const;

  const int rank_;
  const int size_;
  const std::string transport_;
  const std::string group_;
  mutable LightMutex own_lock_;
  LightMutex* const lock_;  // the guard, or &own_lock_
  std::vector<Entry> ring_ ABSL_GUARDED_BY(*lock_);
  size_t next_ ABSL_GUARDED_BY(*lock_) = 0;   // where the next entry goes
  size_t filled_ ABSL_GUARDED_BY(*lock_) = 0;
  std::string note_ ABSL_GUARDED_BY(*lock_);
};

const char* FlightStateName(FlightRecorder::State state);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_FLIGHT_RECORDER_H_
