// The bench harness's output (bench_common.h): nccl-tests' table, the
// machine's description and the --json report.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/socket.h"
#include "bench/bench_common.h"

namespace braid::bench {
namespace {

std::string TimeString(double time_us) {
  if (time_us >= 10000.0) return absl::StrFormat("%7.0f", time_us);
  if (time_us >= 100.0) return absl::StrFormat("%7.1f", time_us);
  return absl::StrFormat("%7.2f", time_us);
}

std::string FormatColumn(const Row& row, const Measurement& m, double bus_factor) {
  if (m.time_us < 0) return absl::StrFormat("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
  const double algbw = AlgBandwidth(row.bytes, m.time_us);
  const std::string wrong = m.wrong < 0 ? std::string("N/A") : absl::StrCat(m.wrong);
  return absl::StrFormat("  %7s  %6.2f  %6.2f  %5s", TimeString(m.time_us), algbw, algbw * bus_factor, wrong);
}

std::string JsonNumber(double value) {
  if (!(value == value) || value == std::numeric_limits<double>::infinity()) return "null";
  return absl::StrFormat("%.6g", value);
}

std::string JsonMeasurement(const Row& row, const Measurement& m, double bus_factor) {
  if (m.time_us < 0) return "null";
  const double algbw = AlgBandwidth(row.bytes, m.time_us);
  return absl::StrCat("{\"time_us\": ", JsonNumber(m.time_us), ", \"algbw_gbps\": ", JsonNumber(algbw),
                      ", \"busbw_gbps\": ", JsonNumber(algbw * bus_factor),
                      ", \"wrong\": ", m.wrong < 0 ? std::string("null") : absl::StrCat(m.wrong), "}");
}

}  // namespace

std::string FormatArgumentsLine(const CommonOptions& o) {
  const std::string step = o.step_bytes > 0 ? absl::StrCat(o.step_bytes, "(bytes)") : absl::StrCat(o.step_factor, "(factor)");
  return absl::StrFormat(
      "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d agg iters: 1 validation: %d "
      "graph: 0\n",
      o.min_bytes, o.max_bytes, step, o.warmup_iters, o.iters, o.check);
}

std::string FormatRankLine(int rank, int group, int64_t pid, absl::string_view host, absl::string_view details) {
  return absl::StrFormat("#  Rank %2d Group %2d Pid %6d on %10s device cpu %s\n", rank, group, pid, host, details);
}

std::string FormatColumnHeader() {
  std::string out = absl::StrFormat("#%74s%31s%10s\n", "out-of-place", "in-place", "");
  absl::StrAppend(&out, absl::StrFormat("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
                                        "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                                        "algbw", "busbw", "#wrong"));
  absl::StrAppend(&out, absl::StrFormat("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "(B)",
                                        "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                                        "(GB/s)", ""));
  return out;
}

std::string FormatRow(const Row& row, DType dtype, ReduceOp op, int root, double bus_factor) {
  return FormatRow(row, dtype, ReduceOpName(op), root, bus_factor);
}

std::string FormatRow(const Row& row, DType dtype, absl::string_view redop, int root, double bus_factor) {
  return absl::StrCat(absl::StrFormat("%12d  %12d  %8s  %6s  %6d", row.bytes, row.count, NcclTypeName(dtype), redop,
                                      root),
                      FormatColumn(row, row.out_of_place, bus_factor), FormatColumn(row, row.in_place, bus_factor),
                      "\n");
}

void AccumulateBusBandwidth(const Row& row, double bus_factor, double* sum, int* n) {
  for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
    if (m->time_us < 0) continue;  // not run
    *sum += AlgBandwidth(row.bytes, m->time_us) * bus_factor;
    *n += 1;
  }
}

std::string FormatFooter(int64_t wrong_total, double avg_bus_bandwidth) {
  return absl::StrFormat("# Out of bounds values : %d %s\n# Avg bus bandwidth    : %g \n#\n", wrong_total,
                         wrong_total == 0 ? "OK" : "FAILED", avg_bus_bandwidth);
}

MachineInfo DescribeMachine() {
  MachineInfo info;
  info.hostname = HostName();
  info.nproc = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) info.cpu_model = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      break;
    }
  }
  if (info.cpu_model.empty()) info.cpu_model = "unknown";
  info.date = absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  return info;
}

std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&out, absl::StrFormat("\\u%04x", static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

std::vector<std::pair<std::string, std::string>> SweepArguments(const CommonOptions& o) {
  return {
      {"minbytes", absl::StrCat(o.min_bytes)},
      {"maxbytes", absl::StrCat(o.max_bytes)},
      {"stepfactor", o.step_bytes > 0 ? std::string("null") : absl::StrCat(o.step_factor)},
      {"stepbytes", o.step_bytes > 0 ? absl::StrCat(o.step_bytes) : std::string("null")},
      {"iters", absl::StrCat(o.iters)},
      {"warmup_iters", absl::StrCat(o.warmup_iters)},
      {"check", absl::StrCat(o.check)},
      {"datatype", JsonQuote(NcclTypeName(o.dtype))},
  };
}

std::vector<std::string> ReportRankLines(const std::vector<std::string>& lines) {
  std::vector<std::string> kept;
  for (const std::string& line : lines) {
    kept.push_back(std::string(absl::StripAsciiWhitespace(absl::StripPrefix(line, "#"))));
  }
  return kept;
}

absl::Status WriteJsonReport(const std::string& path, const JsonReport& r) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"program\": ", JsonQuote(r.program), ",\n");
  absl::StrAppend(&out, "  \"collective\": ", JsonQuote(r.collective), ",\n");
  absl::StrAppend(&out, "  \"bus_factor\": ", JsonNumber(r.bus_factor), ",\n");
  absl::StrAppend(&out, "  \"machine\": {\"hostname\": ", JsonQuote(r.machine.hostname), ", \"nproc\": ", r.machine.nproc,
                  ", \"cpu_model\": ", JsonQuote(r.machine.cpu_model), ", \"date\": ", JsonQuote(r.machine.date),
                  ", \"transport\": ", JsonQuote(r.transport), ", \"world_size\": ", r.world_size, "},\n");
  std::vector<std::string> ranks;
  for (const std::string& line : r.rank_lines) ranks.push_back(JsonQuote(line));
  absl::StrAppend(&out, "  \"ranks\": [", absl::StrJoin(ranks, ", "), "],\n");
  std::vector<std::string> args;
  for (const auto& [key, value] : r.arguments) args.push_back(absl::StrCat(JsonQuote(key), ": ", value));
  absl::StrAppend(&out, "  \"arguments\": {", absl::StrJoin(args, ", "), "},\n");
  absl::StrAppend(&out, "  \"rows\": [\n");
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const Row& row = r.rows[i];
    absl::StrAppend(&out, "    {\"algorithm\": ", JsonQuote(row.algorithm), ", \"algorithm_used\": ",
                    JsonQuote(row.algorithm_used), ", \"size\": ", row.bytes, ", \"count\": ", row.count,
                    ", \"type\": ", JsonQuote(NcclTypeName(r.dtype)), ", \"redop\": ",
                    JsonQuote(r.redop.empty() ? std::string(ReduceOpName(r.op)) : r.redop), ", \"root\": ", r.root,
                    ", \"out_of_place\": ", JsonMeasurement(row, row.out_of_place, r.bus_factor),
                    ", \"in_place\": ", JsonMeasurement(row, row.in_place, r.bus_factor), "}",
                    i + 1 < r.rows.size() ? ",\n" : "\n");
  }
  absl::StrAppend(&out, "  ],\n");
  absl::StrAppend(&out, "  \"out_of_bounds_values\": ", r.wrong_total, ",\n");
  absl::StrAppend(&out, "  \"avg_bus_bandwidth_gbps\": ", JsonNumber(r.avg_bus_bandwidth), "\n}\n");
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--json: cannot open ", path, ": ", std::strerror(errno)));
  }
  const bool written = std::fwrite(out.data(), 1, out.size(), file) == out.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) return absl::UnavailableError(absl::StrCat("--json: writing ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace braid::bench
