// braid_bench as users run it: every collective (-C) under braidrun over shm
// and tcp and under a real mpirun over the mpi transport, at 2 and 3 ranks,
// with the exact check on (-c 1): the table must report 0 wrong values on
// every row and the nccl-tests footer; sizes, counts and bus-bandwidth
// factors follow nccl-tests; --json holds every row; --tune writes a
// selection table the communicator can read. Timing is never asserted.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/tuning_table.h"
#include "catch2/catch.hpp"
#include "tests/harness/mpi_env.h"
#include "tests/harness/subprocess.h"

namespace braid {
namespace {

const absl::Duration kTimeout = absl::Seconds(90);

// The worker contract must come from braidrun or mpirun, never from the test's environment.
const std::vector<std::string> kUnset = {
    "RANK",          "WORLD_SIZE",       "LOCAL_RANK",         "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "MASTER_ADDR",   "MASTER_PORT",      "BRAID_STORE_ADDR",   "BRAID_STORE_PREFIX", "BRAID_TRANSPORT",
    "BRAID_ALGO",    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "BRAID_JOB_SECRET", "BRAID_TIMELINE"};

const std::vector<std::string> kCollectives = {"allreduce", "reducescatter", "allgather", "broadcast",
                                               "reduce",    "alltoall",      "sendrecv"};

// One table row's fields (13: size count type redop root, then 4 per column).
std::vector<std::vector<std::string>> Rows(const std::string& out, const std::string& prefix) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix)) continue;
    if (line.empty() || line[0] == '#') continue;
    rows.push_back(absl::StrSplit(line, ' ', absl::SkipEmpty()));
  }
  return rows;
}

double Number(const std::string& text) {
  double value = 0;
  return absl::SimpleAtod(text, &value) ? value : -1;
}

// nccl-tests' factor for each collective at n ranks.
double ExpectedBusFactor(const std::string& collective, int n) {
  if (collective == "allreduce") return 2.0 * (n - 1) / n;
  if (collective == "reducescatter" || collective == "allgather" || collective == "alltoall") {
    return static_cast<double>(n - 1) / n;
  }
  return 1;
}

// Checks one run's table: the footer OK, every row's #wrong 0 (N/A only
// in-place for alltoall/sendrecv), nccl-tests' size/count relation, and
// busbw = algbw * factor.
void CheckTable(const std::string& out, const std::string& prefix, const std::string& collective, int n, int root) {
  CHECK(absl::StrContains(out, "# Out of bounds values : 0 OK"));
  CHECK(absl::StrContains(out, "# Avg bus bandwidth    : "));
  const std::vector<std::vector<std::string>> rows = Rows(out, prefix);
  REQUIRE(rows.size() >= 3);
  const bool no_in_place = collective == "alltoall" || collective == "sendrecv";
  const bool blocks = collective == "reducescatter" || collective == "allgather" || collective == "alltoall";
  for (const std::vector<std::string>& f : rows) {
    INFO(absl::StrJoin(f, " "));
    REQUIRE(f.size() == 13);
    const double size = Number(f[0]);
    const double count = Number(f[1]);
    CHECK(f[2] == "float");
    CHECK(size == (blocks ? count * 4 * n : count * 4));
    CHECK(f[3] == (collective == "allgather" || collective == "broadcast" || collective == "alltoall" ? "none" : "sum"));
    CHECK(Number(f[4]) == ((collective == "broadcast" || collective == "reduce") ? root : -1));
    CHECK(f[8] == "0");
    if (no_in_place) {
      CHECK(f[12] == "N/A");
    } else {
      CHECK(f[12] == "0");
    }
    const double algbw = Number(f[6]);
    const double busbw = Number(f[7]);
    // Printed with two decimals: compare within rounding.
    CHECK(std::fabs(busbw - algbw * ExpectedBusFactor(collective, n)) <= 0.011);
  }
}

const std::vector<std::string> kSweep = {"-c", "1", "-b", "8", "-e", "256K", "-f", "8", "-n", "2", "-w", "1"};

