// The agent's job, round by round: set up, then rendezvous rounds until the
// workers succeed everywhere, a signal comes, or no restart is left.
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/auth.h"
#include "base/deadline.h"
#include "base/socket.h"
#include "base/status.h"
#include "launcher/agent_internal.h"
#include "store/tcp_store.h"

namespace braid::agent_internal {

absl::Status Agent::SetUp() {
  BRAID_ASSIGN_OR_RETURN(signal_fd_, WorkerGroup::BlockSignals(o_.signals_to_handle));
  host_ = HostName();
  run_id_ = o_.standalone ? RandomId() : o_.rdzv_id;
  if (o_.log_dir.empty()) {
    std::string tmpl = absl::StrCat("/tmp/braidrun-", run_id_, "-XXXXXX");
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a directory under /tmp: ", strerror(errno)));
    }
    files_dir_ = tmpl;
    // Kept when the user asked for log files, removed otherwise.
    own_files_dir_ = o_.redirects.all == 0 && o_.tee.all == 0 && o_.redirects.per_rank.empty() &&
                     o_.tee.per_rank.empty();
  } else {
    files_dir_ = absl::StrCat(o_.log_dir, "/", run_id_);
  }
  std::string warning;
  absl::StatusOr<JobSecret> secret = SetUpSecret(o_, &warning);
  if (!warning.empty()) Say(warning);
  BRAID_RETURN_IF_ERROR(secret.status());
  BRAID_ASSIGN_OR_RETURN(store_,
                         OpenStore(o_, *secret, DeadlineIn(o_.join_timeout), [this] { return Interrupted(); }));

  RendezvousSpec spec;
  spec.run_id = run_id_;
  spec.min_nodes = o_.min_nodes;
  spec.max_nodes = o_.max_nodes;
  spec.static_node_rank = o_.rdzv_backend == "static" ? o_.node_rank : -1;
  spec.join_timeout = o_.join_timeout;
  spec.last_call_timeout = o_.last_call_timeout;
  spec.take_vacant_slot = o_.restart_policy == RestartPolicy::kReplace;
  spec.interrupted = [this] { return Interrupted(); };
  spec.self.nproc = o_.nproc_per_node;
  if (!o_.local_addr.empty()) {
    spec.self.addr = o_.local_addr;
  } else {
    absl::StatusOr<std::string> addr = LocalAddressToward(store_.address);
    spec.self.addr = addr.ok() ? *addr : "127.0.0.1";
  }
  self_addr_ = spec.self.addr;
  rdzv_ = std::make_unique<Rendezvous>(store_.client, spec);
  return absl::OkStatus();
}

