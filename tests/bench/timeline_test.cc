// BRAID_TIMELINE end to end: real jobs under braidrun write one Chrome-trace
// JSON per rank, which Python's json module must parse; the collectives in
// it are exactly the ones braid_bench issued (same sequence numbers on every
// rank, in order, with bytes and algorithm); train_mlp's trace has the
// reducer's buckets inside its iterations and one backward span per step.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "catch2/catch.hpp"
#include "collectives/timeline.h"
#include "tests/harness/subprocess.h"

namespace braid {
namespace {

const std::vector<std::string> kUnset = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",      "LOCAL_WORLD_SIZE",
                                         "MASTER_ADDR", "MASTER_PORT", "BRAID_TRANSPORT", "BRAID_ALGO",
                                         "BRAID_TIMELINE"};

// Parses one rank's trace with Python and prints "key value" lines: how many
// complete events per name prefix, whether seqs and timestamps only grow, the
// seq list, and whether every collective names its bytes and algorithm.
constexpr char kSummarize[] = R"PY(
import json, sys, collections
d = json.load(open(sys.argv[1]))
events = [e for e in d["traceEvents"] if e["ph"] == "X"]
counts = collections.Counter(e["name"].split(" ")[0] for e in events)
for name, n in sorted(counts.items()):
    print("count", name, n)
coll = [e for e in events if e["tid"] == 1]
seqs = [e["args"]["seq"] for e in coll]
print("seqs", ",".join(map(str, seqs)))
print("seq_increasing", int(all(a < b for a, b in zip(seqs, seqs[1:]))))
print("ts_increasing", int(all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(coll, coll[1:]))))
print("described", int(all("bytes" in e["args"] and e["args"]["algorithm"] and e["args"]["ok"] for e in coll)))
print("pids", ",".join(sorted({str(e["pid"]) for e in d["traceEvents"]})))
back = [e for e in events if e["name"] == "backward"]
buckets = [e for e in events if e["name"].startswith("bucket ")]
# Each bucket ends after its iteration's backward started.
inside = all(any(b["ts"] + b["dur"] >= k["ts"] and b["args"]["iteration"] == k["args"]["iteration"] for k in back)
             for b in buckets)
print("buckets_in_iterations", int(inside))
print("iterations", len({e["args"]["iteration"] for e in back}))
print("transport", d["otherData"]["transport"])
)PY";

std::map<std::string, std::string> Summarize(const std::string& path) {
  const ProcessExit exit =
      RunProcess({"/usr/bin/python3", "-c", kSummarize, path}, {}, "summarize", absl::Seconds(30));
  INFO(path << ": " << exit.err);
  REQUIRE(exit.code == 0);
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(exit.out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    if (parts[0] == "count") {
      std::vector<std::string> kv = absl::StrSplit(parts[1], ' ');
      out["count " + kv[0]] = kv[1];
    } else {
      out[parts[0]] = parts.size() > 1 ? parts[1] : "";
    }
  }
  return out;
}

TEST_CASE("Timeline::PathFor: file.json gets the rank, a directory gets rank<R>.json", "[timeline]") {
  CHECK(Timeline::PathFor("/tmp/x/trace.json", 3) == "/tmp/x/trace.rank3.json");
  CHECK(Timeline::PathFor("/tmp/x/trace", 0) == "/tmp/x/trace.rank0.json");
  CHECK(Timeline::PathFor("/tmp/x/", 2) == "/tmp/x/rank2.json");
  CHECK(Timeline::PathFor(TestTempDir(), 1) == TestTempDir() + "/rank1.json");
}

TEST_CASE("BRAID_TIMELINE: braid_bench's every collective, on every rank, parsed as JSON", "[timeline]") {
  const std::string dir = absl::StrCat(TestTempDir(), "/bench_trace/");
  // 8 B .. 64 KiB by 4: 7 sizes. Per size: 2 checked calls + the #wrong sum,
  // (1 warm-up + 2 timed) x 2 columns, the time max: 10 all-reduces; 2 barriers.
  const ProcessExit exit = RunProcess(
      {Runfile("launcher/braidrun"), "--standalone", "--nproc-per-node=2", Runfile("bench/braid_bench"), "-t", "shm",
       "-b", "8", "-e", "64K", "-f", "4", "-n", "2", "-w", "1", "-c", "1"},
      {{"BRAID_TIMELINE", dir}, {"BRAID_TIMEOUT_SEC", "60"}}, "bench_trace", absl::Seconds(90), kUnset);
  INFO(exit.out << exit.err);
  REQUIRE(exit.code == 0);
  std::string seqs;
  for (int rank = 0; rank < 2; ++rank) {
    const std::map<std::string, std::string> s = Summarize(absl::StrCat(dir, "rank", rank, ".json"));
    INFO("rank " << rank);
    CHECK(s.at("count allreduce") == "70");
    CHECK(s.at("count barrier") == "14");
    CHECK(s.at("seq_increasing") == "1");
    CHECK(s.at("ts_increasing") == "1");
    CHECK(s.at("described") == "1");
    CHECK(s.at("pids") == std::to_string(rank));
    CHECK(s.at("transport") == "shm");
    if (rank == 0) seqs = s.at("seqs");
    CHECK(s.at("seqs") == seqs);  // the same collectives on both ranks
  }
}

TEST_CASE("BRAID_TIMELINE: the reducer's buckets and backward passes in train_mlp's trace", "[timeline]") {
  const std::string spec = absl::StrCat(TestTempDir(), "/mlp.json");
  const ProcessExit exit =
      RunProcess({Runfile("launcher/braidrun"), "--standalone", "--nproc-per-node=2", Runfile("examples/train_mlp"),
                  "--model=small", "--batch-size=16", "--bench-steps=3", "--samples=256"},
                 {{"BRAID_TIMELINE", spec}, {"BRAID_TIMEOUT_SEC", "60"}}, "mlp_trace", absl::Seconds(90), kUnset);
  INFO(exit.out << exit.err);
  REQUIRE(exit.code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    const std::map<std::string, std::string> s = Summarize(absl::StrCat(TestTempDir(), "/mlp.rank", rank, ".json"));
    INFO("rank " << rank);
    int backward = 0;
    int finalize = 0;
    int buckets = 0;
    int iterations = 0;
    REQUIRE(absl::SimpleAtoi(s.at("count backward"), &backward));
    REQUIRE(absl::SimpleAtoi(s.at("count finalize"), &finalize));
    REQUIRE(absl::SimpleAtoi(s.at("count bucket"), &buckets));
    REQUIRE(absl::SimpleAtoi(s.at("iterations"), &iterations));
    CHECK(backward >= 3);
    CHECK(finalize == backward);
    CHECK(iterations == backward);
    CHECK(buckets >= backward);  // at least one bucket per iteration
    CHECK(s.at("buckets_in_iterations") == "1");
    CHECK(s.count("count allreduce") == 1);
  }
}

}  // namespace
}  // namespace braid
