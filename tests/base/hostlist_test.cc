// Tests of base/hostlist.h: Slurm's node lists and task counts as Slurm writes
// them, every malformed form, and round trips of many generated lists (a list
// drawn as structure, written in Slurm's notation, expanded back; and hosts
// compressed the way `scontrol show hostlist` does, expanded back).
#include "base/hostlist.h"

#include <algorithm>
#include <cctype>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

using Hosts = std::vector<std::string>;

Hosts Expand(const std::string& text) {
  absl::StatusOr<Hosts> hosts = ExpandHostlist(text);
  INFO(text << ": " << hosts.status().ToString());
  REQUIRE(hosts.ok());
  return *hosts;
}

TEST_CASE("ExpandHostlist: the forms Slurm writes", "[base][hostlist]") {
  CHECK(Expand("vm") == Hosts{"vm"});
  CHECK(Expand("a,b,c") == Hosts{"a", "b", "c"});
  CHECK(Expand("node[01-04,07],gpu-a[1-2]") ==
        Hosts{"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"});
  CHECK(Expand("node[08-11]") == Hosts{"node08", "node09", "node10", "node11"});
  CHECK(Expand("node[8-11]") == Hosts{"node8", "node9", "node10", "node11"});
  CHECK(Expand("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(Expand("n[7]") == Hosts{"n7"});
  CHECK(Expand("n[007]") == Hosts{"n007"});
  CHECK(Expand("n[3,1,2]") == Hosts{"n3", "n1", "n2"});  // Slurm's order, not sorted
  CHECK(Expand("rack[1-2]-n[1-2]") == Hosts{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(Expand("[1-3]") == Hosts{"1", "2", "3"});
  CHECK(Expand("n[1-2]-ib") == Hosts{"n1-ib", "n2-ib"});
  CHECK(Expand("a[0-1]b[5]c[08-09]d") == Hosts{"a0b5c08d", "a0b5c09d", "a1b5c08d", "a1b5c09d"});
  CHECK(Expand("x.example.com,n[1-2].example.com") == Hosts{"x.example.com", "n1.example.com", "n2.example.com"});
  CHECK(Expand("n[1-1]") == Hosts{"n1"});
  CHECK(Expand("n[0-0]") == Hosts{"n0"});
  CHECK(Expand("n1,n1") == Hosts{"n1", "n1"});  // as written: Slurm's lists may repeat
}

TEST_CASE("ExpandHostlist: malformed text is kInvalidArgument naming it", "[base][hostlist]") {
  const auto [text, why] = GENERATE(table<std::string, std::string>({
      {"", "empty"},
      {"n[1-3", "'[' without ']'"},
      {"n1-3]", "']' without '['"},
      {"n]1[", "']' without '['"},
      {"n[[1]]", "nest"},
      {"n[5-3]", "backwards"},
      {"n[]", "comma list"},
      {"n[1-]", "comma list"},
      {"n[-1]", "comma list"},
      {"n[1,]", "comma list"},
      {"n[,1]", "comma list"},
      {"n[1--2]", "comma list"},
      {"n[a-b]", "comma list"},
      {"n[1-2-3]", "comma list"},
      {"n[ 1]", "whitespace"},
      {"a, b", "whitespace"},
      {"a b", "whitespace"},
      {"a\n", "whitespace"},
      {"a,,b", "empty host name"},
      {",a", "empty host name"},
      {"a,", "empty host name"},
      {"n[0-99999999999999999999]", "comma list"},  // more digits than any node list needs
      {"n[0-9999999]", "more than"},
      {"a[0-999]b[0-999]c[0-9]", "more than"},
  }));
  absl::StatusOr<Hosts> hosts = ExpandHostlist(text);
  INFO(text << " -> " << hosts.status().ToString());
  REQUIRE(hosts.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(hosts.status().message(), absl::StrCat("\"", text, "\"")));
  CHECK(absl::StrContains(hosts.status().message(), why));
}

// A list drawn as structure: items of literal parts and bracket groups.
struct Range {
  int64_t lo, hi;
  int width;
};
struct Part {
  std::string literal;         // or, when empty, a bracket group:
  std::vector<Range> ranges;
};

std::string Number(int64_t n, int width) { return absl::StrFormat("%0*d", width, n); }

std::string Write(const std::vector<std::vector<Part>>& items) {
  std::vector<std::string> written;
  for (const auto& item : items) {
    std::string text;
    for (const Part& part : item) {
      if (!part.literal.empty()) {
        text += part.literal;
        continue;
      }
      std::vector<std::string> ranges;
      for (const Range& r : part.ranges) {
        ranges.push_back(r.lo == r.hi ? Number(r.lo, r.width)
                                      : absl::StrCat(Number(r.lo, r.width), "-", Number(r.hi, r.width)));
      }
      text += absl::StrCat("[", absl::StrJoin(ranges, ","), "]");
    }
    written.push_back(text);
  }
  return absl::StrJoin(written, ",");
}

Hosts Enumerate(const std::vector<std::vector<Part>>& items) {
  Hosts all;
  for (const auto& item : items) {
    Hosts names = {""};
    for (const Part& part : item) {
      Hosts next;
      for (const std::string& name : names) {
        if (!part.literal.empty()) {
          next.push_back(name + part.literal);
          continue;
        }
        for (const Range& r : part.ranges) {
          for (int64_t n = r.lo; n <= r.hi; ++n) next.push_back(name + Number(n, r.width));
        }
      }
      names = next;
    }
    all.insert(all.end(), names.begin(), names.end());
  }
  return all;
}

TEST_CASE("ExpandHostlist: round trips of generated lists", "[base][hostlist]") {
  std::mt19937 rng(20240518);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::string> literals = {"node", "gpu-a", "n", "rack", "-n", "c", ".ib", "x-", "login"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::vector<Part>> items(static_cast<size_t>(pick(1, 4)));
    for (auto& item : items) {
      const int groups = pick(0, 3);
      item.push_back({literals[static_cast<size_t>(pick(0, static_cast<int>(literals.size()) - 1))], {}});
      for (int g = 0; g < groups; ++g) {
        Part bracket;
        for (int r = pick(1, 3); r > 0; --r) {
          const int width = pick(1, 4);
          const int64_t lo = pick(0, 120);
          const int64_t hi = lo + pick(0, 12);
          bracket.ranges.push_back({lo, hi, width});
        }
        item.push_back(bracket);
        if (pick(0, 1) == 1) item.push_back({literals[static_cast<size_t>(pick(0, 3))], {}});
      }
    }
    const std::string text = Write(items);
    INFO(text);
    CHECK(Expand(text) == Enumerate(items));
  }
}

// hosts -> Slurm's notation, runs of consecutive numbers (same prefix, same
// width) folded into ranges, as `scontrol show hostlist` prints it.
std::string Compress(const Hosts& hosts) {
  std::vector<std::string> items;
  size_t i = 0;
  while (i < hosts.size()) {
    const std::string& host = hosts[i];
    size_t digits = host.size();
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(host[digits - 1]))) --digits;
    if (digits == host.size()) {
      items.push_back(host);
      ++i;
      continue;
    }
    const std::string prefix = host.substr(0, digits);
    const size_t width = host.size() - digits;
    std::vector<std::string> ranges;
    while (i < hosts.size() && absl::StartsWith(hosts[i], prefix) && hosts[i].size() == prefix.size() + width &&
           std::all_of(hosts[i].begin() + static_cast<long>(prefix.size()), hosts[i].end(),
                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      const int64_t lo = std::stoll(hosts[i].substr(prefix.size()));
      int64_t hi = lo;
      while (i + 1 < hosts.size() && hosts[i + 1] == prefix + Number(hi + 1, static_cast<int>(width))) {
        ++hi;
        ++i;
      }
      ++i;
      ranges.push_back(lo == hi ? Number(lo, static_cast<int>(width))
                                : absl::StrCat(Number(lo, static_cast<int>(width)), "-",
                                               Number(hi, static_cast<int>(width))));
    }
    items.push_back(absl::StrCat(prefix, "[", absl::StrJoin(ranges, ","), "]"));
  }
  return absl::StrJoin(items, ",");
}

TEST_CASE("ExpandHostlist: compressed host sets expand back to themselves", "[base][hostlist]") {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 2000; ++trial) {
    Hosts hosts;
    for (int run = pick(1, 5); run > 0; --run) {
      const std::string prefix = std::vector<std::string>{"node", "gpu", "r1-n", "login"}[static_cast<size_t>(pick(0, 3))];
      const int width = pick(1, 3);
      int64_t n = pick(width == 1 ? 1 : 0, 50);
      for (int k = pick(1, 10); k > 0; --k) {
        hosts.push_back(prefix + Number(n, width));
        n += pick(1, 3);  // gaps split ranges
      }
    }
    const std::string text = Compress(hosts);
    INFO(text);
    CHECK(Expand(text) == hosts);
  }
  CHECK(Compress({"node01", "node02", "node03", "node04", "node07"}) == "node[01-04,07]");
}

TEST_CASE("ExpandTaskCounts: Slurm's N(xK) lists", "[base][hostlist]") {
  CHECK(*ExpandTaskCounts("4") == std::vector<int>{4});
  CHECK(*ExpandTaskCounts("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(*ExpandTaskCounts("1,2(x2),3(x1)") == std::vector<int>{1, 2, 2, 3});
  for (const std::string bad : {"", "x", "2(x)", "2(x0)", "2(3)", "2(x3", "(x3)", "2,,1", "-1", "2(x3)1", "2 (x3)"}) {
    absl::StatusOr<std::vector<int>> counts = ExpandTaskCounts(bad);
    INFO(bad);
    CHECK(counts.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(counts.status().message(), absl::StrCat("\"", bad, "\"")));
  }
}

}  // namespace
}  // namespace braid
