// Node liveness across the agents of one rendezvous round: torchrun's
// keep-alive, and what braid adds to it under --restart-policy=replace (a
// lost node's slot taken over in place by an agent that comes back).
//
// Every agent beats (an Add on its node's counter) once per keep-alive
// interval while its round runs, and watches the other nodes' counters with
// its own clock: a node whose counter has not moved for max_missed intervals
// is lost. The first agent to see it says why with one CompareSet, so one
// agent acts on it (the replace policy declares the node's workers dead, so
// the survivors regroup at once; the all policy restarts the round). An
// agent declared lost while alive (stopped, cut off) finds out on its next
// beat and stops its workers: the others have gone on without them.
//
// A lost node's slot is vacant. An agent that arrives when its round is
// closed takes a vacant slot with the same worker count (ClaimVacantSlot)
// instead of waiting for the next round, as the node's next incarnation
// (under the static backend: its own --node-rank's slot only); its workers
// join the running group (BRAID_JOIN_RUNNING=1).
//
// Keys, under the rendezvous' "braidrun/<run id>/":
//   r<R>/alive_<node>          heartbeats (a counter)
//   r<R>/gen_<node>            the node's incarnation (absent: 0)
//   r<R>/lost_<node>_<gen>     why that incarnation was declared lost (first wins)
//   r<R>/claim_<node>_<gen>    agents claiming the slot it left (the first Add wins)
#ifndef BRAID_LAUNCHER_NODE_LIVENESS_H_
#define BRAID_LAUNCHER_NODE_LIVENESS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "store/store.h"

namespace braid {

struct KeepAlive {
  absl::Duration interval = absl::Seconds(5);  // torchrun's keep_alive_interval
  int max_missed = 3;                          // torchrun's keep_alive_max_attempt
};

// A node this agent declared lost: it acts on it.
struct LostNode {
  int node = 0;
  std::string why;
};

class NodeLiveness {
 public:
  // `rdzv_store`: the rendezvous' store (prefixed "braidrun/<run id>");
  // `nodes`: the round's node count; `self`, `incarnation`: this agent's.
  NodeLiveness(std::shared_ptr<Store> rdzv_store, int round, int nodes, int self, int incarnation,
               std::vector<std::string> addrs, KeepAlive keep_alive);

  // At most once per interval (sooner calls return at once): beats, then
  // looks at the other nodes. Returns the nodes this call declared lost.
  // kCancelled when this node itself was declared lost (the message says why).
  absl::StatusOr<std::vector<LostNode>> Tick();

  // Whether node `node`'s current incarnation is lost (its slot vacant).
  absl::StatusOr<bool> Vacant(int node);

 private:
  struct Seen {
    int incarnation = -1;
    int64_t beats = -1;
    absl::Time moved;
  };
  absl::StatusOr<int> Incarnation(int node);

  std::shared_ptr<Store> store_;
  int round_;
  int self_;
  int incarnation_;
  std::vector<std::string> addrs_;
  KeepAlive keep_alive_;
  std::vector<Seen> seen_;
  absl::Time next_tick_ = absl::InfinitePast();
};

// The key "r<round>/<name>" under the rendezvous' prefix: every key of a
// round, the rendezvous' own (launcher/rendezvous.h) and the ones above.
std::string RoundKey(int round, absl::string_view name);

// Takes the first vacant slot among `candidates` (node ranks of round
// `round` that this agent could fill: the same worker count, and under the
// static backend its own node rank): its node rank and this agent's
// incarnation there, or nullopt when none is vacant (or another agent took
// it first).
struct ClaimedSlot {
  int node = 0;
  int incarnation = 0;
};
absl::StatusOr<std::optional<ClaimedSlot>> ClaimVacantSlot(Store& rdzv_store, int round,
                                                           const std::vector<int>& candidates);

}  // namespace braid

#endif  // BRAID_LAUNCHER_NODE_LIVENESS_H_
