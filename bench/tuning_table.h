// The all-reduce selection table that `braid_bench --tune` writes and the
// selector compiles in (tuning/allreduce.txt, data: a genrule of
// //collectives turns it into C++ rows): for each transport and world size,
// which algorithm to run up to which message size.
//
// One row per range (transport, world size, max_bytes, algorithm), grouped
// per (transport, world size) under a comment naming the machine and run
// they came from:
//
//   # shm n=2: host, 2 CPUs, <cpu>, 2026-12-01T10:00:00Z, braid_bench --tune ...
//   shm 2 65536 rhd
//   shm 2 0 ring
//
// A row applies to messages of at most max_bytes bytes (0: no bound) that no
// earlier row of its group took. Plain single-threaded code; the file
// functions block on the file system.
#ifndef BRAID_BENCH_TUNING_TABLE_H_
#define BRAID_BENCH_TUNING_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace braid::bench {

// The fastest algorithm measured at one size.
struct TuningPoint {
  size_t bytes = 0;
  std::string algorithm;
  double time_us = 0;
};

struct TuningRange {
  uint64_t max_bytes = 0;  // 0: no upper bound
  std::string algorithm;
};

// Ranges from the winners, smallest size first: a lone size whose winner
// differs from two agreeing neighbours is noise and takes theirs; runs of one
// winner become one range ending at the run's last size; the last range is
// unbounded.
std::vector<TuningRange> RangesFromPoints(std::vector<TuningPoint> points);

// One (transport, world size) group of the file.
struct TuningGroup {
  std::string transport;
  int world_size = 0;
  std::string origin;  // the comment after "<transport> n=<N>: "
  std::vector<TuningRange> ranges;
};

// Parses the file's text (kInvalidArgument naming the line it cannot read).
absl::StatusOr<std::vector<TuningGroup>> ParseTuningTable(const std::string& text);
// The file's text for `groups` (sorted by transport, then world size).
std::string FormatTuningTable(std::vector<TuningGroup> groups);
// Reads `path` (a missing file is an empty table), replaces the group of
// (transport, world_size) and writes it back.
absl::Status MergeTuningFile(const std::string& path, const std::string& transport, int world_size,
                             std::vector<TuningRange> ranges, const std::string& origin);

}  // namespace braid::bench

#endif  // BRAID_BENCH_TUNING_TABLE_H_
