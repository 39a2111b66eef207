#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/group_layout.h"
#include "collectives/programs/hierarchical_program.h"
#include "collectives/programs/host_executor.h"
#include "collectives/programs/program.h"
#include "sim/compact_plan.h"
#include "sim/engine.h"

namespace braid::sim {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status SharedWindowsError(Algorithm algorithm) {
  return absl::UnimplementedError(
      absl::StrCat("braid_sim: ", AlgorithmName(algorithm), " runs over shared windows, which are not simulated"));
}

HostLayout LayoutOf(const Network& network) {
  std::vector<std::string> hosts(network.ranks());
  for (int r = 0; r < network.ranks(); ++r) hosts[r] = absl::StrCat("host", network.host_of(r));
  return MakeHostLayout(hosts);
}

// A lane in the window of a frame: where it is and what its group waits for.
}  // namespace

namespace engine_internal {

CollectiveArgs Engine::Args(CollectiveKind kind, size_t count, int root) const {
  CollectiveArgs args;
  args.kind = kind;
  args.count = count;
  args.dtype = request_.dtype;
  args.op = ReduceOp::kSum;
  args.root = root;
  args.segment_bytes = request_.segment_bytes;
  return args;
}

absl::StatusOr<std::shared_ptr<const CompactPlan>> Engine::PlanOf(Algorithm algorithm, const CollectiveArgs& args,
                                                                 int local, int size) {
  PlanRequest request{algorithm, args, local, size};
  BRAID_ASSIGN_OR_RETURN(Plan plan, MakePlan(request));
  if (plan.shared_windows) return SharedWindowsError(algorithm);
  return store_.Add(Compact(plan, local, size, element_size_));
}

absl::Status Engine::Build() {
  const auto start = std::chrono::steady_clock::now();
  states_.resize(ranks_);
  const CollectiveArgs args = Args(request_.kind, request_.count, request_.root);
  if (algorithm_ == Algorithm::kHierarchical) layout_ = LayoutOf(network_);
  // Every rank's plan is its own (built as its communicator would); the
  // cores share the building, rank r on thread r mod threads.
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  std::vector<absl::Status> errors(threads);
  std::mutex store_mu;
  auto build = [&](int first) {
    for (int r = first; r < ranks_ && errors[first].ok(); r += threads) {
      absl::StatusOr<Plan> plan = algorithm_ == Algorithm::kHierarchical ? MakeHierarchicalPlan(args, layout_, r)
                                                                         : MakePlan({algorithm_, args, r, ranks_});
      if (plan.ok() && plan->shared_windows) plan = SharedWindowsError(algorithm_);
      if (!plan.ok()) {
        errors[first] = plan.status();
        return;
      }
      CompactPlan compact = Compact(*plan, r, ranks_, element_size_);
      Frame frame;
      frame.local = r;
      frame.size = ranks_;
      {
        std::lock_guard<std::mutex> lock(store_mu);
        frame.plan = store_.Add(std::move(compact));
      }
      states_[r].frames.reserve(2);
      states_[r].frames.push_back(std::move(frame));
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(build, t);
  build(0);
  for (std::thread& w : workers) w.join();
  for (const absl::Status& e : errors) BRAID_RETURN_IF_ERROR(e);
  result_.build_seconds = Since(start);
  return absl::OkStatus();
}

void Engine::StartFrame(uint32_t rank, double time) {
  RankState& state = states_[rank];
  const int depth = static_cast<int>(state.frames.size()) - 1;
  Frame& frame = state.frames.back();
  const uint32_t lanes = static_cast<uint32_t>(frame.plan->lanes());
  if (lanes == 0) {
    // Nothing to run: done at once (as the lane that ends a frame would).
    frame.lanes_done = 0;
    frame.next_lane = 0;
    Schedule(time, rank, depth, kNoLane);
    return;
  }
  frame.slots.resize(std::min<size_t>(lanes, std::max<size_t>(frame.plan->lane_window, 1)));
  for (uint32_t slot = 0; slot < frame.slots.size(); ++slot) StartLane(rank, depth, slot, time);
}

void Engine::StartLane(uint32_t rank, int depth, int slot, double time) {
  Frame& frame = states_[rank].frames[depth];
  Slot& s = frame.slots[slot];
  s.lane = frame.next_lane++;
  s.pos = frame.plan->lane_begin[s.lane];
  s.end = frame.plan->lane_begin[s.lane + 1];
  s.pending = 0;
  Schedule(time, rank, depth, slot);
}

absl::Status Engine::Advance(const Event& event) {
  const uint32_t rank = event.rank;
  const int depth = event.depth;
  const double time = event.time;
  Frame& frame = states_[rank].frames[depth];
  if (event.slot == kNoLane) {  // a frame without lanes
    LaneDone(rank, depth, -1, time);
    return absl::OkStatus();
  }
  Slot& s = frame.slots[event.slot];
  if (s.pos == s.end) {
    LaneDone(rank, depth, event.slot, time);
    return absl::OkStatus();
  }
  const CompactPlan& plan = *frame.plan;
  const CompactOp& op = plan.ops[s.pos++];
  ++result_.ops;
  switch (op.kind) {
    case Op::Kind::kGroup: {
      const uint32_t channel = frame.channel << 20 | s.lane;
      s.done = time;
      s.pending = 0;
      for (uint32_t i = op.first; i < op.first + op.transfers; ++i) {
        const CompactTransfer& t = plan.transfers[i];
        const int peer = frame.Global(t.offset);
        if (t.send) {
          s.done = std::max(s.done, Send(static_cast<int>(rank), peer, channel, t.bytes, time));
        } else {
          const double arrival = Receive(rank, depth, event.slot, peer, channel);
          if (arrival < 0) ++s.pending;
          s.done = std::max(s.done, arrival);
        }
      }
      if (s.pending == 0) Schedule(s.done, rank, depth, event.slot);
      return absl::OkStatus();
    }
    case Op::Kind::kStep: return EnterStep(rank, event.slot, plan.steps[op.first], time);
    case Op::Kind::kReduce:
    case Op::Kind::kCopy:
    case Op::Kind::kDivide:
    case Op::Kind::kZero: {
      RankState& state = states_[rank];
      const double bandwidth = op.kind == Op::Kind::kReduce || op.kind == Op::Kind::kDivide ? cluster_.reduce_bandwidth
                                                                                            : cluster_.copy_bandwidth;
      state.compute_free = std::max(state.compute_free, time) + op.bytes / bandwidth;
      Schedule(state.compute_free, rank, depth, event.slot);
      return absl::OkStatus();
    }
    default:
      return absl::UnimplementedError(absl::StrCat("braid_sim: rank ", rank, "'s plan has a shared-window op"));
  }
}

void Engine::LaneDone(uint32_t rank, int depth, int slot, double time) {
  RankState& state = states_[rank];
  Frame& frame = state.frames[depth];
  const uint32_t lanes = static_cast<uint32_t>(frame.plan->lanes());
  if (slot >= 0) {
    ++frame.lanes_done;
    if (frame.next_lane < lanes) StartLane(rank, depth, slot, time);
  }
  if (frame.lanes_done < lanes) return;
  const int parent_slot = frame.parent_slot;
  state.frames.pop_back();
  if (depth > 0) {
    Schedule(time, rank, depth - 1, parent_slot);
    return;
  }
  state.finish = time;
  ++finished_;
  result_.seconds = std::max(result_.seconds, time);
}

absl::Status Engine::EnterStep(uint32_t rank, int slot, const LevelStep& step, double time) {
  RankState& state = states_[rank];
  const bool intra = step.level == LevelStep::kIntraHost;
  Frame child;
  child.members = intra ? layout_.LocalGroup(static_cast<int>(rank)) : layout_.CrossGroup(static_cast<int>(rank));
  child.size = static_cast<int>(child.members.size());
  child.local = static_cast<int>(std::find(child.members.begin(), child.members.end(), static_cast<int>(rank)) -
                                 child.members.begin());
  child.channel = 1 + static_cast<uint32_t>(step.level);
  child.parent_slot = slot;
  std::unique_ptr<Selector>& selector = level_selectors_[{intra ? 0 : 1, child.size}];
  if (selector == nullptr) {
    TransportCaps caps;
    // Within a host braid runs shm's windows, which are not simulated: the
    // level takes the message algorithms a transport without windows gets.
    caps.name = intra ? "intra-host" : cluster_.transport;
    caps.size = child.size;
    caps.hosts = intra ? 1 : child.size;
    selector = std::make_unique<Selector>(caps);
  }
  BRAID_ASSIGN_OR_RETURN(const Algorithm algorithm,
                         selector->Select(step.kind, step.count, element_size_, Algorithm::kAuto));
  std::shared_ptr<const CompactPlan>& plan =
      step_plans_[{intra ? 0 : 1, static_cast<int>(algorithm), step.count, static_cast<int>(step.kind), step.root,
                   child.local * 100000 + child.size}];
  if (plan == nullptr) {
    BRAID_ASSIGN_OR_RETURN(plan, PlanOf(algorithm, Args(step.kind, step.count, step.root), child.local, child.size));
  }
  child.plan = plan;
  state.frames.push_back(std::move(child));
  StartFrame(rank, time);
  return absl::OkStatus();
}

absl::Status Engine::Run() {
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < ranks_; ++r) StartFrame(r, 0);
  while (!events_.empty()) {
    const Event event = events_.top();
    events_.pop();
    BRAID_RETURN_IF_ERROR(Advance(event));
  }
  result_.run_seconds = Since(start);
  if (finished_ < ranks_) return absl::InternalError(Stuck());
  return absl::OkStatus();
}

std::string Engine::Stuck() const {
  for (int r = 0; r < ranks_; ++r) {
    const RankState& state = states_[r];
    if (state.finish >= 0) continue;
    const Frame& frame = state.frames.back();
    return absl::StrCat("braid_sim: ", ranks_ - finished_, " of ", ranks_, " ranks never finished; rank ", r,
                        state.frames.size() > 1 ? absl::StrCat(" (in a step on the ", frame.channel == 1 ? "intra-host" : "inter-host", " level)") : "",
                        " waits for a message in a plan of ", frame.plan->lanes(), " lanes, ", frame.lanes_done,
                        " done: a schedule whose sends and receives do not match");
  }
  return "braid_sim: no rank finished";
}

}  // namespace engine_internal


TransportCaps CapsFor(const Cluster& cluster, int ranks) {
  const Network network(cluster, ranks);
  TransportCaps caps;
  caps.name = cluster.transport;
  caps.size = ranks;
  caps.hosts = network.hosts();
  caps.max_per_host = std::min(ranks, cluster.ranks_per_host);
  caps.min_per_host = ranks - (network.hosts() - 1) * cluster.ranks_per_host;
  caps.subgroups = true;
  return caps;
}

absl::StatusOr<Algorithm> Choose(const Cluster& cluster, int ranks, const SimRequest& request) {
  const Selector selector(CapsFor(cluster, ranks));
  return selector.Select(request.kind, request.count, DTypeSize(request.dtype), request.algorithm);
}

absl::StatusOr<SimResult> Simulate(const Cluster& cluster, int ranks, const SimRequest& request) {
  if (ranks < 1 || ranks >= (1 << 17)) return absl::InvalidArgumentError(absl::StrCat("braid_sim: ranks ", ranks));
  SimResult result;
  BRAID_ASSIGN_OR_RETURN(result.algorithm, Choose(cluster, ranks, request));
  engine_internal::Engine engine(cluster, ranks, request, result.algorithm, result);
  BRAID_RETURN_IF_ERROR(engine.Build());
  BRAID_RETURN_IF_ERROR(engine.Run());
  return result;
}

}  // namespace braid::sim
