// braid_sim: braid's collectives at 8 to 65,536 ranks over a modelled
// cluster (sim/cluster.h), every rank running the Plan the communicator
// would run (sim/simulator.h). Prints, per rank count and size, each
// algorithm's time, the fastest, and what braid's selector picks; writes the
// cells as CSV (--csv, for sim/plot_sim.py) and the fastest as rows of the
// selector's table (--table, tuning/allreduce.txt's format).
//
//   braid_sim --cluster=sim/clusters/fat_tree.toml --ranks=8,64,512,4096
//             --sizes=8,64K,1M,64M,1G --algorithms=ring,tree,rhd,hierarchical
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "sim/cluster.h"
#include "sim/simulator.h"
#include "tensor/dtype.h"

namespace braid::sim {
namespace {

struct Cell {
  int ranks;
  uint64_t bytes;
  std::string algorithm;
  absl::StatusOr<SimResult> result;
};

bool ParseBytes(absl::string_view text, uint64_t& bytes) {
  uint64_t scale = 1;
  if (!text.empty()) {
    const char unit = text.back();
    if (unit == 'K' || unit == 'k') scale = uint64_t{1} << 10;
    if (unit == 'M' || unit == 'm') scale = uint64_t{1} << 20;
    if (unit == 'G' || unit == 'g') scale = uint64_t{1} << 30;
    if (scale != 1) text.remove_suffix(1);
  }
  if (!absl::SimpleAtoi(text, &bytes)) return false;
  bytes *= scale;
  return true;
}

bool ParseCollective(const std::string& name, CollectiveKind& kind) {
  static const std::map<std::string, CollectiveKind> kinds = {
      {"allreduce", CollectiveKind::kAllReduce}, {"reducescatter", CollectiveKind::kReduceScatter},
      {"allgather", CollectiveKind::kAllGather}, {"broadcast", CollectiveKind::kBroadcast},
      {"reduce", CollectiveKind::kReduce},       {"alltoall", CollectiveKind::kAllToAll},
      {"barrier", CollectiveKind::kBarrier}};
  auto it = kinds.find(name);
  if (it == kinds.end()) return false;
  kind = it->second;
  return true;
}

// nccl-tests' bus bandwidth factor: what each rank's link carries, over the buffer.
double BusFactor(CollectiveKind kind, int ranks) {
  if (ranks < 2) return 0;
  const double n = ranks;
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2 * (n - 1) / n;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll: return (n - 1) / n;
    default: return 1;
  }
}

// About how many messages the plans of `request.algorithm` send (to skip
// cells too large to simulate here before building them).
double EstimateMessages(int ranks, const SimRequest& request) {
  const double n = ranks;
  const double bytes = double(request.count) * DTypeSize(request.dtype);
  const double segments = std::max(1.0, bytes / double(request.segment_bytes));
  const double chunk_segments = std::max(1.0, bytes / n / double(request.segment_bytes));
  switch (request.algorithm) {
    case Algorithm::kRing: return n * 2 * (n - 1) * chunk_segments;
    case Algorithm::kOneShot: return n * (n - 1);
    case Algorithm::kPairwise: return n * (n - 1) * std::max(1.0, bytes / double(request.segment_bytes));
    case Algorithm::kTree:
    case Algorithm::kDoubleTree:
    case Algorithm::kChain: return n * 3 * segments;
    default: return n * 2 * (std::log2(n) + 1) * std::max(1.0, segments / n);
  }
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "braid_sim: %s\n", message.c_str());
  return 2;
}

}  // namespace
}  // namespace braid::sim