TEST_CASE("braid_bench: every collective under braidrun, shm and tcp, 2 and 3 ranks, 0 wrong", "[bench]") {
  const int n = GENERATE(2, 3);
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  for (const std::string& collective : kCollectives) {
    const std::string tag = absl::StrCat("braidrun_", collective, "_", transport, "_", n);
    std::vector<std::string> argv = {Runfile("launcher/braidrun"), "--standalone",
                                     absl::StrCat("--nproc-per-node=", n), "--local-ranks-filter=0",
                                     Runfile("bench/braid_bench"), "-C", collective, "-t", transport,
                                     "-r", absl::StrCat(n - 1)};
    argv.insert(argv.end(), kSweep.begin(), kSweep.end());
    const ProcessExit exit = RunProcess(argv, {{"BRAID_TIMEOUT_SEC", "60"}}, tag, kTimeout, kUnset);
    INFO(tag << ": exit " << exit.code << "\n--- stdout\n" << exit.out << "--- stderr\n" << exit.err);
    REQUIRE(exit.code == 0);
    CHECK(absl::StrContains(exit.out, absl::StrCat("collective ", collective)));
    CHECK(absl::StrContains(exit.out, absl::StrCat("transport ", transport)));
    CheckTable(exit.out, "[rank 0]: ", collective, n, n - 1);
  }
}

TEST_CASE("braid_bench: every collective under mpirun over the mpi transport, braid's and native, 0 wrong",
          "[bench][mpi]") {
  const int n = GENERATE(2, 3);
  for (const std::string& collective : kCollectives) {
    const std::string algorithms = collective == "sendrecv" ? "auto" : "auto,native";
    const std::string tag = absl::StrCat("mpirun_", collective, "_", n);
    std::vector<std::string> argv = {"/usr/bin/mpirun", "--oversubscribe", "-np", absl::StrCat(n),
                                     Runfile("bench/braid_bench"), "-C", collective, "-t", "mpi", "-a", algorithms,
                                     "-r", "1"};
    argv.insert(argv.end(), kSweep.begin(), kSweep.end());
    std::map<std::string, std::string> env = MpiJobEnv();
    env["BRAID_TIMEOUT_SEC"] = "60";
    const ProcessExit exit = RunProcess(argv, env, tag, kTimeout, kUnset);
    INFO(tag << ": exit " << exit.code << "\n--- stdout\n" << exit.out << "--- stderr\n" << exit.err);
    REQUIRE(exit.code == 0);
    CHECK(absl::StrContains(exit.out, "transport mpi"));
    CheckTable(exit.out, "", collective, n, 1);
    if (collective != "sendrecv") CHECK(absl::StrContains(exit.out, "# Algorithm: native"));
  }
}

TEST_CASE("braid_bench: --json has every row, the collective and the machine", "[bench]") {
  const std::string json = absl::StrCat(TestTempDir(), "/allgather.json");
  std::vector<std::string> argv = {Runfile("launcher/braidrun"), "--standalone", "--nproc-per-node=2",
                                   Runfile("bench/braid_bench"), "-C", "allgather", "--json", json};
  argv.insert(argv.end(), kSweep.begin(), kSweep.end());
  const ProcessExit exit = RunProcess(argv, {{"BRAID_TIMEOUT_SEC", "60"}}, "json", kTimeout, kUnset);
  INFO(exit.out << exit.err);
  REQUIRE(exit.code == 0);
  const std::string text = ReadFile(json);
  CHECK(absl::StrContains(text, "\"collective\": \"allgather\""));
  CHECK(absl::StrContains(text, "\"bus_factor\": 0.5"));
  CHECK(absl::StrContains(text, "\"cpu_model\": "));
  CHECK(absl::StrContains(text, "\"world_size\": 2"));
  // 8 B x8 .. 256 KiB: 8 B holds one float per rank; 8, 64, ..., 262144: 6 rows.
  size_t rows = 0;
  for (size_t at = text.find("\"algorithm\": "); at != std::string::npos; at = text.find("\"algorithm\": ", at + 1)) {
    ++rows;
  }
  CHECK(rows == 6);
  CHECK(absl::StrContains(text, "\"out_of_bounds_values\": 0"));
}

