// What braid_bench and mpi_allreduce_bench share, so that their output lines
// up row for row with each other and with nccl-tests: the nccl-tests flags
// (-b -e -f -i -n -w -c -d -o, short and long forms), the size sweep, the
// exact-check data and its reference, the table layout (header block, the
// two-level column header, rows, the "Out of bounds values" / "Avg bus
// bandwidth" footer) and the --json report with a machine description.
//
// Everything here is single-threaded plain code; nothing blocks except the
// file writes in WriteJsonReport.
#ifndef BRAID_BENCH_BENCH_COMMON_H_
#define BRAID_BENCH_BENCH_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/flags.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid::bench {

// ---------------------------------------------------------------------------
// Flag values (the parser, Flag and ParseFlags, is base/flags.h).

// "8", "64K", "64M", "1G", "4KiB", "512kb": K/M/G are powers of 1024 (as
// nccl-tests reads them).
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text);
// A non-negative integer in [lo, hi].
absl::StatusOr<int64_t> ParseInt(absl::string_view text, int64_t lo, int64_t hi);

// The flags both benchmarks take, as nccl-tests spells them.
struct CommonOptions {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = uint64_t{64} << 20;
  int64_t step_factor = 2;
  uint64_t step_bytes = 0;  // > 0: add this instead of multiplying (-i)
  bool step_factor_given = false;
  int iters = 20;
  int warmup_iters = 5;
  int check = 1;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  std::string json_path;
};

// -b -e -f -i -n -w -c -d -o --json, writing into *options (which must
// outlive the returned flags).
std::vector<Flag> CommonFlags(CommonOptions* options);
// Cross-flag checks after parsing (-b <= -e, -f and -i not both, ...).
absl::Status ValidateCommon(const CommonOptions& options);

// Element counts of the sweep, smallest first: size = min_bytes, then
// size * step_factor (or + step_bytes) while size <= max_bytes; each size is
// rounded down to whole elements (count = size / element size).
std::vector<size_t> SweepCounts(const CommonOptions& options);

// nccl-tests' names: float, double, half, bfloat16, int8, uint8, int32, int64.
const char* NcclTypeName(DType dtype);

// ---------------------------------------------------------------------------
// Exact-check data. Every rank fills its input with values distinct per rank
// and element, chosen so that the reduced result is exact in every dtype
// whatever the order of combination:
//   floating types, sum/avg/min/max: ((rank*7 + i*3) % 17) - 8, small
//     integers whose partial sums stay exact (up to 32 ranks in bfloat16);
//   floating types, prod: one of {1, 2, 0.5, -1}, so products are powers of
//     two (exact up to 14 ranks in float16);
//   integer types: full-range pseudo-random values; sum and prod wrap (two's
//     complement arithmetic is associative and commutative mod 2^k).
// avg is the sum divided once by the number of ranks, as the collectives do
// it (in float for float16/bfloat16; truncation toward zero for integers).

// Fills `data` (count elements of `dtype`) with rank `rank`'s input, the
// elements numbered from `first` (a reduce-scatter's block r starts at r * count).
void FillCheckInput(DType dtype, ReduceOp op, int rank, absl::Span<std::byte> data, size_t first = 0);
// Fills `data` with the expected all-reduce result over `world_size` ranks,
// elements `first` onwards.
void FillExpected(DType dtype, ReduceOp op, int world_size, absl::Span<std::byte> data, size_t first = 0);
// For the collectives that only move data (all-gather, broadcast, all-to-all,
// send/recv): element `first + i` of rank `rank`'s data gets a hash of (rank,
// index) as raw bits, distinct per rank and element, so a block that lands in
// the wrong place or from the wrong rank is caught. Compared bitwise.
void FillPattern(DType dtype, int rank, absl::Span<std::byte> data, size_t first = 0);
// A pattern no correct result has in the floating types (all bits set: NaN),
// written over an output before the collective so a no-op cannot pass.
void FillSentinel(absl::Span<std::byte> data);
// How many elements of `actual` differ (bitwise) from `expected`.
int64_t CountMismatches(DType dtype, absl::Span<const std::byte> expected, absl::Span<const std::byte> actual);

// ---------------------------------------------------------------------------
// The table.

// One timed column: the average time of one iteration (max over ranks).
struct Measurement {
  double time_us = 0;  // < 0: not run (nccl-tests' in-place all-to-all / send-recv); printed N/A
  int64_t wrong = -1;  // mismatching elements summed over ranks; < 0: not checked (N/A)
};

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  Measurement out_of_place;
  Measurement in_place;
  std::string algorithm;       // the section's algorithm ("" for the MPI baseline)
  std::string algorithm_used;  // what auto resolved to at this size
};

