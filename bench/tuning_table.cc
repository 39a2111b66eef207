#include "bench/tuning_table.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace braid::bench {
namespace {

constexpr char kPreamble[] =
    "# braid's all-reduce selection table: data, compiled into the selector (a genrule of\n"
    "# //collectives turns each row into C++). A row: transport, world size, up to this many\n"
    "# bytes (0: no bound), algorithm; the first row of the communicator's transport and world\n"
    "# size whose bound holds wins. No row for a transport and world size: direct where ranks\n"
    "# share windows (shm), else rhd up to 64 KiB and ring above. \"direct\" resolves as\n"
    "# collectives/selection.h says (peer-access or window over shm, one-shot elsewhere).\n"
    "# BRAID_ALGO and a call's algorithm override it. Written by braid_bench --tune\n"
    "# (bench/tune.sh): rerun it on the machine you deploy on rather than editing by hand.\n";

}  // namespace

std::vector<TuningRange> RangesFromPoints(std::vector<TuningPoint> points) {
  std::sort(points.begin(), points.end(), [](const TuningPoint& a, const TuningPoint& b) { return a.bytes < b.bytes; });
  for (size_t i = 1; i + 1 < points.size(); ++i) {
    if (points[i - 1].algorithm == points[i + 1].algorithm) points[i].algorithm = points[i - 1].algorithm;
  }
  std::vector<TuningRange> ranges;
  for (const TuningPoint& point : points) {
    if (!ranges.empty() && ranges.back().algorithm == point.algorithm) {
      ranges.back().max_bytes = point.bytes;
    } else {
      ranges.push_back({point.bytes, point.algorithm});
    }
  }
  if (!ranges.empty()) ranges.back().max_bytes = 0;
  return ranges;
}

absl::StatusOr<std::vector<TuningGroup>> ParseTuningTable(const std::string& text) {
  std::vector<TuningGroup> groups;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    auto bad = [&] {
      return absl::InvalidArgumentError(absl::StrCat("tuning table line ", line_number, ": cannot read \"", line, "\""));
    };
    if (line.empty()) continue;
    if (absl::ConsumePrefix(&line, "#")) {
      // "# <transport> n=<N>: <origin>" opens a group; other comments are the preamble.
      line = absl::StripLeadingAsciiWhitespace(line);
      const size_t colon = line.find(": ");
      std::vector<absl::string_view> words = absl::StrSplit(line.substr(0, colon), ' ');
      int n = 0;
      if (colon == absl::string_view::npos || words.size() != 2 || !absl::StartsWith(words[1], "n=") ||
          !absl::SimpleAtoi(words[1].substr(2), &n)) {
        continue;
      }
      groups.push_back({std::string(words[0]), n, std::string(line.substr(colon + 2)), {}});
      continue;
    }
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    TuningRange range;
    int n = 0;
    if (fields.size() != 4 || !absl::SimpleAtoi(fields[1], &n) || !absl::SimpleAtoi(fields[2], &range.max_bytes)) {
      return bad();
    }
    const std::string transport(fields[0]);
    range.algorithm = std::string(fields[3]);
    if (groups.empty() || groups.back().transport != transport || groups.back().world_size != n) {
      groups.push_back({transport, n, "", {}});
    }
    groups.back().ranges.push_back(range);
  }
  return groups;
}

std::string FormatTuningTable(std::vector<TuningGroup> groups) {
  std::sort(groups.begin(), groups.end(), [](const TuningGroup& a, const TuningGroup& b) {
    return std::tie(a.transport, a.world_size) < std::tie(b.transport, b.world_size);
  });
  std::string out = kPreamble;
  for (const TuningGroup& group : groups) {
    absl::StrAppend(&out, "# ", group.transport, " n=", group.world_size, ": ", group.origin, "\n");
    for (const TuningRange& range : group.ranges) {
      absl::StrAppend(&out, group.transport, " ", group.world_size, " ", range.max_bytes, " ", range.algorithm, "\n");
    }
  }
  return out;
}

absl::Status MergeTuningFile(const std::string& path, const std::string& transport, int world_size,
                             std::vector<TuningRange> ranges, const std::string& origin) {
  std::string text;
  {
    std::ifstream in(path);
    if (in) {
      std::stringstream buffer;
      buffer << in.rdbuf();
      text = buffer.str();
    }
  }
  absl::StatusOr<std::vector<TuningGroup>> groups = ParseTuningTable(text);
  if (!groups.ok()) return absl::InvalidArgumentError(absl::StrCat("--tune ", path, ": ", groups.status().message()));
  groups->erase(std::remove_if(groups->begin(), groups->end(),
                               [&](const TuningGroup& g) { return g.transport == transport && g.world_size == world_size; }),
                groups->end());
  groups->push_back({transport, world_size, origin, std::move(ranges)});
  const std::string out = FormatTuningTable(*std::move(groups));
  const std::string temp = path + ".tmp";
  std::FILE* file = std::fopen(temp.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--tune: cannot open ", temp, ": ", std::strerror(errno)));
  }
  const bool written = std::fwrite(out.data(), 1, out.size(), file) == out.size();
  if (std::fclose(file) != 0 || !written || std::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("--tune: writing ", path, " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace braid::bench
