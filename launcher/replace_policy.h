// ReplacePolicy: the agent's half of --restart-policy=replace on one node, for
// one rendezvous round. A failed worker is replaced by a new process in the
// same slot while the others keep running; the survivors shrink their group
// in place and let the newcomer join (runtime/elastic.h, the workers' half).
// The contract between the two halves is store/membership.h, in the workers'
// namespace of the job's store (BRAID_STORE_PREFIX of this round).
//
// What this class does, when the agent asks (launcher/agent.cc decides
// whether a failure is replaced or restarts everything: restarts left, the
// workers' fallback key):
//   - Replace: declares the dead process dead (membership::DeclareDead, so the
//     survivors stop waiting for it and revoke the epoch it was in), then
//     starts one new process with the same spec plus BRAID_JOIN_RUNNING=1,
//     the new TORCHELASTIC_RESTART_COUNT, and its files in a directory of its
//     own (<rank>.r<k> next to <rank>), so the first one's error file stays.
//   - KillEvicted: a running worker whose evict key the survivors set (it did
//     not check in within their timeout, e.g. it hung) is SIGKILLed; its exit
//     then comes from the group like any failure, and is replaced.
//   - FallbackReason: the survivors' request to restart everything (too few
//     ranks are left for recovery in place).
//
// Single-threaded, like WorkerGroup: the agent's thread makes every call.
// Each call makes a few store round trips at most (Store::Check is all-of, so
// KillEvicted makes one per running worker); none waits beyond that.
#ifndef BRAID_LAUNCHER_REPLACE_POLICY_H_
#define BRAID_LAUNCHER_REPLACE_POLICY_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launcher/options.h"
#include "launcher/worker_group.h"
#include "store/store.h"

namespace braid {

class ReplacePolicy {
 public:
  // `workers_store`: this round's workers' namespace (a PrefixStore with
  // BRAID_STORE_PREFIX over the agent's client); `host`: HostName(), the host
  // half of a worker's token; `specs`: this node's workers as started.
  ReplacePolicy(std::shared_ptr<Store> workers_store, std::string host, const std::vector<WorkerSpec>& specs);

  // The fallback key's value, or "" while no worker has set it.
  absl::StatusOr<std::string> FallbackReason();

  // SIGKILLs every running worker of `group` that the survivors evicted (each
  // once) and returns one line per kill, "rank R (host:pid) ...: why".
  absl::StatusOr<std::vector<std::string>> KillEvicted(WorkerGroup& group);

  // How `exit` failed, for the console, the report and the dead key:
  // exit.Describe(), and for an evicted worker why the survivors evicted it;
  // a replacement's says so ("exit code 3 (replacement 1 of rank 2)").
  std::string How(const WorkerExit& exit) const;

  // A lost node's workers, global ranks [first_rank, first_rank + nproc):
  // declares dead every process of theirs that the newest epoch lists or that
  // checked in for the one being built, so the survivors regroup without them.
  // (Called by whichever agent declared the node lost, for that node's ranks.)
  absl::Status DeclareLost(int first_rank, int nproc, const std::string& how);

  // Declares the process of `exit` dead (with `how`) and starts its
  // replacement in `group`, told `restart_count`. On an error from the store
  // nothing is started; from the start, the death stands declared.
  absl::Status Replace(WorkerGroup& group, const WorkerExit& exit, const std::string& how, int restart_count);

 private:
  std::shared_ptr<Store> store_;
  std::string host_;
  std::map<int, WorkerSpec> specs_;       // by global rank: what a replacement is started from
  std::map<int, int> replacements_;       // by global rank: replacements started this round
  std::map<pid_t, std::string> evicted_;  // killed for the survivors: pid -> the evict key's value
  std::map<pid_t, int> replacement_of_;   // a replacement's pid -> which one (k) it is
};

// The spec of the `k`-th replacement (k >= 1) of the worker `original`: the
// same command and environment, plus BRAID_JOIN_RUNNING=1 and
// TORCHELASTIC_RESTART_COUNT=`restart_count`; its log and error files under
// "<original's directory>.r<k>".
WorkerSpec ReplacementSpec(const WorkerSpec& original, int k, int restart_count);

// The failure report's line on what the restart policy did and cost, e.g.
// "restart policy: replace; 2 workers replaced (rank 1, rank 3), survivors
// never stopped; restarts used 2 of 3". `replaced_ranks`: one entry per
// replacement, in order; `restarts`: every restart, replacements included.
std::string RestartPolicyLine(RestartPolicy policy, const std::vector<int>& replaced_ranks, int restarts,
                              int max_restarts);

}  // namespace braid

#endif  // BRAID_LAUNCHER_REPLACE_POLICY_H_