// algbw in GB/s (1e9 bytes/s); 0 for a zero time.
double AlgBandwidth(size_t bytes, double time_us);
// nccl-tests' bus-bandwidth factor for all-reduce: 2(n-1)/n.
double AllReduceBusFactor(int world_size);

// The collectives nccl-tests measures (one *_perf binary each), as braid_bench -C names them.
enum class Collective { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll, kSendRecv };
// "allreduce", "reducescatter", ... (nccl-tests' binary names without "_perf" and "_").
const char* CollectiveName(Collective collective);
// Accepts those names, nccl-tests' spellings (all_reduce, reduce_scatter,
// all_gather, alltoall) and dashes for underscores.
absl::StatusOr<Collective> ParseCollective(absl::string_view name);
// Element counts of one size step, as nccl-tests' <coll>GetCollByteCount
// gives them for `count` = size / element size: what each rank sends, what it
// receives, and the count passed to the call (the table's count column). The
// table's size column is max(send, recv) * element size.
struct CollectiveCounts {
  size_t send = 0;
  size_t recv = 0;
  size_t param = 0;
};
CollectiveCounts CountsFor(Collective collective, size_t count, int world_size);
// nccl-tests' bus-bandwidth factor (src/<coll>.cu, doc/PERFORMANCE.md):
// all-reduce 2(n-1)/n; reduce-scatter, all-gather, all-to-all (n-1)/n;
// broadcast, reduce, send/recv 1. algbw is size / time in every case.
double BusFactor(Collective collective, int world_size);
// Whether the collective reduces (prints -o's op; the others print "none",
// except send/recv, which prints the op as nccl-tests does) and takes a root.
bool CollectiveReduces(Collective collective);
bool CollectiveHasRoot(Collective collective);

// "# nThread 1 nGpus 1 minBytes ... validation: 1 graph: 0\n".
std::string FormatArgumentsLine(const CommonOptions& options);
// "#  Rank  0 Group  0 Pid  12345 on   hostname device cpu <details>\n"; details
// are what nccl-tests puts after the device number ("[local 0] <cpu model>").
std::string FormatRankLine(int rank, int group, int64_t pid, absl::string_view host,
                           absl::string_view details);
// The three header lines: out-of-place / in-place, names, units.
std::string FormatColumnHeader();
std::string FormatRow(const Row& row, DType dtype, ReduceOp op, int root, double bus_factor);
// The same with the redop column given as text ("none" for the collectives that do not reduce).
std::string FormatRow(const Row& row, DType dtype, absl::string_view redop, int root, double bus_factor);
// The busbw of both columns, as nccl-tests averages them in its footer.
void AccumulateBusBandwidth(const Row& row, double bus_factor, double* sum, int* n);
// "# Out of bounds values : N OK|FAILED\n# Avg bus bandwidth    : X \n#\n".
std::string FormatFooter(int64_t wrong_total, double avg_bus_bandwidth);

// ---------------------------------------------------------------------------
// The machine and the --json report.

struct MachineInfo {
  std::string hostname;
  int nproc = 0;
  std::string cpu_model;
  std::string date;  // RFC 3339, UTC
};
MachineInfo DescribeMachine();

// A JSON string literal for `text`, quoted and escaped.
std::string JsonQuote(absl::string_view text);

struct JsonReport {
  std::string program;
  std::string collective = "allreduce";
  std::string redop;  // empty: ReduceOpName(op)
  int root = -1;
  MachineInfo machine;
  std::string transport;
  int world_size = 0;
  std::vector<std::string> rank_lines;  // the "#  Rank" lines, without the '#'
  // Raw JSON values by key ("\"float\"", "20", ...), in order.
  std::vector<std::pair<std::string, std::string>> arguments;
  std::vector<Row> rows;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  double bus_factor = 1;
  int64_t wrong_total = 0;
  double avg_bus_bandwidth = 0;
};
// The sweep's arguments as the report records them, in order: minbytes,
// maxbytes, stepfactor, stepbytes, iters, warmup_iters, check, datatype.
std::vector<std::pair<std::string, std::string>> SweepArguments(const CommonOptions& o);
// The "#  Rank" lines as the report keeps them: without the '#'.
std::vector<std::string> ReportRankLines(const std::vector<std::string>& lines);
// Writes `report` to `path` (replacing it). Blocks on the file system.
absl::Status WriteJsonReport(const std::string& path, const JsonReport& report);

}  // namespace braid::bench

#endif  // BRAID_BENCH_BENCH_COMMON_H_
