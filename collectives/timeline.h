// Timeline: a Chrome-trace / Perfetto JSON of what one rank's communicator
// did and when: every collective (start, end, bytes, algorithm, sequence
// number, time spent queued, status) and whatever the layers above mark on
// it (the reducer's buckets and backward passes). Open the file in
// https://ui.perfetto.dev or chrome://tracing; see overlap (buckets inside
// backward) and stragglers (one rank's collective starting late).
//
// Switched on by BRAID_TIMELINE=<spec>; one file per rank and communicator:
//   BRAID_TIMELINE=/tmp/trace.json   ->  /tmp/trace.rank<R>.json
//   BRAID_TIMELINE=/tmp/traces/      ->  /tmp/traces/rank<R>.json (a directory:
//                                        an existing one, or any spec ending in '/';
//                                        missing folders are created)
// A second communicator of the same rank in one process adds ".<k>" before
// ".json". Times are microseconds of the system clock, so files of ranks on
// one host line up; every event has pid = rank, so merging is concatenating
// the "traceEvents" arrays (tools/plot_bench --merge-timeline does it).
//
// The events are kept in memory (at most BRAID_TIMELINE_EVENTS, default one
// million; later ones are counted and dropped) and written when the timeline
// is destroyed (the communicator's end) or by Write(). A process killed
// before that writes nothing.
//
// Threads: every method is thread-safe.
#ifndef BRAID_COLLECTIVES_TIMELINE_H_
#define BRAID_COLLECTIVES_TIMELINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "collectives/transport/frame.h"

namespace braid {

class Timeline {
 public:
  // The lanes ("threads") a rank's trace shows.
  enum class Track : int { kCollectives = 1, kBuckets = 2, kBackward = 3 };

  // A timeline writing to the file BRAID_TIMELINE names for `rank`, or null
  // when BRAID_TIMELINE is unset or empty.
  static std::unique_ptr<Timeline> FromEnv(int rank, int size, const std::string& transport);
  // The file for `rank` under `spec` (the rules above), before de-duplication.
  static std::string PathFor(const std::string& spec, int rank);

  Timeline(std::string path, int rank, int size, std::string transport, size_t max_events);
  ~Timeline();  // writes the file (an error is logged)
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // A span ("ph": "X") on `track`. `args` is the inside of a JSON object
  // ("\"seq\": 3, \"bytes\": 1024"), or empty.
  void Span(absl::string_view name, Track track, absl::Time start, absl::Time end, std::string args);
  // A collective's span on Track::kCollectives, named "<kind> <algorithm>",
  // with its seq, bytes (per rank), count, dtype, op, root, algorithm, time
  // queued before `start` and whether it succeeded.
  void Collective(const CollectiveArgs& args, const char* algorithm, size_t bytes, absl::Time queued,
                  absl::Time start, absl::Time end, bool ok);
  // A point in time ("ph": "i").
  void Instant(absl::string_view name, Track track, absl::Time at, std::string args);

  // Writes every event so far to path() (atomically: temp file, rename). Blocks on the file system.
  absl::Status Write() const;
  const std::string& path() const { return path_; }

 private:
  struct Event {
    std::string name;
    Track track;
    char phase;
    int64_t ts_us;
    int64_t dur_us;
    std::string args;
  };

  const std::string path_;
  const int rank_;
  const int size_;
  const std::string transport_;
  const size_t max_events_;
  mutable absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TIMELINE_H_
