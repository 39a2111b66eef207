// Internal to sim/: the event engine behind Simulate (simulator.h), its
// per-rank state, and the message matching and link model
// (engine_network.cc).
#ifndef BRAID_SIM_ENGINE_H_
#define BRAID_SIM_ENGINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/group_layout.h"
#include "collectives/programs/host_executor.h"
#include "collectives/programs/program.h"
#include "collectives/selection.h"
#include "sim/cluster.h"
#include "sim/compact_plan.h"
#include "sim/simulator.h"

namespace braid::sim::engine_internal {

// An event's slot for a frame without lanes (lane windows stay below it).
inline constexpr uint16_t kNoLane = 0xffff;

struct Slot {
  uint32_t lane = 0;
  uint32_t pos = 0;
  uint32_t end = 0;
  uint32_t pending = 0;  // receives of the current group not yet arrived
  double done = 0;       // when the current group's transfers are all done
};

// A plan being run by one rank: the collective's, or a hierarchical step's.
struct Frame {
  std::shared_ptr<const CompactPlan> plan;
  std::vector<int> members;  // local index -> rank; empty: the whole group
  int local = 0;
  int size = 1;
  // Whose messages: 0 the collective's plan's; 1 + level a step's. Each
  // level is a transport of its own, matching messages in order.
  uint32_t channel = 0;
  uint32_t next_lane = 0;
  uint32_t lanes_done = 0;
  int parent_slot = -1;
  std::vector<Slot> slots;  // the plan's lane window (at most its lanes)

  int Global(uint32_t offset) const {
    const int peer = static_cast<int>((local + offset) % static_cast<uint32_t>(size));
    return members.empty() ? peer : members[peer];
  }
};

struct RankState {
  std::vector<Frame> frames;  // [0] the collective's plan, [1] a step running
  double compute_free = 0;
  double finish = -1;
};

struct Event {
  double time;
  uint64_t seq;
  uint32_t rank;
  uint16_t depth;
  uint16_t slot;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

// Messages on one (receiver, sender, channel) in order: arrivals not yet
// received, or receivers waiting (never both).
struct Fifo {
  struct Entry {
    double arrival;
    uint32_t rank;
    uint16_t depth;
    uint16_t slot;
  };
  absl::InlinedVector<Entry, 2> entries;
  size_t head = 0;
  bool waiters = false;
};

class Engine {
 public:
  Engine(const Cluster& cluster, int ranks, const SimRequest& request, Algorithm algorithm, SimResult& result)
      : cluster_(cluster), network_(cluster, ranks), request_(request), algorithm_(algorithm), result_(result),
        element_size_(DTypeSize(request.dtype)), link_free_(network_.links(), 0),
        buckets_(network_.links(), LinkBucket{cluster.nic_burst_bytes, 0}), ranks_(ranks) {}

  absl::Status Build();
  absl::Status Run();

 private:
  CollectiveArgs Args(CollectiveKind kind, size_t count, int root) const;
  absl::StatusOr<std::shared_ptr<const CompactPlan>> PlanOf(Algorithm algorithm, const CollectiveArgs& args,
                                                           int local, int size);
  void Schedule(double time, uint32_t rank, int depth, int slot) {
    events_.push({time, seq_++, rank, static_cast<uint16_t>(depth), static_cast<uint16_t>(slot)});
  }
  void StartFrame(uint32_t rank, double time);
  void StartLane(uint32_t rank, int depth, int slot, double time);
  absl::Status Advance(const Event& event);
  void LaneDone(uint32_t rank, int depth, int slot, double time);
  absl::Status EnterStep(uint32_t rank, int slot, const LevelStep& step, double time);
  // A send posted at `time`: when its bytes have left; delivers the arrival.
  double Send(int from, int to, uint32_t channel, uint64_t bytes, double time);
  // How long `bytes` hold `link` from `start` (its token bucket, if any).
  double Hold(int link, uint64_t bytes, double start);
  // A receive posted: the arrival, or -1 (the sender's Send wakes the slot).
  double Receive(uint32_t rank, int depth, int slot, int from, uint32_t channel);
  static uint64_t Key(int to, int from, uint32_t channel) {
    return uint64_t(uint32_t(to)) << 47 | uint64_t(uint32_t(from)) << 30 | channel;
  }
  std::string Stuck() const;

  const Cluster cluster_;
  const Network network_;
  const SimRequest request_;
  const Algorithm algorithm_;
  SimResult& result_;
  const size_t element_size_;
  std::vector<double> link_free_;
  struct LinkBucket {
    double tokens = 0;
    double since = 0;
  };
  std::vector<LinkBucket> buckets_;
  const int ranks_;
  HostLayout layout_;
  PlanStore store_;
  std::map<std::tuple<int, int, size_t, int, int, int>, std::shared_ptr<const CompactPlan>> step_plans_;
  std::map<std::pair<int, int>, std::unique_ptr<Selector>> level_selectors_;
  std::vector<RankState> states_;
  absl::flat_hash_map<uint64_t, Fifo> fifos_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  int finished_ = 0;
};

}  // namespace braid::sim::engine_internal

#endif  // BRAID_SIM_ENGINE_H_
