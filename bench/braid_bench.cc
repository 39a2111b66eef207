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
#include "bench/braid_bench_internal.h"
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

}  // namespace


absl::Status Bench::AllocateBuffers(const std::vector<size_t>& counts) {
  const DType dtype = options_.common.dtype;
  size_t max_count = 1;
  for (size_t count : counts) {
    const CollectiveCounts k = CountsFor(options_.collective, count, comm_.size());
    max_count = std::max({max_count, k.send, k.recv});
  }
  const int64_t n = static_cast<int64_t>(max_count);
  // Zeroed: the first touch now, since fresh pages cost ~10 us each, which no timed call should pay.
  // Mappable by default, as the reducer's buckets: the peers on this host read and write them in place.
  if (options_.memory == "caller" && device_.is_cpu()) {
    // On 64-byte boundaries, as torch's allocator puts its tensors.
    auto aligned = [&](std::vector<std::byte>& pages) {
      pages.assign(static_cast<size_t>(n) * DTypeSize(dtype) + 64, std::byte{0});
      const uintptr_t at = reinterpret_cast<uintptr_t>(pages.data());
      return Tensor::View(pages.data() + (64 - at % 64) % 64, {n}, dtype);
    };
    input_ = aligned(caller_input_);
    output_ = aligned(caller_output_);
  } else {
    const HostMemory memory = options_.memory == "braid" ? HostMemory::kPrivate : HostMemory::kMappable;
    BRAID_ASSIGN_OR_RETURN(input_, Tensor::Zeros({n}, dtype, device_, memory));
    BRAID_ASSIGN_OR_RETURN(output_, Tensor::Zeros({n}, dtype, device_, memory));
  }
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
  const PeerMemory memory = PeerMemoryOf(&step.in, &step.out);
  BRAID_ASSIGN_OR_RETURN(const Algorithm used, comm_.AlgorithmFor(kind, count, c.dtype, memory, call));
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

}  // namespace braid::bench
