// braid_bench: nccl-tests' *_perf programs for braid in one binary (-C names
// the collective). Every rank is one process joining its job through
// InitFromEnv(); rank 0 prints the nccl-tests table. What it measures and how
// (sizes and counts, in-place, the exact check, timing, --tune, CUDA buffers,
// the flags that differ from nccl-tests, exit status) is kDescription
// (braid_bench_options.cc), which `braid_bench --help` prints after the
// flags; the shared harness (flags, sweep, check data, table, --json) is
// bench/bench_common.h.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/deadline.h"
#include "base/flags.h"
#include "base/socket.h"
#include "base/status.h"
#include "bench/bench_common.h"
#include "bench/braid_bench_options.h"
#include "bench/tuning_table.h"
#include "collectives/communicator.h"
#include "collectives/selection.h"
#include "runtime/process_group.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace braid::bench {
namespace {

// The communicator's kind of `collective`, and its CollectiveArgs count for
// one step (per rank's block for reduce-scatter, all-gather, all-to-all).
std::pair<CollectiveKind, size_t> KindAndCount(Collective collective, const CollectiveCounts& counts, int n) {
  switch (collective) {
    case Collective::kAllReduce: return {CollectiveKind::kAllReduce, counts.param};
    case Collective::kReduceScatter: return {CollectiveKind::kReduceScatter, counts.recv};
    case Collective::kAllGather: return {CollectiveKind::kAllGather, counts.send};
    case Collective::kBroadcast: return {CollectiveKind::kBroadcast, counts.param};
    case Collective::kReduce: return {CollectiveKind::kReduce, counts.param};
    case Collective::kAllToAll: return {CollectiveKind::kAllToAll, counts.send / static_cast<size_t>(n)};
    case Collective::kSendRecv: return {CollectiveKind::kSendRecv, counts.param};
  }
  return {CollectiveKind::kNone, 0};
}

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

absl::Status Bench::AllocateBuffers(const std::vector<size_t>& counts) {
  const DType dtype = options_.common.dtype;
  size_t max_count = 1;
  for (size_t count : counts) {
    const CollectiveCounts k = CountsFor(options_.collective, count, comm_.size());
    max_count = std::max({max_count, k.send, k.recv});
  }
  const int64_t n = static_cast<int64_t>(max_count);
  // Zeroed: the first touch now, since fresh pages cost ~10 us each, which no timed call should pay.
  BRAID_ASSIGN_OR_RETURN(input_, Tensor::Zeros({n}, dtype, device_));
  BRAID_ASSIGN_OR_RETURN(output_, Tensor::Zeros({n}, dtype, device_));
  host_input_ = input_;
  host_output_ = output_;
  if (device_.is_cuda() && options_.common.check) {
    BRAID_ASSIGN_OR_RETURN(host_input_, Tensor::Zeros({n}, dtype));
    BRAID_ASSIGN_OR_RETURN(host_output_, Tensor::Zeros({n}, dtype));
  }
  if (options_.common.check) {
    BRAID_ASSIGN_OR_RETURN(expected_, Tensor::Empty({n}, dtype));
    std::memset(expected_.data(), 0, expected_.nbytes());
  }
  BRAID_ASSIGN_OR_RETURN(times_, Tensor::Zeros({2}, DType::kF64));
  BRAID_ASSIGN_OR_RETURN(wrongs_, Tensor::Zeros({2}, DType::kI64));
  return absl::OkStatus();
}

// Each rank publishes "pid group local host" in the store; rank 0 reads them all.
absl::Status Bench::GatherRankLines() {
  Store& store = group_.store();
  const WorkerEnv& env = group_.env();
  BRAID_RETURN_IF_ERROR(store.Set(absl::StrCat("braid_bench/rank/", env.rank),
                                  absl::StrCat(getpid(), " ", env.group_rank, " ", env.local_rank, " ", HostName())));
  if (env.rank != 0) return absl::OkStatus();
  const Deadline deadline = DeadlineIn(group_.timeout());
  const std::string cpu = DescribeMachine().cpu_model;
  for (int r = 0; r < env.world_size; ++r) {
    BRAID_ASSIGN_OR_RETURN(std::string value, store.Get(absl::StrCat("braid_bench/rank/", r), deadline));
    std::vector<std::string> parts = absl::StrSplit(value, absl::MaxSplits(' ', 3));
    if (parts.size() != 4) return absl::InternalError(absl::StrCat("rank ", r, " published \"", value, "\""));
    int64_t pid = 0;
    int group = 0;
    (void)absl::SimpleAtoi(parts[0], &pid);
    (void)absl::SimpleAtoi(parts[1], &group);
    rank_lines_.push_back(FormatRankLine(r, group, pid, parts[3], absl::StrCat("[local ", parts[2], "] ", cpu)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Bench::Step> Bench::MakeStep(size_t count, const Tensor& input, const Tensor& output) const {
  Step step;
  step.counts = CountsFor(options_.collective, count, comm_.size());
  const CollectiveCounts& k = step.counts;
  BRAID_ASSIGN_OR_RETURN(step.in, input.Narrow(0, 0, static_cast<int64_t>(k.send)));
  BRAID_ASSIGN_OR_RETURN(step.out, output.Narrow(0, 0, static_cast<int64_t>(k.recv)));
  BRAID_ASSIGN_OR_RETURN(step.whole, output.Narrow(0, 0, static_cast<int64_t>(std::max(k.send, k.recv))));
  step.mine = step.out;
  if (options_.collective == Collective::kReduceScatter || options_.collective == Collective::kAllGather) {
    const int64_t block = static_cast<int64_t>(k.param);
    BRAID_ASSIGN_OR_RETURN(step.mine, output.Narrow(0, comm_.rank() * block, block));
  }
  return step;
}

absl::StatusOr<WorkHandle> Bench::Issue(const Step& step, bool in_place, Algorithm algorithm) {
  CallOptions call;
  call.algorithm = algorithm;
  const ReduceOp op = options_.common.op;
  const int root = options_.root;
  switch (options_.collective) {
    case Collective::kAllReduce:
      return comm_.AllReduce(in_place ? step.out : step.in, step.out, op, call);
    case Collective::kReduceScatter:
      return in_place ? comm_.ReduceScatter(step.whole, step.mine, op, call)
                      : comm_.ReduceScatter(step.in, step.out, op, call);
    case Collective::kAllGather:
      return comm_.AllGather(in_place ? step.mine : step.in, step.out, call);
    case Collective::kBroadcast:
      if (!in_place && comm_.rank() == root) {
        Tensor out = step.out;  // a memcpy on the CPU, cudaMemcpy on a GPU
        BRAID_RETURN_IF_ERROR(out.CopyFrom(step.in));
      }
      return comm_.Broadcast(step.out, root, call);
    case Collective::kReduce:
      return comm_.Reduce(in_place ? step.out : step.in, step.out, op, root, call);
    case Collective::kAllToAll:
      return comm_.AllToAll(step.in, step.out, call);
    case Collective::kSendRecv: {
      const int n = comm_.size();
      const int next = (comm_.rank() + 1) % n;
      const int prev = (comm_.rank() + n - 1) % n;
      // Even ranks send first, odd ranks receive first: a cycle of ranks all
      // blocked in a send cannot form (see the file comment).
      if (comm_.rank() % 2 == 0) {
        BRAID_RETURN_IF_ERROR(comm_.Send(step.in, next, call).status());
        return comm_.Recv(step.out, prev, call);
      }
      BRAID_RETURN_IF_ERROR(comm_.Recv(step.out, prev, call).status());
      return comm_.Send(step.in, next, call);
    }
  }
  return absl::InternalError("unknown collective");
}

// `iterations` calls, each waited for (blocking) or only the last.
absl::Status Bench::RunIterations(const Step& step, bool in_place, Algorithm algorithm, int iterations) {
  WorkHandle last;
  // Out-of-place broadcast copies the root's input into the output before each
  // call (Issue): that buffer must not be touched while the previous call
  // still uses it, so those calls are waited for one by one.
  const bool wait_each =
      options_.blocking || (options_.collective == Collective::kBroadcast && !in_place);
  for (int i = 0; i < iterations; ++i) {
    BRAID_ASSIGN_OR_RETURN(last, Issue(step, in_place, algorithm));
    if (wait_each) BRAID_RETURN_IF_ERROR(last->Wait());
  }
  // In issue order: the last one done means all are; a failure aborts the
  // communicator, so the last one carries it.
  if (last) BRAID_RETURN_IF_ERROR(last->Wait());
  return absl::OkStatus();
}

// Warm-up, barrier, then the timed iterations; this rank's microseconds per iteration.
absl::StatusOr<double> Bench::TimeColumn(const Step& step, bool in_place, Algorithm algorithm) {
  BRAID_RETURN_IF_ERROR(RunIterations(step, in_place, algorithm, options_.common.warmup_iters));
  BRAID_ASSIGN_OR_RETURN(WorkHandle barrier, comm_.Barrier());
  BRAID_RETURN_IF_ERROR(barrier->Wait());
  const auto start = std::chrono::steady_clock::now();
  BRAID_RETURN_IF_ERROR(RunIterations(step, in_place, algorithm, options_.common.iters));
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / options_.common.iters;
}

absl::StatusOr<int64_t> Bench::CheckColumn(const Step& device_step, const Step& step, bool in_place,
                                            Algorithm algorithm) {
  const CommonOptions& c = options_.common;
  const DType dtype = c.dtype;
  const int rank = comm_.rank();
  const int n = comm_.size();
  const int root = options_.root;
  const size_t block_bytes = step.counts.param * DTypeSize(dtype);
  absl::Span<std::byte> expected = expected_.bytes().subspan(0, step.out.nbytes());
  // The result this rank checks: its output, or block `rank` of an in-place reduce-scatter.
  Tensor result = step.out;

  // Inputs (written where the call reads them) and a sentinel over the output.
  FillSentinel(step.whole.bytes());
  switch (options_.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:
      FillCheckInput(dtype, c.op, rank, (in_place ? step.out : step.in).bytes());
      break;
    case Collective::kReduceScatter:
      FillCheckInput(dtype, c.op, rank, (in_place ? step.whole : step.in).bytes());
      if (in_place) result = step.mine;
      break;
    case Collective::kAllGather:
      FillPattern(dtype, rank, (in_place ? step.mine : step.in).bytes());
      break;
    case Collective::kBroadcast:
      if (rank == root) FillPattern(dtype, root, (in_place ? step.out : step.in).bytes());
      break;
    case Collective::kAllToAll:
    case Collective::kSendRecv:
      FillPattern(dtype, rank, step.in.bytes());
      break;
  }
  // What this rank should end with.
  expected = expected.subspan(0, result.nbytes());
  bool compare = true;
  switch (options_.collective) {
    case Collective::kAllReduce: FillExpected(dtype, c.op, n, expected); break;
    case Collective::kReduce:
      compare = rank == root;  // the output is the root's only
      if (compare) FillExpected(dtype, c.op, n, expected);
      break;
    case Collective::kReduceScatter: FillExpected(dtype, c.op, n, expected, rank * step.counts.param); break;
    case Collective::kAllGather:
      for (int p = 0; p < n; ++p) FillPattern(dtype, p, expected.subspan(p * block_bytes, block_bytes));
      break;
    case Collective::kBroadcast: FillPattern(dtype, root, expected); break;
    case Collective::kAllToAll:
      // Block p came from rank p, which sent its block `rank`.
      for (int p = 0; p < n; ++p) {
        FillPattern(dtype, p, expected.subspan(p * block_bytes, block_bytes), rank * step.counts.param);
      }
      break;
    case Collective::kSendRecv: FillPattern(dtype, (rank + n - 1) % n, expected); break;
  }
  if (device_.is_cuda()) {
    // The inputs, and the sentinel (and in-place inputs) in the output's whole.
    Tensor in = device_step.in;
    Tensor whole = device_step.whole;
    BRAID_RETURN_IF_ERROR(in.CopyFrom(step.in));
    BRAID_RETURN_IF_ERROR(whole.CopyFrom(step.whole));
  }
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, Issue(device_step, in_place, algorithm));
  BRAID_RETURN_IF_ERROR(work->Wait());
  if (device_.is_cuda()) {
    Tensor whole = step.whole;  // holds every result view (out, mine)
    BRAID_RETURN_IF_ERROR(whole.CopyFrom(device_step.whole));
  }
  return compare ? CountMismatches(dtype, expected, result.bytes()) : 0;
}

absl::Status Bench::RunSize(Algorithm algorithm, const Step& step, const Step& host, Row* row) {
  const CommonOptions& c = options_.common;
  row->count = step.counts.param;
  row->bytes = std::max(step.counts.send, step.counts.recv) * DTypeSize(c.dtype);
  row->algorithm = AlgorithmName(algorithm);
  // What the communicator runs for this step (the selector's answer).
  const auto [kind, count] = KindAndCount(options_.collective, step.counts, comm_.size());
  CallOptions call;
  call.algorithm = algorithm;
  const bool huge_pages = step.in.storage()->huge_pages() && step.out.storage()->huge_pages();
  BRAID_ASSIGN_OR_RETURN(const Algorithm used, comm_.AlgorithmFor(kind, count, c.dtype, huge_pages, call));
  row->algorithm_used = AlgorithmName(used);
  const bool in_place = HasInPlace();

  if (c.check) {
    BRAID_ASSIGN_OR_RETURN(wrongs_.data<int64_t>()[0], CheckColumn(step, host, false, algorithm));
    wrongs_.data<int64_t>()[1] = 0;
    if (in_place) {
      BRAID_ASSIGN_OR_RETURN(wrongs_.data<int64_t>()[1], CheckColumn(step, host, true, algorithm));
    }
    BRAID_ASSIGN_OR_RETURN(WorkHandle sum, group_.comm().AllReduce(wrongs_, ReduceOp::kSum));
    BRAID_RETURN_IF_ERROR(sum->Wait());
    row->out_of_place.wrong = wrongs_.data<int64_t>()[0];
    row->in_place.wrong = in_place ? wrongs_.data<int64_t>()[1] : -1;
  }

  BRAID_ASSIGN_OR_RETURN(times_.data<double>()[0], TimeColumn(step, false, algorithm));
  times_.data<double>()[1] = -1;
  if (in_place) {
    BRAID_ASSIGN_OR_RETURN(times_.data<double>()[1], TimeColumn(step, true, algorithm));
  }
  BRAID_ASSIGN_OR_RETURN(WorkHandle max, group_.comm().AllReduce(times_, ReduceOp::kMax));
  BRAID_RETURN_IF_ERROR(max->Wait());
  row->out_of_place.time_us = times_.data<double>()[0];
  row->in_place.time_us = times_.data<double>()[1];
  return absl::OkStatus();
}

absl::Status Bench::WriteTuning(const std::vector<Row>& rows) {
  std::map<std::string, std::map<size_t, double>> times;  // algorithm -> size -> out-of-place us
  for (const Row& row : rows) times[row.algorithm][row.bytes] = row.out_of_place.time_us;
  std::vector<TuningPoint> points;
  for (const auto& [size, unused] : times.begin()->second) {
    TuningPoint point{size, "", 0};
    for (const auto& [algorithm, by_size] : times) {
      auto it = by_size.find(size);
      if (it == by_size.end()) continue;
      if (point.algorithm.empty() || it->second < point.time_us) point = {size, algorithm, it->second};
    }
    points.push_back(point);
  }
  const CommonOptions& c = options_.common;
  const MachineInfo machine = DescribeMachine();
  std::string load;
  std::ifstream loadavg("/proc/loadavg");
  std::getline(loadavg, load);
  const std::string origin = absl::StrFormat(
      "%s, %d CPUs, %s, %s, braid_bench --tune -d %s -o %s -n %d -w %d -b %d -e %d, load %s", machine.hostname,
      machine.nproc, machine.cpu_model, machine.date, NcclTypeName(c.dtype), ReduceOpName(c.op), c.iters,
      c.warmup_iters, c.min_bytes, c.max_bytes, std::string(absl::StripAsciiWhitespace(load)));
  BRAID_RETURN_IF_ERROR(MergeTuningFile(options_.tune_path, comm_.transport_name(), comm_.size(),
                                        RangesFromPoints(points), origin));
  Print(absl::StrCat("# --tune: wrote ", comm_.transport_name(), " n=", comm_.size(), " to ", options_.tune_path,
                     "\n"));
  return absl::OkStatus();
}

absl::Status Bench::Run() {
  const CommonOptions& c = options_.common;
  const Collective collective = options_.collective;
  if (CollectiveHasRoot(collective) && options_.root >= comm_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("-r/--root ", options_.root, " is not a rank of this ", comm_.size(), "-rank job"));
  }
  if (collective == Collective::kSendRecv && comm_.size() < 2) {
    return absl::InvalidArgumentError("sendrecv needs at least 2 ranks");
  }
  const std::vector<size_t> counts = SweepCounts(c);
  BRAID_RETURN_IF_ERROR(AllocateBuffers(counts));
  BRAID_RETURN_IF_ERROR(GatherRankLines());
  const double bus_factor = BusFactor(collective, comm_.size());
  const int root = CollectiveHasRoot(collective) ? options_.root : -1;
  const std::string redop = CollectiveReduces(collective) ? ReduceOpName(c.op) : "none";

  std::vector<std::string> names;
  for (Algorithm a : options_.algorithms) names.push_back(AlgorithmName(a));
  std::string header = FormatArgumentsLine(c);
  absl::StrAppend(&header, "#\n# braid_bench: collective ", CollectiveName(collective), ", datatype ",
                  NcclTypeName(c.dtype), ", op ", redop, ", root ", root, ", algorithms ", absl::StrJoin(names, ","),
                  ", blocking ", options_.blocking ? 1 : 0, ", transport ", comm_.transport_name(), " (asked ",
                  options_.transport, "), buffers on ", ToString(device_), ", world size ", comm_.size(),
                  "\n#\n# Using devices\n");
  for (const std::string& line : rank_lines_) absl::StrAppend(&header, line);
  Print(header);

  const int total = static_cast<int>(options_.algorithms.size() * counts.size());
  int done = 0;
  for (Algorithm algorithm : options_.algorithms) {
    Print(absl::StrCat("#\n# Algorithm: ", AlgorithmName(algorithm), "\n#\n", FormatColumnHeader()));
    int64_t section_wrong = 0;
    double section_bus = 0;
    int section_n = 0;
    for (size_t count : counts) {
      BRAID_ASSIGN_OR_RETURN(const Step step, MakeStep(count, input_, output_));
      BRAID_ASSIGN_OR_RETURN(const Step host, MakeStep(count, host_input_, host_output_));
      const size_t bytes = std::max(step.counts.send, step.counts.recv) * DTypeSize(c.dtype);
      progress_.Show(absl::StrCat(CollectiveName(collective), " ", AlgorithmName(algorithm), " ", bytes, " B"),
                     ++done, total);
      if (step.counts.param == 0) continue;  // below one element per rank
      Row row;
      BRAID_RETURN_IF_ERROR(Annotate(RunSize(algorithm, step, host, &row),
                                     absl::StrCat(CollectiveName(collective), " ", AlgorithmName(algorithm), " of ",
                                                  bytes, " bytes")));
      progress_.Clear();
      Print(FormatRow(row, c.dtype, redop, root, bus_factor));
      section_wrong += std::max<int64_t>(row.out_of_place.wrong, 0) + std::max<int64_t>(row.in_place.wrong, 0);
      AccumulateBusBandwidth(row, bus_factor, &section_bus, &section_n);
      rows_.push_back(std::move(row));
    }
    progress_.Clear();
    Print(FormatFooter(section_wrong, section_n > 0 ? section_bus / section_n : 0));
    wrong_total_ += section_wrong;
    bus_sum_ += section_bus;
    bus_n_ += section_n;
  }

  if (group_.rank() == 0 && !options_.tune_path.empty() && !rows_.empty()) BRAID_RETURN_IF_ERROR(WriteTuning(rows_));
  if (group_.rank() == 0 && !c.json_path.empty()) {
    JsonReport report;
    report.program = kProgram;
    report.collective = CollectiveName(collective);
    report.redop = redop;
    report.root = root;
    report.machine = DescribeMachine();
    report.transport = comm_.transport_name();
    report.world_size = comm_.size();
    for (const std::string& line : rank_lines_) {
      report.rank_lines.push_back(std::string(absl::StripAsciiWhitespace(absl::StripPrefix(line, "#"))));
    }
    report.arguments = {
        {"collective", JsonQuote(CollectiveName(collective))},
        {"minbytes", absl::StrCat(c.min_bytes)},
        {"maxbytes", absl::StrCat(c.max_bytes)},
        {"stepfactor", c.step_bytes > 0 ? std::string("null") : absl::StrCat(c.step_factor)},
        {"stepbytes", c.step_bytes > 0 ? absl::StrCat(c.step_bytes) : std::string("null")},
        {"iters", absl::StrCat(c.iters)},
        {"warmup_iters", absl::StrCat(c.warmup_iters)},
        {"check", absl::StrCat(c.check)},
        {"datatype", JsonQuote(NcclTypeName(c.dtype))},
        {"op", JsonQuote(redop)},
        {"root", absl::StrCat(root)},
        {"algo", JsonQuote(absl::StrJoin(names, ","))},
        {"blocking", options_.blocking ? "1" : "0"},
        {"transport_requested", JsonQuote(options_.transport)},
    };
    report.rows = rows_;
    report.dtype = c.dtype;
    report.op = c.op;
    report.bus_factor = bus_factor;
    report.wrong_total = wrong_total_;
    report.avg_bus_bandwidth = bus_n_ > 0 ? bus_sum_ / bus_n_ : 0;
    BRAID_RETURN_IF_ERROR(WriteJsonReport(c.json_path, report));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  BraidOptions options;
  const std::vector<Flag> flags = BraidFlags(&options);
  bool help = false;
  absl::Status parsed = ParseFlags(argc, argv, flags, &help);
  if (parsed.ok() && !help) parsed = ValidateCommon(options.common);
  if (parsed.ok() && !help) parsed = ValidateBraid(options);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(parsed.message()).c_str());
    return 2;
  }
  if (help) {
    std::fputs(absl::StrCat(Usage(kProgram, kSummary, flags), kDescription).c_str(), stdout);
    return 0;
  }

  ProcessGroupOptions group_options;
  // -t nccl: NCCL for the CUDA buffers, through CommFor with the host transport on auto (for the times and #wrong).
  group_options.transport = options.transport == "nccl" ? "auto" : options.transport;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = InitFromEnv(group_options);
  if (!group.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, group.status().ToString().c_str());
    return 1;
  }
  Device device = Device::Cpu();
  if (options.cuda) {
    const int gpus = CudaDeviceCount();
    if (gpus == 0) {
      std::fprintf(stderr, "%s: rank %d: --device cuda / -t nccl: no usable GPU (cudaGetDeviceCount failed or found none)\n",
                   kProgram, (*group)->rank());
      return 1;
    }
    device = Device::Cuda((*group)->env().local_rank % gpus);
  }
  // Collective for a CUDA device (the NCCL communicator is created here).
  absl::StatusOr<Communicator*> comm = (*group)->CommFor(device);
  if (comm.ok() && options.transport == "nccl" && !(*group)->has_device_comm()) {
    comm = absl::FailedPreconditionError(
        "-t nccl: NCCL could not be set up (see the log line above; ranks sharing a GPU need --device cuda -t shm)");
  }
  if (!comm.ok()) {
    std::fprintf(stderr, "%s: rank %d: %s\n", kProgram, (*group)->rank(), comm.status().ToString().c_str());
    return 1;
  }
  Bench bench(**group, **comm, device, options);
  const absl::Status status = bench.Run();
  if (!status.ok()) {
    std::fprintf(stderr, "%s: rank %d: %s\n", kProgram, (*group)->rank(), status.ToString().c_str());
    // A failed collective has aborted the communicator; the peers fail too.
    return status.code() == absl::StatusCode::kInvalidArgument && absl::StrContains(status.message(), "-r/--root")
               ? 2
               : 1;
  }
  return bench.wrong_total() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace braid::bench

int main(int argc, char** argv) { return braid::bench::Main(argc, argv); }