TEST_CASE("braid_bench: bad collective flags exit 2 with one line", "[bench]") {
  const std::vector<std::vector<std::string>> cases = {
      {"-C", "gather"}, {"-C", "broadcast", "-a", "ring"}, {"-C", "sendrecv", "-a", "native"},
      {"--tune", "x.inc", "-C", "reduce"}, {"--tune", "x.inc", "-a", "auto"}};
  int i = 0;
  for (const std::vector<std::string>& args : cases) {
    std::vector<std::string> argv = {Runfile("bench/braid_bench")};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessExit exit = RunProcess(argv, {}, absl::StrCat("bad_", i++), absl::Seconds(30), kUnset);
    INFO(absl::StrJoin(args, " ") << " -> " << exit.code << ": " << exit.err);
    CHECK(exit.code == 2);
    CHECK(absl::StartsWith(exit.err, "braid_bench: "));
    CHECK(std::count(exit.err.begin(), exit.err.end(), '\n') == 1);
  }
}

TEST_CASE("braid_bench -h: the flags, then what the numbers mean, exit 0", "[bench]") {
  for (const char* flag : {"-h", "--help"}) {
    const ProcessExit exit = RunProcess({Runfile("bench/braid_bench"), flag}, {}, "help", absl::Seconds(30), kUnset);
    INFO(flag << " -> " << exit.code << ": " << exit.err);
    CHECK(exit.code == 0);
    CHECK(exit.err.empty());
    CHECK(absl::StartsWith(exit.out, "usage: braid_bench [flags]\n"));
    for (const char* text : {"-b, --minbytes BYTES", "-C, --collective NAME", "    --tune FILE", "-h, --help",
                             "Sizes and counts are nccl-tests'", "In place, as nccl-tests lays it out",
                             "Flags that differ from nccl-tests", "Exit status: 0 all checks passed"}) {
      INFO(text);
      CHECK(absl::StrContains(exit.out, text));
    }
  }
}

