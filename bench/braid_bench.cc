// braid_bench: nccl-tests' all_reduce_perf for braid. Every rank is one
// process that joins its job with braid::InitFromEnv() (so it runs under
// braidrun, torchrun, mpirun, or with RANK / WORLD_SIZE / MASTER_ADDR /
// MASTER_PORT set by hand); rank 0 prints the nccl-tests table:
//
//   # nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step: 2(factor) ...
//   #  Rank  0 Group  0 Pid  12345 on       host device cpu [local 0] <cpu>
//   #                         out-of-place                       in-place
//   #       size   count   type   redop    root     time   algbw   busbw #wrong ...
//             8       2   float     sum      -1    10.24    0.00    0.00      0 ...
//   # Out of bounds values : 0 OK
//   # Avg bus bandwidth    : 1.2345
//
// One table section per algorithm given to -a. Per size: with -c 1 the
// out-of-place and the in-place call are each run once on exact-check data
// and compared element by element with a locally computed reference
// (#wrong = mismatches summed over ranks); then each is run -w times untimed
// and -n times timed. time = the average per iteration, the maximum over
// ranks; algbw = bytes / time; busbw = algbw * 2(n-1)/n.
//
// -z 0 (default) issues all -n iterations and then waits on the last (the
// communicator runs them in issue order); -z 1 waits for each before issuing
// the next. Buffers are allocated once, at the largest size, and first
// touched before anything is timed; every size is a view of them.
//
// Exit status: 0 all checks passed; 1 a collective failed or a check found
// wrong values; 2 a bad flag or value (one line on stderr).
//
// Flags that differ from nccl-tests: -t is the transport (nccl-tests: thread
// count), -a the algorithm list (nccl-tests: how times are averaged), -C the
// collective (nccl-tests: report CPU time). -g is accepted with the value 1
// only (one CPU device per process).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/deadline.h"
#include "base/status.h"
#include "bench/bench_common.h"
#include "collectives/algorithms.h"
#include "collectives/communicator.h"
#include "runtime/process_group.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace braid::bench {
namespace {

constexpr char kProgram[] = "braid_bench";
constexpr char kSummary[] =
    "nccl-tests compatible collective benchmark for braid. Start one process per rank with braidrun,\n"
    "torchrun or mpirun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself. Rank 0 prints\n"
    "the table. Exit status: 0 ok, 1 a collective failed or found wrong values, 2 a bad flag.";

struct BraidOptions {
  CommonOptions common;
  std::vector<Algorithm> algorithms = {Algorithm::kAuto};
  bool blocking = false;
  std::string transport = "auto";
};

// Collectives nccl-tests has that braid_bench does not measure yet.
constexpr const char* kNotYet[] = {"reducescatter", "reduce_scatter", "allgather", "all_gather", "broadcast",
                                   "reduce",        "alltoall",       "all_to_all", "sendrecv",   "hypercube",
                                   "gather",        "scatter",        "barrier"};

std::vector<Flag> BraidFlags(BraidOptions* o) {
  std::vector<Flag> flags = CommonFlags(&o->common);
  flags.push_back({'a', "algo", "ALGO[,ALGO...]",
                   "all-reduce algorithms: ring, tree, rhd, native (the transport's engine: MPI_Allreduce over mpi), "
                   "auto (default); one table section each",
                   [o](absl::string_view v) -> absl::Status {
                     o->algorithms.clear();
                     for (absl::string_view name : absl::StrSplit(v, ',')) {
                       absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(absl::StripAsciiWhitespace(name));
                       if (!algorithm.ok()) return algorithm.status();
                       o->algorithms.push_back(*algorithm);
                     }
                     return absl::OkStatus();
                   }});
  flags.push_back({'z', "blocking", "0|1",
                   "1: wait for each iteration before issuing the next; 0 (default): issue all, wait on the last",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<int64_t> n = ParseInt(v, 0, 1);
                     if (!n.ok()) return n.status();
                     o->blocking = *n == 1;
                     return absl::OkStatus();
                   }});
  flags.push_back({'C', "collective", "NAME", "allreduce (the only one so far)",
                   [](absl::string_view v) -> absl::Status {
                     std::string name = absl::AsciiStrToLower(v);
                     absl::StrReplaceAll({{"-", "_"}}, &name);
                     if (name == "allreduce" || name == "all_reduce") return absl::OkStatus();
                     for (const char* later : kNotYet) {
                       if (name == later) {
                         return absl::UnimplementedError(
                             absl::StrCat("\"", v, "\" is not measured yet; braid_bench measures allreduce only for now"));
                       }
                     }
                     return absl::InvalidArgumentError(absl::StrCat("unknown collective \"", v, "\" (allreduce)"));
                   }});
  flags.push_back({'t', "transport", "auto|mpi|shm|tcp",
                   "the process group's transport (default auto: mpi under mpirun, else shm when all ranks share "
                   "this host, else tcp)",
                   [o](absl::string_view v) -> absl::Status {
                     const std::string name = absl::AsciiStrToLower(v);
                     if (name != "auto" && name != "mpi" && name != "shm" && name != "tcp") {
                       return absl::InvalidArgumentError(absl::StrCat(
                           "unknown transport \"", v,
                           "\" (auto, mpi, shm, tcp; nccl-tests' -t thread count is not a braid flag)"));
                     }
                     o->transport = name;
                     return absl::OkStatus();
                   }});
  flags.push_back({'g', "ngpus", "1", "accepted for nccl-tests command lines: one device per process, so only 1",
                   [](absl::string_view v) -> absl::Status {
                     if (v != "1") return absl::InvalidArgumentError("braid runs one device per process: only -g 1");
                     return absl::OkStatus();
                   }});
  return flags;
}

