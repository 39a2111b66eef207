// mpi_allreduce_bench: the baseline braid_bench is measured against. The
// same sweep, check data, columns and footers as braid_bench (so rows line
// up), timing Open MPI's own MPI_Allreduce under mpirun:
//
//   mpirun --oversubscribe -np 4 mpi_allreduce_bench -b 8 -e 64M -f 4
//
// Out of place: MPI_Allreduce(in, out); in place: MPI_Allreduce(MPI_IN_PLACE,
// out). MPI has no average: avg is MPI_SUM followed by a local division (as a
// user of MPI would write it; the division is timed). float16 / bfloat16 have
// no MPI datatype here: a clear error, exit status 2.
//
// Flags: -b -e -f -i -n -w -c -d -o --json, as braid_bench and nccl-tests.
// Buffers are allocated once at the largest size and first touched before
// timing. time = average per iteration, maximum over ranks.
// Exit status: 0 ok, 1 wrong values or an MPI error, 2 a bad flag.
// The C API only: Open MPI's deprecated C++ bindings do not compile cleanly under -Werror.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/flags.h"
#include "bench/bench_common.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace braid::bench {
namespace {

constexpr char kProgram[] = "mpi_allreduce_bench";
constexpr char kSummary[] =
    "MPI_Allreduce baseline for braid_bench: run it under mpirun; rank 0 prints the nccl-tests table.\n"
    "Exit status: 0 ok, 1 wrong values or an MPI error, 2 a bad flag.";
constexpr int kRecordBytes = 512;

absl::StatusOr<MPI_Datatype> MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI8: return MPI_INT8_T;
    case DType::kU8: return MPI_UINT8_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kF16:
    case DType::kBF16: break;
  }
  return absl::UnimplementedError(
      absl::StrCat("-d/--datatype ", NcclTypeName(dtype), " is unsupported by the MPI baseline (MPI has no 16-bit float)"));
}

MPI_Op MpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd: return MPI_PROD;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;  // avg: sum, then divide locally
  }
  return MPI_SUM;
}

struct Context {
  const CommonOptions* options;
  MPI_Datatype type;
  MPI_Op op;
  int rank;
  int size;
};

// One all-reduce; in == nullptr means in place.
int AllReduce(const Context& ctx, const Tensor* in, const Tensor& out) {
  const int count = static_cast<int>(out.numel());
  const int rc = MPI_Allreduce(in != nullptr ? in->data() : MPI_IN_PLACE, out.data(), count, ctx.type, ctx.op,
                               MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS && ctx.options->op == ReduceOp::kAvg) {
    HostDivide(ctx.options->dtype, out.bytes(), ctx.size);
  }
  return rc;
}

// Warm-up, barrier, timed iterations: this rank's microseconds per iteration.
// Sets *failed when a call returned an error.
double TimeColumn(const Context& ctx, const Tensor* in, const Tensor& out, int* failed) {
  int rc = MPI_SUCCESS;
  for (int i = 0; i < ctx.options->warmup_iters; ++i) rc |= AllReduce(ctx, in, out);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < ctx.options->iters; ++i) rc |= AllReduce(ctx, in, out);
  const double elapsed = MPI_Wtime() - start;
  if (rc != MPI_SUCCESS) *failed = 1;
  return elapsed * 1e6 / ctx.options->iters;
}