namespace braid::sim {
namespace {

struct Options {
  Cluster cluster;
  std::string cluster_name = "defaults";
  std::vector<int> ranks = {8, 64, 512, 4096};
  std::vector<uint64_t> sizes = {8, 64 << 10, 1 << 20, 64 << 20};
  std::vector<std::string> algorithms = {"ring", "tree", "double-tree", "rhd", "hierarchical", "auto"};
  std::string collective = "allreduce";
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DType dtype = DType::kF32;
  std::string csv;
  std::string table;
  double max_messages = 1.2e9;
};

template <typename T>
absl::Status ParseList(absl::string_view text, std::vector<T>& out, bool (*parse)(absl::string_view, T&)) {
  out.clear();
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T value;
    if (!parse(item, value)) return absl::InvalidArgumentError(std::string(item));
    out.push_back(value);
  }
  if (out.empty()) return absl::InvalidArgumentError("needs at least one value");
  return absl::OkStatus();
}

bool ParseRanks(absl::string_view text, int& ranks) { return absl::SimpleAtoi(text, &ranks) && ranks >= 1; }
bool ParseAlgorithmName(absl::string_view text, std::string& name) {
  name = std::string(text);
  return text == "auto" || ParseAlgorithm(text).ok();
}

std::vector<Flag> FlagsFor(Options& o) {
  return {
      {0, "cluster", "FILE", "the cluster (TOML; sim/cluster.h); default: the defaults there",
       [&o](absl::string_view v) -> absl::Status {
         absl::StatusOr<Cluster> cluster = ReadCluster(std::string(v));
         if (!cluster.ok()) return cluster.status();
         o.cluster = *cluster;
         o.cluster_name = std::string(v);
         return absl::OkStatus();
       }},
      {0, "ranks", "N,N,...", "rank counts (whole hosts of ranks_per_host); default 8,64,512,4096",
       [&o](absl::string_view v) { return ParseList(v, o.ranks, ParseRanks); }},
      {0, "sizes", "BYTES,...", "each rank's buffer, K/M/G suffixes; default 8,64K,1M,64M",
       [&o](absl::string_view v) { return ParseList(v, o.sizes, ParseBytes); }},
      {0, "algorithms", "NAME,...", "ring, tree, rhd, one-shot, hierarchical, ..., auto (the selector's choice)",
       [&o](absl::string_view v) { return ParseList(v, o.algorithms, ParseAlgorithmName); }},
      {0, "collective", "NAME", "allreduce (default), reducescatter, allgather, broadcast, reduce, alltoall, barrier",
       [&o](absl::string_view v) {
         o.collective = std::string(v);
         return ParseCollective(o.collective, o.kind) ? absl::OkStatus() : absl::InvalidArgumentError(o.collective);
       }},
      {0, "dtype", "NAME", "element type; default float",
       [&o](absl::string_view v) -> absl::Status {
         absl::StatusOr<DType> dtype = ParseDType(v);
         if (dtype.ok()) o.dtype = *dtype;
         return dtype.status();
       }},
      {0, "csv", "FILE", "every cell: ranks,bytes,algorithm,ran,seconds,busbw,messages,...",
       [&o](absl::string_view v) { return (o.csv = std::string(v), absl::OkStatus()); }},
      {0, "table", "FILE", "the fastest all-reduce per rank count as selector table rows",
       [&o](absl::string_view v) { return (o.table = std::string(v), absl::OkStatus()); }},
      {0, "max-messages", "N", "skip a cell whose plans would send more; default 1.2e9",
       [&o](absl::string_view v) {
         return absl::SimpleAtod(v, &o.max_messages) ? absl::OkStatus() : absl::InvalidArgumentError(std::string(v));
       }},
  };
}

SimRequest RequestFor(const Options& o, int ranks, uint64_t bytes, const std::string& algorithm) {
  SimRequest request;
  request.kind = o.kind;
  request.dtype = o.dtype;
  size_t count = std::max<uint64_t>(1, bytes / DTypeSize(o.dtype));
  // count as CollectiveArgs has it: per rank's block for these.
  if (o.kind == CollectiveKind::kReduceScatter || o.kind == CollectiveKind::kAllGather ||
      o.kind == CollectiveKind::kAllToAll) {
    count = std::max<size_t>(1, count / ranks);
  }
  request.count = count;
  request.algorithm = algorithm == "auto" ? Algorithm::kAuto : *ParseAlgorithm(algorithm);
  return request;
}

Cell RunCell(const Options& o, int ranks, uint64_t bytes, const std::string& algorithm) {
  Cell cell{ranks, bytes, algorithm, absl::UnknownError("")};
  SimRequest request = RequestFor(o, ranks, bytes, algorithm);
  if (request.algorithm == Algorithm::kAuto) {
    absl::StatusOr<Algorithm> chosen = Choose(o.cluster, ranks, request);
    if (chosen.ok()) request.algorithm = *chosen;
  }
  const double messages = EstimateMessages(ranks, request);
  if (messages > o.max_messages) {
    cell.result = absl::ResourceExhaustedError(absl::StrCat("skipped: about ", messages, " messages"));
    return cell;
  }
  cell.result = Simulate(o.cluster, ranks, request);
  return cell;
}

std::string Micros(double seconds) {
  if (seconds >= 1) return absl::StrFormat("%.3f s", seconds);
  if (seconds >= 1e-3) return absl::StrFormat("%.3f ms", seconds * 1e3);
  return absl::StrFormat("%.2f us", seconds * 1e6);
}

// One line per rank count and size: every algorithm's time, the fastest,
// the selector's choice and how far it is from the fastest.
void PrintRow(const Options& o, const std::vector<Cell>& row) {
  std::string line = absl::StrFormat("%7d %11d", row[0].ranks, row[0].bytes);
  double best = std::numeric_limits<double>::infinity();
  std::string best_name = "-";
  for (const Cell& c : row) {
    line += absl::StrFormat(" %12s", c.result.ok() ? Micros(c.result->seconds) : std::string("-"));
    if (c.result.ok() && c.algorithm != "auto" && c.result->seconds < best) {
      best = c.result->seconds;
      best_name = c.algorithm;
    }
  }
  SimRequest request = RequestFor(o, row[0].ranks, row[0].bytes, "auto");
  absl::StatusOr<Algorithm> chosen = Choose(o.cluster, row[0].ranks, request);
  std::string choice = chosen.ok() ? AlgorithmName(*chosen) : "-";
  for (const Cell& c : row) {
    if (c.algorithm == choice && c.result.ok()) choice += absl::StrFormat(" (%.2fx)", c.result->seconds / best);
  }
  std::printf("%s  %-12s %s\n", line.c_str(), best_name.c_str(), choice.c_str());
  for (const Cell& c : row) {
    if (!c.result.ok() && c.result.status().code() != absl::StatusCode::kResourceExhausted) {
      std::printf("#   %s: %s\n", c.algorithm.c_str(), std::string(c.result.status().message()).c_str());
    }
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace braid::sim

namespace braid::sim {
namespace {

absl::Status WriteCsv(const std::string& path, const Options& o, const std::vector<Cell>& cells) {
  std::ofstream out(path);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  out << "ranks,bytes,algorithm,ran,seconds,busbw_gbytes_per_s,messages,plan_ops,build_s,run_s\n";
  for (const Cell& c : cells) {
    if (!c.result.ok()) continue;
    const SimResult& r = *c.result;
    const double busbw = r.seconds > 0 ? c.bytes * BusFactor(o.kind, c.ranks) / r.seconds / 1e9 : 0;
    out << absl::StrFormat("%d,%d,%s,%s,%.9g,%.6g,%d,%d,%.3f,%.3f\n", c.ranks, c.bytes, c.algorithm,
                           AlgorithmName(r.algorithm), r.seconds, busbw, r.messages, r.ops, r.build_seconds,
                           r.run_seconds);
  }
  return out ? absl::OkStatus() : absl::DataLossError(absl::StrCat("writing ", path));
}

// The fastest algorithm per rank count, as the selector's table rows: each
// run of sizes with the same winner up to its largest size, the last
// unbounded (tuning/allreduce.txt).
absl::Status WriteTable(const std::string& path, const Options& o, const std::vector<Cell>& cells) {
  if (o.kind != CollectiveKind::kAllReduce) return absl::InvalidArgumentError("--table: all-reduce only");
  std::ofstream out(path);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  for (int ranks : o.ranks) {
    std::vector<std::pair<uint64_t, std::string>> winners;
    for (uint64_t bytes : o.sizes) {
      double best = std::numeric_limits<double>::infinity();
      std::string name;
      for (const Cell& c : cells) {
        if (c.ranks != ranks || c.bytes != bytes || c.algorithm == "auto" || !c.result.ok()) continue;
        if (c.result->seconds < best) best = c.result->seconds, name = c.algorithm;
      }
      if (name.empty()) continue;
      if (!winners.empty() && winners.back().second == name) winners.back().first = bytes;
      else winners.push_back({bytes, name});
    }
    out << "# " << o.cluster.transport << " n=" << ranks << ": braid_sim --cluster=" << o.cluster_name << "\n";
    for (size_t i = 0; i < winners.size(); ++i) {
      out << o.cluster.transport << " " << ranks << " " << (i + 1 == winners.size() ? 0 : winners[i].first) << " "
          << winners[i].second << "\n";
    }
  }
  return out ? absl::OkStatus() : absl::DataLossError(absl::StrCat("writing ", path));
}

int Main(int argc, char** argv) {
  Options o;
  const std::vector<Flag> flags = FlagsFor(o);
  bool help = false;
  if (absl::Status s = ParseFlags(argc, argv, flags, &help); !s.ok()) return Fail(std::string(s.message()));
  if (help) {
    std::printf("%s", Usage("braid_sim", "braid's collectives over a modelled cluster (sim/cluster.h)", flags).c_str());
    return 0;
  }
  std::printf("# braid_sim: %s over %s (%s, %d ranks per host, %d NIC(s) of %.1f GB/s)\n",
              o.collective.c_str(), o.cluster_name.c_str(), SwitchName(o.cluster.fabric),
              o.cluster.ranks_per_host, o.cluster.nics_per_host, o.cluster.nic_bandwidth / 1e9);
  std::printf("#  ranks       bytes %s  fastest      selector (its time / the fastest's)\n",
              absl::StrJoin(o.algorithms, "", [](std::string* out, const std::string& a) {
                absl::StrAppend(out, absl::StrFormat(" %12s", a));
              }).c_str());
  std::vector<Cell> cells;
  for (int ranks : o.ranks) {
    for (uint64_t bytes : o.sizes) {
      std::vector<Cell> row;
      for (const std::string& algorithm : o.algorithms) row.push_back(RunCell(o, ranks, bytes, algorithm));
      PrintRow(o, row);
      cells.insert(cells.end(), row.begin(), row.end());
    }
  }
  if (!o.csv.empty()) {
    if (absl::Status s = WriteCsv(o.csv, o, cells); !s.ok()) return Fail(std::string(s.message()));
  }
  if (!o.table.empty()) {
    if (absl::Status s = WriteTable(o.table, o, cells); !s.ok()) return Fail(std::string(s.message()));
  }
  return 0;
}

}  // namespace
}  // namespace braid::sim

int main(int argc, char** argv) { return braid::sim::Main(argc, argv); }
