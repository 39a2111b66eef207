// FlightRecorder alone: the ring keeps the newest entries, oldest first,
// with their states and errors, and its JSON says so.
#include "collectives/flight_recorder.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

CollectiveArgs Args(uint64_t seq, size_t count) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.seq = seq;
  args.count = count;
  return args;
}

TEST_CASE("FlightRecorder: the newest entries, oldest first, with their states", "[flight]") {
  FlightRecorder recorder(0, 2, "shm", 4);
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    recorder.Queued(Args(seq, seq * 10), seq * 40, "ring");
    if (seq <= 5) recorder.Running(seq);
    if (seq <= 4) recorder.Finished(seq, absl::OkStatus());
  }
  recorder.Finished(5, absl::DeadlineExceededError("peer 1 never came"));
  const std::vector<FlightRecorder::Entry> entries = recorder.Snapshot();
  REQUIRE(entries.size() == 4);
  CHECK(entries[0].seq == 3);
  CHECK(entries[3].seq == 6);
  CHECK(entries[1].state == FlightRecorder::State::kCompleted);
  CHECK(entries[2].state == FlightRecorder::State::kFailed);
  CHECK(absl::StrContains(entries[2].error, "peer 1 never came"));
  CHECK(entries[3].state == FlightRecorder::State::kQueued);
  CHECK(entries[3].count == 60);
  const std::string json = recorder.ToJson("test");
  CHECK(absl::StrContains(json, "\"seq\": 5, \"op\": \"allreduce\""));
  CHECK(absl::StrContains(json, "\"state\": \"failed\""));
  CHECK(absl::StrContains(json, "\"algorithm\": \"ring\""));
}

TEST_CASE("FlightRecorder: a subgroup's recorder names its group, in its JSON and its file", "[flight]") {
  char dir[] = "/tmp/braid_flight_group_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  setenv("BRAID_FLIGHT_DIR", dir, 1);
  FlightRecorder world(1, 4, "tcp", 4);
  FlightRecorder tp(1, 2, "shm", 4, "world.tp/0");
  tp.Queued(Args(1, 8), 32, "hierarchical");
  CHECK(absl::StrContains(tp.ToJson("test"), "\"group\": \"world.tp/0\""));
  CHECK(absl::StrContains(world.ToJson("test"), "\"group\": \"world\""));
  absl::StatusOr<std::string> world_path = world.Dump("test");
  absl::StatusOr<std::string> tp_path = tp.Dump("test");
  unsetenv("BRAID_FLIGHT_DIR");
  REQUIRE(world_path.ok());
  REQUIRE(tp_path.ok());
  CHECK(*world_path == absl::StrCat(dir, "/rank1.json"));
  CHECK(*tp_path == absl::StrCat(dir, "/rank1.world_tp_0.json"));
  std::remove(world_path->c_str());
  std::remove(tp_path->c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace braid
