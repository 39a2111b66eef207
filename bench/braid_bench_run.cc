// braid_bench's run: the table's sections and report, and main().
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/flags.h"
#include "base/status.h"
#include "bench/bench_common.h"
#include "bench/braid_bench_internal.h"
#include "bench/braid_bench_options.h"
#include "collectives/communicator.h"
#include "runtime/process_group.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace braid::bench {

std::string Bench::AlgorithmList() const {
  std::vector<std::string> names;
  for (Algorithm a : options_.algorithms) names.push_back(AlgorithmName(a));
  return absl::StrJoin(names, ",");
}

std::string Bench::Header() const {
  const CommonOptions& c = options_.common;
  std::string header = FormatArgumentsLine(c);
  absl::StrAppend(&header, "#\n# braid_bench: collective ", CollectiveName(options_.collective), ", datatype ",
                  NcclTypeName(c.dtype), ", op ", redop(), ", root ", root(), ", algorithms ", AlgorithmList(),
                  ", blocking ", options_.blocking ? 1 : 0, ", transport ", comm_.transport_name(), " (asked ",
                  options_.transport, "), buffers on ", ToString(device_), ", world size ", comm_.size(),
                  "\n#\n# Using devices\n");
  for (const std::string& line : rank_lines_) absl::StrAppend(&header, line);
  return header;
}

absl::Status Bench::RunSection(Algorithm algorithm, const std::vector<size_t>& counts, int* done, int total) {
  const CommonOptions& c = options_.common;
  const Collective collective = options_.collective;
  const double bus_factor = BusFactor(collective, comm_.size());
  Print(absl::StrCat("#\n# Algorithm: ", AlgorithmName(algorithm), "\n#\n", FormatColumnHeader()));
  int64_t section_wrong = 0;
  double section_bus = 0;
  int section_n = 0;
  for (size_t count : counts) {
    BRAID_ASSIGN_OR_RETURN(const Step step, MakeStep(count, input_, output_));
    BRAID_ASSIGN_OR_RETURN(const Step host, MakeStep(count, host_input_, host_output_));
    const size_t bytes = std::max(step.counts.send, step.counts.recv) * DTypeSize(c.dtype);
    progress_.Show(absl::StrCat(CollectiveName(collective), " ", AlgorithmName(algorithm), " ", bytes, " B"), ++*done,
                   total);
    if (step.counts.param == 0) continue;  // below one element per rank
    Row row;
    BRAID_RETURN_IF_ERROR(Annotate(RunSize(algorithm, step, host, &row),
                                   absl::StrCat(CollectiveName(collective), " ", AlgorithmName(algorithm), " of ",
                                                bytes, " bytes")));
    progress_.Clear();
    Print(FormatRow(row, c.dtype, redop(), root(), bus_factor));
    section_wrong += std::max<int64_t>(row.out_of_place.wrong, 0) + std::max<int64_t>(row.in_place.wrong, 0);
    AccumulateBusBandwidth(row, bus_factor, &section_bus, &section_n);
    rows_.push_back(std::move(row));
  }
  progress_.Clear();
  Print(FormatFooter(section_wrong, section_n > 0 ? section_bus / section_n : 0));
  wrong_total_ += section_wrong;
  bus_sum_ += section_bus;
  bus_n_ += section_n;
  return absl::OkStatus();
}

absl::Status Bench::WriteJson() const {
  const CommonOptions& c = options_.common;
  const Collective collective = options_.collective;
  JsonReport report;
  report.program = kProgram;
  report.collective = CollectiveName(collective);
  report.redop = redop();
  report.root = root();
  report.machine = DescribeMachine();
  report.transport = comm_.transport_name();
  report.world_size = comm_.size();
  report.rank_lines = ReportRankLines(rank_lines_);
  report.arguments = {{"collective", JsonQuote(CollectiveName(collective))}};
  for (auto& argument : SweepArguments(c)) report.arguments.push_back(std::move(argument));
  report.arguments.insert(report.arguments.end(), {
      {"op", JsonQuote(redop())},
      {"root", absl::StrCat(root())},
      {"algo", JsonQuote(AlgorithmList())},
      {"blocking", options_.blocking ? "1" : "0"},
      {"transport_requested", JsonQuote(options_.transport)},
  });
  report.rows = rows_;
  report.dtype = c.dtype;
  report.op = c.op;
  report.bus_factor = BusFactor(collective, comm_.size());
  report.wrong_total = wrong_total_;
  report.avg_bus_bandwidth = bus_n_ > 0 ? bus_sum_ / bus_n_ : 0;
  return WriteJsonReport(c.json_path, report);
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
  Print(Header());
  const int total = static_cast<int>(options_.algorithms.size() * counts.size());
  int done = 0;
  for (Algorithm algorithm : options_.algorithms) BRAID_RETURN_IF_ERROR(RunSection(algorithm, counts, &done, total));
  if (group_.rank() == 0 && !options_.tune_path.empty() && !rows_.empty()) BRAID_RETURN_IF_ERROR(WriteTuning(rows_));
  if (group_.rank() == 0 && !c.json_path.empty()) BRAID_RETURN_IF_ERROR(WriteJson());
  return absl::OkStatus();
}

namespace {

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