TEST_CASE("braid_bench --tune writes this transport's rows and keeps the others", "[bench]") {
  const std::string table = absl::StrCat(TestTempDir(), "/allreduce.txt");
  {
    std::FILE* file = std::fopen(table.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fputs("# tcp n=7: elsewhere\ntcp 7 0 tree\n", file);
    std::fclose(file);
  }
  const std::vector<std::string> argv = {Runfile("launcher/braidrun"), "--standalone", "--nproc-per-node=2",
                                         Runfile("bench/braid_bench"), "-t", "shm", "--tune", table,
                                         "-b", "8", "-e", "1M", "-f", "16", "-n", "2", "-w", "1"};
  const ProcessExit exit = RunProcess(argv, {{"BRAID_TIMEOUT_SEC", "60"}}, "tune", kTimeout, kUnset);
  INFO(exit.out << exit.err);
  REQUIRE(exit.code == 0);
  CHECK(absl::StrContains(exit.out, "# Algorithm: ring"));
  CHECK(absl::StrContains(exit.out, "# Algorithm: tree"));
  CHECK(absl::StrContains(exit.out, "# Algorithm: rhd"));
  CHECK(absl::StrContains(exit.out, "# Algorithm: direct"));
  const std::string text = ReadFile(table);
  INFO(text);
  absl::StatusOr<std::vector<bench::TuningGroup>> groups = bench::ParseTuningTable(text);
  REQUIRE(groups.ok());
  REQUIRE(groups->size() == 2);
  CHECK((*groups)[0].transport == "shm");
  CHECK((*groups)[0].world_size == 2);
  CHECK(absl::StrContains((*groups)[0].origin, "braid_bench --tune"));
  REQUIRE(!(*groups)[0].ranges.empty());
  CHECK((*groups)[0].ranges.back().max_bytes == 0);  // the last range is unbounded
  for (const bench::TuningRange& range : (*groups)[0].ranges) {
    CHECK((range.algorithm == "ring" || range.algorithm == "tree" || range.algorithm == "rhd" ||
           range.algorithm == "direct"));
  }
  CHECK((*groups)[1].transport == "tcp");
  CHECK((*groups)[1].origin == "elsewhere");
}

TEST_CASE("braid_bench: auto follows the checked-in tuning table for its transport and world size", "[bench]") {
  absl::StatusOr<std::vector<bench::TuningGroup>> groups =
      bench::ParseTuningTable(ReadFile(Runfile("tuning/allreduce.txt")));
  REQUIRE(groups.ok());
  const int n = 2;
  const std::string transport = GENERATE(std::string("shm"), std::string("tcp"));
  std::vector<bench::TuningRange> ranges;
  for (const bench::TuningGroup& g : *groups) {
    if (g.transport == transport && g.world_size == n) ranges = g.ranges;
  }
  // What the communicator must pick at `size`: the table's first range that holds, else the built-in rule.
  auto expected = [&](uint64_t size) -> std::string {
    for (const bench::TuningRange& r : ranges) {
      if (r.max_bytes == 0 || size <= r.max_bytes) return r.algorithm;
    }
    return size <= (64u << 10) ? "rhd" : "ring";
  };
  // "direct" names the shared-memory family (collectives/selection.h): the
  // windows below a slice per rank of SelectionThresholds'
  // peer_access_mapped_min_slice_bytes (braid_bench's buffers are memory the
  // peers map), peer access from there where the machine allows it (the
  // windows where it does not).
  auto matches = [&](uint64_t size, const std::string& used) {
    const std::string want = expected(size);
    if (want != "direct") return used == want;
    if (size / n < (1u << 10)) return used == "window";
    return used == "peer-access" || used == "window";
  };
  const std::string json = absl::StrCat(TestTempDir(), "/auto_", transport, ".json");
  const std::vector<std::string> argv = {Runfile("launcher/braidrun"), "--standalone", "--nproc-per-node=2",
                                         Runfile("bench/braid_bench"), "-t", transport, "-c", "1", "-b", "8",
                                         "-e", "4M", "-f", "4", "-n", "1", "-w", "0", "--json", json};
  const ProcessExit exit = RunProcess(argv, {{"BRAID_TIMEOUT_SEC", "60"}}, "auto_" + transport, kTimeout, kUnset);
  INFO(exit.out << exit.err);
  REQUIRE(exit.code == 0);
  const std::string text = ReadFile(json);
  int rows = 0;
  for (size_t at = text.find("\"algorithm_used\": \""); at != std::string::npos;
       at = text.find("\"algorithm_used\": \"", at + 1)) {
    const size_t begin = at + std::strlen("\"algorithm_used\": \"");
    const std::string used = text.substr(begin, text.find('"', begin) - begin);
    const size_t size_at = text.find("\"size\": ", at) + std::strlen("\"size\": ");
    uint64_t size = 0;
    REQUIRE(absl::SimpleAtoi(text.substr(size_at, text.find(',', size_at) - size_at), &size));
    INFO(transport << " " << size << " B: used " << used);
    CHECK(matches(size, used));
    ++rows;
  }
  CHECK(rows == 10);  // 8 B .. 2 MiB by 4
}

TEST_CASE("RangesFromPoints: runs merge, a lone noisy winner is smoothed, the last range is open", "[bench]") {
  const std::vector<bench::TuningRange> ranges = bench::RangesFromPoints(
      {{8, "rhd", 1}, {64, "rhd", 1}, {512, "tree", 1}, {4096, "rhd", 1}, {32768, "ring", 1}, {262144, "ring", 1}});
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0].algorithm == "rhd");
  CHECK(ranges[0].max_bytes == 4096);
  CHECK(ranges[1].algorithm == "ring");
  CHECK(ranges[1].max_bytes == 0);
  CHECK(!bench::ParseTuningTable("shm 2 x ring\n").ok());
  CHECK(!bench::ParseTuningTable("shm 2 0\n").ok());
}

}  // namespace
}  // namespace braid
