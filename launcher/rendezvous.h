// Rendezvous: how the agents of one job agree on who is in it, over braid's
// store (c10d-style, as torchrun's c10d backend).
//
// The job advances in rounds. An agent joins the current round by taking the
// next slot (an atomic Add); slot order is node rank order, so node ranks are
// stable within a round and global ranks follow them. The first agent of a
// round closes it: at max_nodes at once, or at min_nodes once the last-call
// window has passed without reaching max_nodes. An agent that finds its round
// closed, or full, is late: it says so (the running agents see the waiting
// count and, when the job may still grow, restart into the next round without
// spending a restart) and joins the next round. Restarts after a failure move
// every agent to the next round too. The static backend skips the slots: each
// agent gives its node rank and the round closes when all have arrived.
//
// Keys live under "braidrun/<run id>/" in the store:
//   round               current round number (decimal)
//   r<R>/count          slots taken;  r<R>/node_<slot>  "addr nproc";
//   r<R>/joined_<slot>  set after node_<slot>;  r<R>/closed  member count;
//   r<R>/waiting        late agents;  r<R>/restart  why the round ended;
//   r<R>/master         MASTER_ADDR:MASTER_PORT;  r<R>/failures, failure_<i>;
//   r<R>/done_<node>    a node whose workers all succeeded.
#ifndef BRAID_LAUNCHER_RENDEZVOUS_H_
#define BRAID_LAUNCHER_RENDEZVOUS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "launcher/node_liveness.h"
#include "store/store.h"

namespace braid {

struct NodeInfo {
  std::string addr;  // how other nodes reach this one
  int nproc = 1;
};

struct RendezvousSpec {
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  int static_node_rank = -1;  // >= 0: static backend
  absl::Duration join_timeout = absl::Seconds(600);
  absl::Duration last_call_timeout = absl::Seconds(30);
  // An agent that finds its round closed takes a lost node's vacant slot
  // (launcher/node_liveness.h) rather than wait for the next round; under the
  // static backend, only its own node rank's.
  bool take_vacant_slot = false;
  // Asked between the slices of every wait: true ends the wait with
  // kCancelled (a signal to the agent must not wait for join_timeout).
  std::function<bool()> interrupted;
  NodeInfo self;
};

struct RendezvousResult {
  int round = 0;
  int node_rank = 0;
  std::vector<NodeInfo> nodes;
  // 0 for the round's first agents; k > 0 for the k-th agent that took this
  // slot after its node was lost (its workers join the running group).
  int incarnation = 0;

  int world_size() const;
  int first_global_rank() const;  // global rank of this node's local rank 0
};

// One failed worker, as every agent can read it back.
struct FailureRecord {
  absl::Time time;
  int global_rank = 0;
  int local_rank = 0;
  std::string host;
  std::string how;   // "exit code 3", "signal SIGSEGV (11)"
  std::string tail;  // last lines of output, or the worker's error file
};

class Rendezvous {
 public:
  // `store` is the job's store (not yet prefixed).
  Rendezvous(std::shared_ptr<Store> store, RendezvousSpec spec);

  // Joins the current round, or the first round after `after_round` (>= 0
  // after a restart), and returns its membership. Errors: kDeadlineExceeded
  // after join_timeout naming how many nodes arrived of how many needed.
  absl::StatusOr<RendezvousResult> Join(int after_round = -1);

  // Why round `round` ended ("" while it has not): a restart request.
  absl::StatusOr<std::string> RestartReason(int round);
  // Ends round `round` (the first reason wins); returns the winning reason.
  absl::StatusOr<std::string> RequestRestart(int round, const std::string& reason);
  // Whether agents are waiting to join after `round` closed.
  absl::StatusOr<bool> NodesWaiting(int round);

  absl::Status PublishMaster(int round, const std::string& addr_port);
  absl::StatusOr<std::string> Master(int round);

  absl::Status RecordFailure(int round, const FailureRecord& failure);
  absl::StatusOr<std::vector<FailureRecord>> Failures(int round);

  absl::Status MarkDone(int round, int node_rank);
  // Waits until every node of `result` is done or lost (`liveness`), a
  // restart is requested, or the deadline; calls `watch` (the agent's
  // heartbeat, NodeLiveness::Tick and what it does about a lost node) in
  // between and returns its error. OK only when all are done or lost.
  absl::Status WaitAllDone(const RendezvousResult& result, NodeLiveness& liveness,
                           const std::function<absl::Status()>& watch, Deadline deadline);

  // The store under "braidrun/<run id>/" (for NodeLiveness).
  std::shared_ptr<Store> store() const { return store_; }

 private:
  // store_->Wait and Get in slices of at most kSlice, asking spec_.interrupted between them.
  absl::Status WaitFor(const std::vector<std::string>& keys, Deadline deadline);
  absl::StatusOr<std::string> GetWithin(const std::string& key, Deadline deadline);
  absl::StatusOr<int> CurrentRound();
  absl::Status AdvancePast(int round);
  // Too late for `round`: counted as waiting (the running agents see it), on to the next round.
  absl::Status MarkLate(int round);
  absl::StatusOr<RendezvousResult> Members(int round, int slot, int count, Deadline deadline);
  // The closer's wait for the nodes a round needs (every node rank under
  // the static backend), as WaitFor.
  absl::Status WaitForMinimum(int round, Deadline deadline);
  // Round `round` is closed: this agent's result in a lost node's slot, if one is vacant.
  absl::StatusOr<std::optional<RendezvousResult>> TakeVacantSlot(int round, Deadline deadline);

  std::shared_ptr<Store> store_;
  RendezvousSpec spec_;
};

}  // namespace braid

#endif  // BRAID_LAUNCHER_RENDEZVOUS_H_