// Issues one all-reduce per the options; the handle, or why it could not be issued.
absl::StatusOr<WorkHandle> Issue(Communicator& comm, const Tensor& in, const Tensor& out, ReduceOp op,
                                 Algorithm algorithm) {
  CallOptions call;
  call.algorithm = algorithm;
  return comm.AllReduce(in, out, op, call);
}

absl::Status RunOnce(Communicator& comm, const Tensor& in, const Tensor& out, ReduceOp op, Algorithm algorithm) {
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, Issue(comm, in, out, op, algorithm));
  return work->Wait();
}

// `iterations` all-reduces, each waited for (blocking) or only the last.
absl::Status RunIterations(Communicator& comm, const Tensor& in, const Tensor& out, ReduceOp op, Algorithm algorithm,
                           int iterations, bool blocking) {
  WorkHandle last;
  for (int i = 0; i < iterations; ++i) {
    BRAID_ASSIGN_OR_RETURN(last, Issue(comm, in, out, op, algorithm));
    if (blocking) BRAID_RETURN_IF_ERROR(last->Wait());
  }
  // In issue order: the last one done means all are; a failure aborts the
  // communicator, so the last one carries it.
  if (last) BRAID_RETURN_IF_ERROR(last->Wait());
  return absl::OkStatus();
}

// Warm-up, barrier, then the timed iterations; this rank's microseconds per iteration.
absl::StatusOr<double> TimeColumn(Communicator& comm, const Tensor& in, const Tensor& out, const BraidOptions& options,
                                  Algorithm algorithm) {
  BRAID_RETURN_IF_ERROR(
      RunIterations(comm, in, out, options.common.op, algorithm, options.common.warmup_iters, options.blocking));
  BRAID_ASSIGN_OR_RETURN(WorkHandle barrier, comm.Barrier());
  BRAID_RETURN_IF_ERROR(barrier->Wait());
  const auto start = std::chrono::steady_clock::now();
  BRAID_RETURN_IF_ERROR(
      RunIterations(comm, in, out, options.common.op, algorithm, options.common.iters, options.blocking));
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / options.common.iters;
}

class Bench {
 public:
  Bench(ProcessGroup& group, const BraidOptions& options) : group_(group), comm_(group.comm()), options_(options) {}

  absl::Status Run();
  int64_t wrong_total() const { return wrong_total_; }

