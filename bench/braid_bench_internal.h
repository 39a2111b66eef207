// Internal to braid_bench (braid_bench.cc, braid_bench_run.cc): the
// benchmark of one job, size by size and algorithm by algorithm.
#ifndef BRAID_BENCH_BRAID_BENCH_INTERNAL_H_
#define BRAID_BENCH_BRAID_BENCH_INTERNAL_H_

#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/bench_common.h"
#include "bench/braid_bench_options.h"
#include "collectives/communicator.h"
#include "runtime/process_group.h"
#include "tensor/tensor.h"

namespace braid::bench {

// Shows "[braid_bench] allreduce ring 1048576 B (12/48)" on one line of
// stderr, rewritten in place, when stderr is a terminal; silent otherwise.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO) == 1) {}
  ~Progress() { Clear(); }
  void Show(const std::string& what, int done, int total) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[K[%s] %s (%d/%d)", kProgram, what.c_str(), done, total);
    std::fflush(stderr);
    shown_ = true;
  }
  void Clear() {
    if (!shown_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  const bool enabled_;
  bool shown_ = false;
};

class Bench {
 public:
  // `comm` runs the measured collectives (group.CommFor(the buffers' device));
  // group.comm() reduces the per-rank times and wrong counts (CPU tensors).
  Bench(ProcessGroup& group, Communicator& comm, Device device, const BraidOptions& options)
      : group_(group), comm_(comm), device_(device), options_(options), progress_(group.rank() == 0) {}

  absl::Status Run();
  int64_t wrong_total() const { return wrong_total_; }

 private:
  // One size step: the element counts and the views the calls use.
  struct Step {
    CollectiveCounts counts;
    Tensor in;      // counts.send elements of input_
    Tensor out;     // counts.recv elements of output_
    Tensor whole;   // counts.send or recv elements of output_: an in-place reduce-scatter's input,
                    // an in-place all-gather's output
    Tensor mine;    // block `rank` of whole: an in-place reduce-scatter's output, all-gather's input
  };

  absl::Status AllocateBuffers(const std::vector<size_t>& counts);
  absl::Status GatherRankLines();
  // The views of `input` and `output` (input_/output_, or their host copies) for one size.
  absl::StatusOr<Step> MakeStep(size_t count, const Tensor& input, const Tensor& output) const;
  bool HasInPlace() const {
    return options_.collective != Collective::kAllToAll && options_.collective != Collective::kSendRecv;
  }
  // Issues one iteration (for send/recv: the send and the receive); the handle that finishes last.
  absl::StatusOr<WorkHandle> Issue(const Step& step, bool in_place, Algorithm algorithm);
  absl::Status RunIterations(const Step& step, bool in_place, Algorithm algorithm, int iterations);
  absl::StatusOr<double> TimeColumn(const Step& step, bool in_place, Algorithm algorithm);
  // Fills this rank's input for a checked call, runs it, and counts the wrong
  // elements here. Filled and compared in `host` (the same views of the host
  // copies; `step` itself on the CPU), copied to the device before the call
  // and back after it.
  absl::StatusOr<int64_t> CheckColumn(const Step& step, const Step& host, bool in_place, Algorithm algorithm);
  absl::Status RunSize(Algorithm algorithm, const Step& step, const Step& host, Row* row);
  absl::Status WriteTuning(const std::vector<Row>& rows);
  // "ring,tree": the algorithms asked for, as the header and the report name them.
  std::string AlgorithmList() const;
  // The table's header: the arguments, the collective, the ranks.
  std::string Header() const;
  // One algorithm's table section over every size; `done` counts the sizes run so far.
  absl::Status RunSection(Algorithm algorithm, const std::vector<size_t>& counts, int* done, int total);
  // Rank 0's --json file.
  absl::Status WriteJson() const;
  int root() const { return CollectiveHasRoot(options_.collective) ? options_.root : -1; }
  std::string redop() const {
    return CollectiveReduces(options_.collective) ? ReduceOpName(options_.common.op) : "none";
  }
  void Print(const std::string& text) const {
    if (group_.rank() != 0) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }

  ProcessGroup& group_;
  Communicator& comm_;
  const Device device_;  // of input_ and output_
  const BraidOptions& options_;
  Progress progress_;
  Tensor input_;
  Tensor output_;
  std::vector<std::byte> caller_input_;  // --memory caller: what input_ and output_ view
  std::vector<std::byte> caller_output_;
  // With CUDA buffers and -c 1: host copies where checks are filled and read.
  Tensor host_input_;
  Tensor host_output_;
  Tensor expected_;  // only with -c 1
  Tensor times_;     // 2 x f64: out-of-place, in-place; max over ranks
  Tensor wrongs_;    // 2 x i64: summed over ranks
  std::vector<std::string> rank_lines_;
  std::vector<Row> rows_;
  int64_t wrong_total_ = 0;
  double bus_sum_ = 0;
  int bus_n_ = 0;
};

}  // namespace braid::bench

#endif  // BRAID_BENCH_BRAID_BENCH_INTERNAL_H_
