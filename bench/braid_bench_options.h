// braid_bench's options: its flags beyond bench_common's, their cross-checks,
// and its --help text.
#ifndef BRAID_BENCH_BRAID_BENCH_OPTIONS_H_
#define BRAID_BENCH_BRAID_BENCH_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/flags.h"
#include "bench/bench_common.h"
#include "collectives/selection.h"

namespace braid::bench {

extern const char kProgram[];
extern const char kSummary[];
// What --help prints after the flags.
extern const char kDescription[];

struct BraidOptions {
  CommonOptions common;
  Collective collective = Collective::kAllReduce;
  std::vector<Algorithm> algorithms = {Algorithm::kAuto};
  bool algorithms_given = false;
  bool blocking = false;
  int root = 0;
  std::string transport = "auto";
  bool cuda = false;      // --device cuda (or -t nccl)
  std::string tune_path;  // --tune FILE
  // --memory: where the CPU buffers live: "mappable" (memory the peers map,
  // as the reducer's buckets), "braid" (braid's own: huge pages from 1 MiB)
  // or "caller" (the caller's own pages, as torch's or NumPy's).
  std::string memory = "mappable";
};

std::vector<Flag> BraidFlags(BraidOptions* o);
// Cross-flag checks that need no group (kInvalidArgument: exit 2).
absl::Status ValidateBraid(BraidOptions& o);

}  // namespace braid::bench

#endif  // BRAID_BENCH_BRAID_BENCH_OPTIONS_H_