// The rank lines, each rank's record gathered on rank 0, and rank 0's header (printed).
std::vector<std::string> PrintHeader(const Context& ctx, const MachineInfo& machine, const std::string& transport,
                                     const std::string& library_name) {
  char mine[kRecordBytes] = {};
  std::snprintf(mine, sizeof(mine), "%d %s", static_cast<int>(getpid()), machine.hostname.c_str());
  std::vector<char> all(static_cast<size_t>(kRecordBytes) * ctx.size);
  MPI_Gather(mine, kRecordBytes, MPI_CHAR, all.data(), kRecordBytes, MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> rank_lines;
  if (ctx.rank != 0) return rank_lines;
  const CommonOptions& options = *ctx.options;
  std::string header = FormatArgumentsLine(options);
  absl::StrAppend(&header, "#\n# mpi_allreduce_bench: MPI_Allreduce (", library_name, "), datatype ",
                  NcclTypeName(options.dtype), ", op ", ReduceOpName(options.op),
                  options.op == ReduceOp::kAvg ? " (MPI_SUM + local divide)" : "", ", transport ", transport,
                  ", world size ", ctx.size, "\n#\n# Using devices\n");
  for (int r = 0; r < ctx.size; ++r) {
    const std::string record(&all[static_cast<size_t>(r) * kRecordBytes]);
    std::vector<std::string> parts = absl::StrSplit(record, absl::MaxSplits(' ', 1));
    const std::string line = FormatRankLine(r, 0, std::atoll(parts[0].c_str()), parts.size() > 1 ? parts[1] : "?",
                                            absl::StrCat("[rank ", r, "] ", machine.cpu_model));
    rank_lines.push_back(line);
    absl::StrAppend(&header, line);
  }
  absl::StrAppend(&header, "#\n# Algorithm: native\n#\n", FormatColumnHeader());
  std::fputs(header.c_str(), stdout);
  std::fflush(stdout);
  return rank_lines;
}

// "mpi btl <OMPI_MCA_btl>": what carried the bytes.
std::string TransportName() {
  const char* btl = std::getenv("OMPI_MCA_btl");
  return btl != nullptr ? absl::StrCat("mpi btl ", btl) : "mpi btl default";
}

// The library's name, as MPI_Get_library_version gives it, to its first comma.
std::string LibraryName() {
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(library, &length);
  const std::string name(library, static_cast<size_t>(std::max(length, 0)));
  return std::string(absl::StripAsciiWhitespace(name.substr(0, name.find(','))));
}

// The buffers of the sweep.
struct Buffers {
  Tensor input;
  Tensor output;
  Tensor expected;  // only with --check
};

// One size: its check (with -c) and its two timed columns, agreed by every rank.
Row MeasureSize(const Context& ctx, const Buffers& buffers, size_t count, int* failed) {
  const CommonOptions& options = *ctx.options;
  Row row;
  row.count = count;
  row.bytes = count * DTypeSize(options.dtype);
  row.algorithm = "native";
  row.algorithm_used = "MPI_Allreduce";
  const int64_t n = static_cast<int64_t>(count);
  const Tensor in = *buffers.input.Narrow(0, 0, n);
  const Tensor out = *buffers.output.Narrow(0, 0, n);
  if (options.check) {
    const Tensor want = *buffers.expected.Narrow(0, 0, n);
    FillExpected(options.dtype, options.op, ctx.size, want.bytes());
    FillCheckInput(options.dtype, options.op, ctx.rank, in.bytes());
    FillSentinel(out.bytes());
    *failed |= AllReduce(ctx, &in, out) != MPI_SUCCESS;
    int64_t wrong[2];
    wrong[0] = CountMismatches(options.dtype, want.bytes(), out.bytes());
    FillCheckInput(options.dtype, options.op, ctx.rank, out.bytes());
    *failed |= AllReduce(ctx, nullptr, out) != MPI_SUCCESS;
    wrong[1] = CountMismatches(options.dtype, want.bytes(), out.bytes());
    MPI_Allreduce(MPI_IN_PLACE, wrong, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    row.out_of_place.wrong = wrong[0];
    row.in_place.wrong = wrong[1];
  }
  double times[2];
  times[0] = TimeColumn(ctx, &in, out, failed);
  times[1] = TimeColumn(ctx, nullptr, out, failed);
  MPI_Allreduce(MPI_IN_PLACE, times, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  row.out_of_place.time_us = times[0];
  row.in_place.time_us = times[1];
  return row;
}

// Rank 0's --json report; its error, if writing failed.
absl::Status WriteReport(const Context& ctx, const MachineInfo& machine, const std::string& transport,
                         const std::string& library_name, const std::vector<std::string>& rank_lines,
                         const std::vector<Row>& rows, double bus_factor, int64_t wrong_total, double avg_bus) {
  const CommonOptions& options = *ctx.options;
  JsonReport report;
  report.program = kProgram;
  report.machine = machine;
  report.transport = transport;
  report.world_size = ctx.size;
  report.rank_lines = ReportRankLines(rank_lines);
  report.arguments = {{"collective", JsonQuote("allreduce")}, {"library", JsonQuote(library_name)}};
  for (auto& argument : SweepArguments(options)) report.arguments.push_back(std::move(argument));
  report.arguments.push_back({"op", JsonQuote(ReduceOpName(options.op))});
  report.rows = rows;
  report.dtype = options.dtype;
  report.op = options.op;
  report.bus_factor = bus_factor;
  report.wrong_total = wrong_total;
  report.avg_bus_bandwidth = avg_bus;
  return WriteJsonReport(options.json_path, report);
}

// Parses the flags (every rank the same argv; rank 0 speaks for them): the
// MPI datatype, or the exit code (0 for --help, 2 for a bad flag).
absl::StatusOr<MPI_Datatype> ParseArguments(int argc, char** argv, int rank, CommonOptions* options, int* exit_code) {
  const std::vector<Flag> flags = CommonFlags(options);
  bool help = false;
  absl::Status parsed = ParseFlags(argc, argv, flags, &help);
  if (parsed.ok() && !help) parsed = ValidateCommon(*options);
  absl::StatusOr<MPI_Datatype> type = parsed.ok() ? MpiType(options->dtype) : absl::StatusOr<MPI_Datatype>(parsed);
  if (type.ok() && !help) return type;
  if (rank == 0 && help) std::fputs(Usage(kProgram, kSummary, flags).c_str(), stdout);
  if (rank == 0 && !help) std::fprintf(stderr, "%s: %s\n", kProgram, std::string(type.status().message()).c_str());
  *exit_code = help ? 0 : 2;
  return absl::CancelledError("no sweep");
}

int Main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Errors come back as codes, so a failure is reported here, not by an abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

  CommonOptions options;
  int exit_code = 0;
  absl::StatusOr<MPI_Datatype> type = ParseArguments(argc, argv, rank, &options, &exit_code);
  if (!type.ok()) {
    MPI_Finalize();
    return exit_code;
  }
  const Context ctx{&options, *type, MpiOp(options.op), rank, size};

  // Buffers: once, at the largest size, touched now.
  const std::vector<size_t> counts = SweepCounts(options);
  const size_t max_count = std::max<size_t>(*std::max_element(counts.begin(), counts.end()), 1);
  if (max_count > static_cast<size_t>(INT32_MAX)) {
    if (rank == 0) std::fprintf(stderr, "%s: -e/--maxbytes: over 2^31 elements (MPI counts are int)\n", kProgram);
    MPI_Finalize();
    return 2;
  }
  auto allocate = [&](bool needed) -> Tensor {
    if (!needed) return Tensor();
    absl::StatusOr<Tensor> t = Tensor::Empty({static_cast<int64_t>(max_count)}, options.dtype);
    if (!t.ok()) {
      std::fprintf(stderr, "%s: rank %d: %s\n", kProgram, rank, t.status().ToString().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::memset(t->data(), 0, t->nbytes());
    return *t;
  };
  const Buffers buffers{allocate(true), allocate(true), allocate(options.check != 0)};

  const MachineInfo machine = DescribeMachine();
  const std::string transport = TransportName();
  const std::string library_name = LibraryName();
  const std::vector<std::string> rank_lines = PrintHeader(ctx, machine, transport, library_name);

  const double bus_factor = AllReduceBusFactor(size);
  std::vector<Row> rows;
  int64_t wrong_total = 0;
  double bus_sum = 0;
  int bus_n = 0;
  int failed = 0;
  for (size_t count : counts) {
    const Row row = MeasureSize(ctx, buffers, count, &failed);
    if (options.check) wrong_total += row.out_of_place.wrong + row.in_place.wrong;
    AccumulateBusBandwidth(row, bus_factor, &bus_sum, &bus_n);
    if (rank == 0) {
      std::fputs(FormatRow(row, options.dtype, options.op, -1, bus_factor).c_str(), stdout);
      std::fflush(stdout);
    }
    rows.push_back(row);
  }
  const double avg_bus = bus_n > 0 ? bus_sum / bus_n : 0;
  int status = wrong_total != 0 ? 1 : 0;
  if (rank == 0) {
    std::fputs(FormatFooter(wrong_total, avg_bus).c_str(), stdout);
    std::fflush(stdout);
    if (!options.json_path.empty()) {
      const absl::Status written = WriteReport(ctx, machine, transport, library_name, rank_lines, rows, bus_factor,
                                               wrong_total, avg_bus);
      if (!written.ok()) {
        std::fprintf(stderr, "%s: %s\n", kProgram, std::string(written.message()).c_str());
        status = 1;
      }
    }
  }
  if (failed) {
    std::fprintf(stderr, "%s: rank %d: MPI_Allreduce returned an error\n", kProgram, rank);
    status = 1;
  }
  MPI_Finalize();
  return status;
}

}  // namespace
}  // namespace braid::bench

int main(int argc, char** argv) { return braid::bench::Main(argc, argv); }
