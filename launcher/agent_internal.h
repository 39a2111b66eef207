// Internal to the agent (agent.cc, agent_run.cc): the class that runs one
// node of a job, and what its two files share.
#ifndef BRAID_LAUNCHER_AGENT_INTERNAL_H_
#define BRAID_LAUNCHER_AGENT_INTERNAL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "launcher/job_store.h"
#include "launcher/node_liveness.h"
#include "launcher/options.h"
#include "launcher/rendezvous.h"
#include "launcher/replace_policy.h"
#include "launcher/worker_group.h"

namespace braid::agent_internal {

inline constexpr char kShutdownPrefix[] = "shutdown: ";
// How long a failure waits for its peers' exits, to report the cause first.
inline constexpr absl::Duration kFailureSettle = absl::Milliseconds(200);

// "braidrun: LINE" on stderr.
void Say(const std::string& line);
std::string RandomId();
void RemoveTree(const std::string& path);

// kLost: the other agents declared this node lost (it missed heartbeats).
enum class Outcome { kSucceeded, kLocalFailure, kRemoteRestart, kMembershipChange, kSignal, kStoreLost, kLost };

class Agent {
 public:
  explicit Agent(const LaunchOptions& options) : o_(options) {}
  int Run();

 private:
  enum class Next { kAgain, kStop };
  // What a job needs before its first round: signals, its id, the files'
  // directory, the store and the rendezvous; the error says why not.
  absl::Status SetUp();
  // One rendezvous round: starts the workers, watches them and says whether
  // another round follows (after `after_round`) or the job ends with `exit_code`.
  Next Round(int& after_round, int& exit_code);
  // This node's workers succeeded: waits for the other nodes' (a failure
  // there restarts every node's).
  Next Succeeded(const RendezvousResult& members, NodeLiveness& liveness, ReplacePolicy* replace, int& after_round,
                 int& exit_code);
  absl::StatusOr<std::vector<WorkerSpec>> Specs(const RendezvousResult& members, const std::string& master);
  absl::StatusOr<std::string> Master(const RendezvousResult& members);
  // `replace`: null under --restart-policy=all.
  Outcome Monitor(WorkerGroup& group, const RendezvousResult& members, NodeLiveness& liveness,
                  ReplacePolicy* replace);
  // The heartbeat (NodeLiveness::Tick), and what this agent does about a node
  // it declared lost: its workers declared dead under `replace`, else a
  // restart of the round. kCancelled when this node was declared lost.
  absl::Status Watch(const RendezvousResult& members, NodeLiveness& liveness, ReplacePolicy* replace);
  // A signal of --signals-to-handle arrived (it is in signal_): rendezvous
  // and the store's connection ask between their waits.
  bool Interrupted();
  // Monitor's look at the round: a restart asked for, the store lost, this
  // node declared lost (and the heartbeat, Watch). nullopt: go on.
  std::optional<Outcome> CheckRound(const RendezvousResult& members, NodeLiveness& liveness, ReplacePolicy* replace);
  bool Replace(WorkerGroup& group, const RendezvousResult& members, ReplacePolicy& policy, const WorkerExit& exit);
  void Report(const RendezvousResult& members);
  std::string AttemptDir(int round, int global_rank) const;
  std::string WorkersPrefix(int round) const;
  std::string HostLabel(const RendezvousResult& members) const;

  const LaunchOptions& o_;
  std::string run_id_;
  std::string host_;
  std::string files_dir_;    // log and error files
  bool own_files_dir_ = false;
  std::string self_addr_;  // as the other nodes reach this one
  UniqueFd signal_fd_;
  JobStore store_;
  std::unique_ptr<Rendezvous> rdzv_;
  int restarts_ = 0;
  int signal_ = 0;
  std::string stop_reason_;
  std::vector<FailureRecord> local_failures_;
  std::vector<FailureRecord> replaced_failures_;  // this round's, replaced in place
  std::vector<int> replaced_ranks_;               // every replacement of the job, in order
};

}  // namespace braid::agent_internal

#endif  // BRAID_LAUNCHER_AGENT_INTERNAL_H_