bool Agent::Interrupted() {
  signalfd_siginfo info{};
  while (signal_ == 0 && read(signal_fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    if (info.ssi_signo != SIGCHLD) signal_ = static_cast<int>(info.ssi_signo);
  }
  return signal_ != 0;
}

absl::Status Agent::Watch(const RendezvousResult& members, NodeLiveness& liveness, ReplacePolicy* replace) {
  BRAID_ASSIGN_OR_RETURN(const std::vector<LostNode> lost, liveness.Tick());
  for (const LostNode& node : lost) {
    const int nproc = members.nodes[static_cast<size_t>(node.node)].nproc;
    int first = 0;
    for (int i = 0; i < node.node; ++i) first += members.nodes[static_cast<size_t>(i)].nproc;
    (void)rdzv_->RecordFailure(members.round, {absl::Now(), first, 0, members.nodes[static_cast<size_t>(node.node)].addr,
                                               absl::StrCat("node lost: ", node.why), ""});
    if (replace == nullptr) {
      BRAID_RETURN_IF_ERROR(rdzv_->RequestRestart(members.round, node.why).status());
      continue;
    }
    Say(absl::StrCat(node.why, ": its workers (ranks ", first, "-", first + nproc - 1,
                     ") are declared dead and the others go on without them (--restart-policy=replace); ",
                     "an agent that comes back takes its place"));
    BRAID_RETURN_IF_ERROR(replace->DeclareLost(first, nproc, absl::StrCat("node lost: ", node.why)));
  }
  return absl::OkStatus();
}

Agent::Next Agent::Succeeded(const RendezvousResult& members, NodeLiveness& liveness, ReplacePolicy* replace,
                             int& after_round, int& exit_code) {
  (void)rdzv_->MarkDone(members.round, members.node_rank);
  // Every node stays until every node is done: the store's host because
  // the others need the store, and all of them because a node that fails
  // later restarts the whole group, this node's workers included.
  absl::Status all = members.nodes.size() > 1
                         ? rdzv_->WaitAllDone(
                               members, liveness, [&] { return Watch(members, liveness, replace); },
                               DeadlineIn(o_.join_timeout))
                         : absl::OkStatus();
  if (absl::IsCancelled(all)) {
    Say(absl::StrCat("this node's workers succeeded, but ", all.message()));
    return Next::kStop;
  }
  if (absl::IsAborted(all)) {
    stop_reason_ = std::string(all.message());
    if (!absl::StartsWith(stop_reason_, kShutdownPrefix) && restarts_ < o_.max_restarts) {
      ++restarts_;
      Say(absl::StrCat("this node's workers succeeded, but ", stop_reason_, "; restarting them with the others ",
                       "(restart ", restarts_, " of ", o_.max_restarts, ")"));
      after_round = members.round;
      return Next::kAgain;
    }
    Say(absl::StrCat("this node's workers succeeded, but ", stop_reason_, "; no restart is left (--max-restarts ",
                     o_.max_restarts, "), so the job failed"));
    Report(members);
    return Next::kStop;
  }
  if (!all.ok()) Say(absl::StrCat("this node succeeded, but not every node did: ", all.message()));
  if (const size_t n = replaced_ranks_.size(); n > 0) {
    Say(absl::StrCat("job done; ", n, n == 1 ? " worker was" : " workers were",
                     " replaced in place (--restart-policy=replace)"));
  }
  exit_code = 0;
  return Next::kStop;
}

Agent::Next Agent::Round(int& after_round, int& exit_code) {
  absl::StatusOr<RendezvousResult> members = rdzv_->Join(after_round);
  if (!members.ok() && signal_ != 0) {
    Say(absl::StrCat("received SIG", sigabbrev_np(signal_), " in rendezvous: leaving the job"));
    exit_code = 128 + signal_;
    return Next::kStop;
  }
  if (!members.ok()) {
    Say(std::string(members.status().message()));
    return Next::kStop;
  }
  std::vector<std::string> addrs;
  for (const NodeInfo& node : members->nodes) addrs.push_back(node.addr);
  NodeLiveness liveness(rdzv_->store(), members->round, static_cast<int>(members->nodes.size()), members->node_rank,
                        members->incarnation, std::move(addrs),
                        KeepAlive{o_.keep_alive_interval, o_.keep_alive_max_attempt});
  if (members->incarnation > 0) {
    Say(absl::StrCat("node ", members->node_rank, " of round ", members->round, " was lost: this agent takes its ",
                     "place (incarnation ", members->incarnation, "), its workers join the running group"));
  }
  absl::StatusOr<std::string> master = Master(*members);
  absl::StatusOr<std::vector<WorkerSpec>> specs =
      master.ok() ? Specs(*members, *master) : absl::StatusOr<std::vector<WorkerSpec>>(master.status());
  std::unique_ptr<ReplacePolicy> replace;
  if (specs.ok() && o_.restart_policy == RestartPolicy::kReplace) {
    replace = std::make_unique<ReplacePolicy>(std::make_shared<PrefixStore>(WorkersPrefix(members->round), store_.client),
                                              host_, *specs);
  }
  absl::StatusOr<std::unique_ptr<WorkerGroup>> group =
      specs.ok() ? WorkerGroup::Start(std::move(*specs), signal_fd_.get())
                 : absl::StatusOr<std::unique_ptr<WorkerGroup>>(specs.status());
  if (!group.ok()) {
    Say(absl::StrCat("cannot start the workers: ", group.status().message()));
    (void)rdzv_->RequestRestart(members->round, absl::StrCat(kShutdownPrefix, "node ", members->node_rank,
                                                             " could not start its workers"));
    return Next::kStop;
  }
  local_failures_.clear();
  replaced_failures_.clear();
  const Outcome outcome = Monitor(**group, *members, liveness, replace.get());
  if (outcome == Outcome::kSucceeded) return Succeeded(*members, liveness, replace.get(), after_round, exit_code);
  if (outcome == Outcome::kSignal) {
    Say(absl::StrCat("received SIG", sigabbrev_np(signal_), ": forwarding it to the workers (SIGKILL after ",
                     absl::FormatDuration(o_.shutdown_timeout), ", --shutdown-timeout)"));
    (void)rdzv_->RequestRestart(members->round, absl::StrCat(kShutdownPrefix, "the agent on ", host_,
                                                             " received SIG", sigabbrev_np(signal_)));
    (*group)->Stop(signal_, o_.shutdown_timeout);
    exit_code = 128 + signal_;
    return Next::kStop;
  }
  if (outcome == Outcome::kLocalFailure) {
    const FailureRecord& first = local_failures_.front();
    for (const FailureRecord& failure : local_failures_) (void)rdzv_->RecordFailure(members->round, failure);
    absl::StatusOr<std::string> reason =
        rdzv_->RequestRestart(members->round, absl::StrCat("rank ", first.global_rank, " failed: ", first.how));
    stop_reason_ = reason.ok() ? *reason : std::string(reason.status().message());
  }
  std::vector<WorkerExit> stopped = (*group)->Stop(SIGTERM, o_.shutdown_timeout);
  for (const WorkerExit& exit : stopped) {
    if (exit.succeeded() || exit.stopped_by_agent) continue;
    local_failures_.push_back({exit.time, exit.global_rank, exit.local_rank,
                               absl::StrCat(host_, " (", self_addr_, ")"), exit.Describe(), exit.tail});
    (void)rdzv_->RecordFailure(members->round, local_failures_.back());
  }
  after_round = members->round;
  if (outcome == Outcome::kMembershipChange) {
    Say(absl::StrCat("a node is waiting to join: restarting the group (round ", members->round + 1, ")"));
    return Next::kAgain;
  }
  if (outcome == Outcome::kLost) Say(absl::StrCat(stop_reason_, ": stopping this node's workers; the others went on"));
  if (outcome == Outcome::kStoreLost || outcome == Outcome::kLost || absl::StartsWith(stop_reason_, kShutdownPrefix) ||
      restarts_ >= o_.max_restarts) {
    Report(*members);
    return Next::kStop;
  }
  ++restarts_;
  Say(absl::StrCat(stop_reason_, "; restarting the workers (restart ", restarts_, " of ", o_.max_restarts, ")"));
  return Next::kAgain;
}

int Agent::Run() {
  if (absl::Status set_up = SetUp(); !set_up.ok()) {
    Say(signal_ != 0 ? absl::StrCat("received SIG", sigabbrev_np(signal_), " before rendezvous: leaving the job")
                     : std::string(set_up.message()));
    return signal_ != 0 ? 128 + signal_ : 1;
  }
  int exit_code = 1;
  int after_round = -1;
  while (Round(after_round, exit_code) == Next::kAgain) {
  }
  // A failed job keeps its files (error files, flight-recorder dumps).
  if (own_files_dir_ && exit_code == 0) RemoveTree(files_dir_);
  return exit_code;
}

}  // namespace braid::agent_internal