 private:
  absl::Status AllocateBuffers(size_t max_count);
  absl::Status GatherRankLines();
  absl::Status RunSize(Algorithm algorithm, size_t count, Row* row);
  void Print(const std::string& text) const {
    if (group_.rank() != 0) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }

  ProcessGroup& group_;
  Communicator& comm_;
  const BraidOptions& options_;
  Tensor input_;
  Tensor output_;
  Tensor expected_;  // only with -c 1
  Tensor times_;     // 2 x f64: out-of-place, in-place; max over ranks
  Tensor wrongs_;    // 2 x i64: summed over ranks
  std::vector<std::string> rank_lines_;
  std::vector<Row> rows_;
  int64_t wrong_total_ = 0;
  double bus_sum_ = 0;
  int bus_n_ = 0;
};

absl::Status Bench::AllocateBuffers(size_t max_count) {
  const DType dtype = options_.common.dtype;
  const int64_t n = static_cast<int64_t>(std::max<size_t>(max_count, 1));
  BRAID_ASSIGN_OR_RETURN(input_, Tensor::Empty({n}, dtype));
  BRAID_ASSIGN_OR_RETURN(output_, Tensor::Empty({n}, dtype));
  // First touch now: fresh pages cost ~10 us each, which no timed call should pay.
  std::memset(input_.data(), 0, input_.nbytes());
  std::memset(output_.data(), 0, output_.nbytes());
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
  BRAID_ASSIGN_OR_RETURN(absl::Duration timeout, DefaultTimeout());
  const Deadline deadline = DeadlineIn(timeout);
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

absl::Status Bench::RunSize(Algorithm algorithm, size_t count, Row* row) {
  const CommonOptions& c = options_.common;
  row->count = count;
  row->bytes = count * DTypeSize(c.dtype);
  row->algorithm = AlgorithmName(algorithm);
  row->algorithm_used = AlgorithmName(comm_.ChooseAllReduce(row->bytes, algorithm));
  const int64_t n = static_cast<int64_t>(count);
  BRAID_ASSIGN_OR_RETURN(Tensor in, input_.Narrow(0, 0, n));
  BRAID_ASSIGN_OR_RETURN(Tensor out, output_.Narrow(0, 0, n));

  if (c.check) {
    BRAID_ASSIGN_OR_RETURN(Tensor expected, expected_.Narrow(0, 0, n));
    FillExpected(c.dtype, c.op, comm_.size(), expected.bytes());
    // Out of place: the output starts as garbage.
    FillCheckInput(c.dtype, c.op, comm_.rank(), in.bytes());
    FillSentinel(out.bytes());
    BRAID_RETURN_IF_ERROR(RunOnce(comm_, in, out, c.op, algorithm));
    wrongs_.data<int64_t>()[0] = CountMismatches(c.dtype, expected.bytes(), out.bytes());
    // In place: the same tensor is input and output.
    FillCheckInput(c.dtype, c.op, comm_.rank(), out.bytes());
    BRAID_RETURN_IF_ERROR(RunOnce(comm_, out, out, c.op, algorithm));
    wrongs_.data<int64_t>()[1] = CountMismatches(c.dtype, expected.bytes(), out.bytes());
    BRAID_RETURN_IF_ERROR(RunOnce(comm_, wrongs_, wrongs_, ReduceOp::kSum, Algorithm::kAuto));
    row->out_of_place.wrong = wrongs_.data<int64_t>()[0];
    row->in_place.wrong = wrongs_.data<int64_t>()[1];
  }

  BRAID_ASSIGN_OR_RETURN(times_.data<double>()[0], TimeColumn(comm_, in, out, options_, algorithm));
  BRAID_ASSIGN_OR_RETURN(times_.data<double>()[1], TimeColumn(comm_, out, out, options_, algorithm));
  BRAID_RETURN_IF_ERROR(RunOnce(comm_, times_, times_, ReduceOp::kMax, Algorithm::kAuto));
  row->out_of_place.time_us = times_.data<double>()[0];
  row->in_place.time_us = times_.data<double>()[1];
  return absl::OkStatus();
}

absl::Status Bench::Run() {
  const CommonOptions& c = options_.common;
  const std::vector<size_t> counts = SweepCounts(c);
  BRAID_RETURN_IF_ERROR(AllocateBuffers(*std::max_element(counts.begin(), counts.end())));
  BRAID_RETURN_IF_ERROR(GatherRankLines());
  const double bus_factor = AllReduceBusFactor(comm_.size());

  std::vector<std::string> names;
  for (Algorithm a : options_.algorithms) names.push_back(AlgorithmName(a));
  std::string header = FormatArgumentsLine(c);
  absl::StrAppend(&header, "#\n# braid_bench: collective allreduce, datatype ", NcclTypeName(c.dtype), ", op ",
                  ReduceOpName(c.op), ", algorithms ", absl::StrJoin(names, ","), ", blocking ",
                  options_.blocking ? 1 : 0, ", transport ", comm_.transport_name(), " (asked ", options_.transport,
                  "), world size ", comm_.size(), "\n#\n# Using devices\n");
  for (const std::string& line : rank_lines_) absl::StrAppend(&header, line);
  Print(header);

  for (Algorithm algorithm : options_.algorithms) {
    Print(absl::StrCat("#\n# Algorithm: ", AlgorithmName(algorithm), "\n#\n", FormatColumnHeader()));
    int64_t section_wrong = 0;
    double section_bus = 0;
    int section_n = 0;
    for (size_t count : counts) {
      Row row;
      BRAID_RETURN_IF_ERROR(Annotate(RunSize(algorithm, count, &row),
                                     absl::StrCat("allreduce ", AlgorithmName(algorithm), " of ",
                                                  count * DTypeSize(c.dtype), " bytes")));
      Print(FormatRow(row, c.dtype, c.op, -1, bus_factor));
      section_wrong += std::max<int64_t>(row.out_of_place.wrong, 0) + std::max<int64_t>(row.in_place.wrong, 0);
      AccumulateBusBandwidth(row, bus_factor, &section_bus, &section_n);
      rows_.push_back(std::move(row));
    }
    Print(FormatFooter(section_wrong, section_n > 0 ? section_bus / section_n : 0));
    wrong_total_ += section_wrong;
    bus_sum_ += section_bus;
    bus_n_ += section_n;
  }

  if (group_.rank() == 0 && !c.json_path.empty()) {
    JsonReport report;
    report.program = kProgram;
    report.machine = DescribeMachine();
    report.transport = comm_.transport_name();
    report.world_size = comm_.size();
    for (const std::string& line : rank_lines_) {
      report.rank_lines.push_back(std::string(absl::StripAsciiWhitespace(absl::StripPrefix(line, "#"))));
    }
    report.arguments = {
        {"collective", JsonQuote("allreduce")},
        {"minbytes", absl::StrCat(c.min_bytes)},
        {"maxbytes", absl::StrCat(c.max_bytes)},
        {"stepfactor", c.step_bytes > 0 ? std::string("null") : absl::StrCat(c.step_factor)},
        {"stepbytes", c.step_bytes > 0 ? absl::StrCat(c.step_bytes) : std::string("null")},
        {"iters", absl::StrCat(c.iters)},
        {"warmup_iters", absl::StrCat(c.warmup_iters)},
        {"check", absl::StrCat(c.check)},
        {"datatype", JsonQuote(NcclTypeName(c.dtype))},
        {"op", JsonQuote(ReduceOpName(c.op))},
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
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(parsed.message()).c_str());
    return 2;
  }
  if (help) {
    std::fputs(Usage(kProgram, kSummary, flags).c_str(), stdout);
    return 0;
  }

  ProcessGroupOptions group_options;
  group_options.transport = options.transport;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = InitFromEnv(group_options);
  if (!group.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, group.status().ToString().c_str());
    return 1;
  }
  Bench bench(**group, options);
  const absl::Status status = bench.Run();
  if (!status.ok()) {
    std::fprintf(stderr, "%s: rank %d: %s\n", kProgram, (*group)->rank(), status.ToString().c_str());
    // A failed collective has aborted the communicator; the peers fail too.
    return 1;
  }
  return bench.wrong_total() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace braid::bench

int main(int argc, char** argv) { return braid::bench::Main(argc, argv); }
