#include "launcher/agent.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/auth.h"
#include "base/env.h"
#include "base/fd.h"
#include "base/launch_env.h"
#include "base/logging.h"
#include "base/socket.h"
#include "base/status.h"
#include "launcher/agent_internal.h"
#include "launcher/job_store.h"
#include "launcher/rendezvous.h"
#include "launcher/replace_policy.h"
#include "launcher/worker_group.h"
#include "store/tcp_store.h"

extern char** environ;

namespace braid {
namespace agent_internal {
namespace {

// A port for MASTER_PORT that is free now and that the kernel will not hand
// out meanwhile: the workers bind it later, and a port taken from the
// ephemeral range (what binding port 0 gives) can go to any process's
// outgoing connection in between (seen: torch's TCPStore failing with
// EADDRINUSE while other jobs connected). So a port below
// ip_local_port_range and below torchrun's and Slurm's defaults (29400 and
// up, launcher/slurm_defaults.h), free when tried; port 0's answer if none is.
absl::StatusOr<uint16_t> FreePort(const std::string& host) {
  int low = 32768;
  if (FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(range, "%d", &low) != 1) low = 32768;
    std::fclose(range);
  }
  const int first = std::max(1024, low - 12000);
  low = std::min(low, static_cast<int>(kDefaultRdzvPort));
  if (low - first >= 1000) {
    std::minstd_rand generator(std::random_device{}());
    std::uniform_int_distribution<int> pick(first, low - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const auto port = static_cast<uint16_t>(pick(generator));
      if (absl::StatusOr<TcpListener> probe = TcpListener::Listen(host, port); probe.ok()) return port;
    }
  }
  BRAID_ASSIGN_OR_RETURN(TcpListener listener, TcpListener::Listen(host, 0));
  return listener.port();
}

}  // namespace

void Say(const std::string& line) {
  const std::string text = absl::StrCat("braidrun: ", line, "\n");
  (void)!write(STDERR_FILENO, text.data(), text.size());
}

std::string RandomId() {
  unsigned char bytes[6] = {};
  UniqueFd fd(open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (fd.valid()) (void)!read(fd.get(), bytes, sizeof(bytes));
  std::string id;
  for (unsigned char b : bytes) absl::StrAppend(&id, absl::Hex(b, absl::kZeroPad2));
  return id;
}

void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* file, const struct stat*, int, struct FTW*) { return remove(file); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

std::string Agent::AttemptDir(int round, int global_rank) const {
  return absl::StrCat(files_dir_, "/attempt_", round, "/", global_rank);
}

// The workers' namespace in the job's store (BRAID_STORE_PREFIX), and store/membership.h's.
std::string Agent::WorkersPrefix(int round) const {
  return absl::StrCat("braidrun/", run_id_, "/r", round, "/workers");
}

std::string Agent::HostLabel(const RendezvousResult& members) const {
  return absl::StrCat(host_, " (", members.nodes[members.node_rank].addr, ")");
}

absl::StatusOr<std::string> Agent::Master(const RendezvousResult& members) {
  const bool single = members.nodes.size() == 1;
  std::string addr = o_.master_addr;
  if (addr.empty()) addr = single ? "127.0.0.1" : members.nodes[0].addr;
  if (o_.rdzv_backend == "static" && !single) {
    return absl::StrCat(addr, ":", o_.master_port > 0 ? o_.master_port : kDefaultMasterPort);
  }
  if (o_.master_port > 0) {
    if (members.node_rank == 0 && members.incarnation == 0) {
      // Rank 0 of a PyTorch script will bind it (on every interface): say
      // now, by name, if something already holds it.
      absl::StatusOr<TcpListener> probe = TcpListener::Listen("0.0.0.0", static_cast<uint16_t>(o_.master_port));
      if (!probe.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("--master-port ", o_.master_port, " is already in use on this host (", probe.status().message(),
                         "): choose a free port, or leave --master-port out to get one"));
      }
    }
    return absl::StrCat(addr, ":", o_.master_port);
  }
  if (members.node_rank == 0 && members.incarnation == 0) {
    // A fresh free port per round, so two jobs (or two rounds) never collide.
    BRAID_ASSIGN_OR_RETURN(uint16_t port, FreePort(single ? addr : members.nodes[0].addr));
    const std::string master = absl::StrCat(addr, ":", port);
    if (!single) BRAID_RETURN_IF_ERROR(rdzv_->PublishMaster(members.round, master));
    return master;
  }
  return rdzv_->Master(members.round);
}

absl::StatusOr<std::vector<WorkerSpec>> Agent::Specs(const RendezvousResult& members, const std::string& master) {
  const size_t colon = master.rfind(':');
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) base.emplace_back(*e);
  const int world = members.world_size();
  const int nproc = members.nodes[members.node_rank].nproc;
  SetEnvVar(base, launch_env::kWorldSize, absl::StrCat(world));
  SetEnvVar(base, launch_env::kLocalWorldSize, absl::StrCat(nproc));
  SetEnvVar(base, launch_env::kGroupRank, absl::StrCat(members.node_rank));
  SetEnvVar(base, launch_env::kGroupWorldSize, absl::StrCat(members.nodes.size()));
  SetEnvVar(base, launch_env::kRoleName, o_.role);
  SetEnvVar(base, launch_env::kRoleWorldSize, absl::StrCat(world));
  SetEnvVar(base, launch_env::kMasterAddr, master.substr(0, colon));
  SetEnvVar(base, launch_env::kMasterPort, master.substr(colon + 1));
  SetEnvVar(base, launch_env::kRestartCount, absl::StrCat(restarts_));
  // A node's next incarnation: its workers join the running group.
  if (members.incarnation > 0) SetEnvVar(base, launch_env::kJoinRunning, "1");
  SetEnvVar(base, launch_env::kMaxRestarts, absl::StrCat(o_.max_restarts));
  SetEnvVar(base, launch_env::kRunId, run_id_);
  // braid's store does not speak PyTorch's protocol: PyTorch hosts its own.
  SetEnvVar(base, launch_env::kUseAgentStore, "False");
  SetEnvVar(base, launch_env::kOmpNumThreads, "1", /*override=*/false);
  SetEnvVar(base, launch_env::kStoreAddr, ToString(store_.address));
  SetEnvVar(base, launch_env::kStorePrefix, WorkersPrefix(members.round));
  // Flight-recorder dumps next to the logs, per attempt (kept when the job fails).
  SetEnvVar(base, launch_env::kFlightDir, absl::StrCat(files_dir_, "/attempt_", members.round, "/flight"),
            /*override=*/false);

  const std::vector<std::string> command = WorkerCommand(o_);
  std::vector<WorkerSpec> specs;
  if (o_.mpi) {
    // One mpirun starts them all; each worker reads Open MPI's variables.
    WorkerSpec spec;
    spec.label = "mpirun";
    spec.argv = {"mpirun", "--oversubscribe", "-np", absl::StrCat(nproc)};
    if (geteuid() == 0) spec.argv.push_back("--allow-run-as-root");
    // Each rank gets torchrun's per-rank variables from Open MPI's.
    const std::string dir = absl::StrCat(files_dir_, "/attempt_", members.round);
    spec.argv.insert(spec.argv.end(),
                     {"/bin/sh", "-c",
                      absl::StrCat("export ", launch_env::kRank, "=$", launch_env::kOmpiRank, " ",
                                   launch_env::kLocalRank, "=$", launch_env::kOmpiLocalRank, " ", launch_env::kRoleRank,
                                   "=$", launch_env::kOmpiRank, " ", launch_env::kErrorFile, "=", dir, "/$",
                                   launch_env::kOmpiRank, "/error.json; mkdir -p ", dir, "/$", launch_env::kOmpiRank,
                                   "; exec \"$@\""),
                      "braidrun-worker"});
    spec.argv.insert(spec.argv.end(), command.begin(), command.end());
    spec.env = base;
    specs.push_back(std::move(spec));
    return specs;
  }
  const int first = members.first_global_rank();
  for (int local = 0; local < nproc; ++local) {
    WorkerSpec spec;
    spec.local_rank = local;
    spec.global_rank = first + local;
    spec.argv = command;
    spec.env = base;
    SetEnvVar(spec.env, launch_env::kRank, absl::StrCat(spec.global_rank));
    SetEnvVar(spec.env, launch_env::kLocalRank, absl::StrCat(local));
    SetEnvVar(spec.env, launch_env::kRoleRank, absl::StrCat(spec.global_rank));
    const std::string dir = AttemptDir(members.round, spec.global_rank);
    spec.error_file = absl::StrCat(dir, "/error.json");
    SetEnvVar(spec.env, launch_env::kErrorFile, spec.error_file);
    const int files = o_.redirects.For(local) | o_.tee.For(local);
    const int redirected = o_.redirects.For(local);
    if (files & 1) spec.stdout_log = absl::StrCat(dir, "/stdout.log");
    if (files & 2) spec.stderr_log = absl::StrCat(dir, "/stderr.log");
    bool shown = o_.local_ranks_filter.empty();
    for (int r : o_.local_ranks_filter) shown = shown || r == local;
    spec.stdout_to_console = shown && !(redirected & 1);
    spec.stderr_to_console = shown && !(redirected & 2);
    specs.push_back(std::move(spec));
  }
  return specs;
}

// --restart-policy=replace: replaces the failed worker of `exit` in place
// unless no restart is left or the workers asked for a full restart (the
// fallback key). Whether it did; when not, the failure restarts everything as
// under --restart-policy=all. No settle wait: the survivors are waiting.
bool Agent::Replace(WorkerGroup& group, const RendezvousResult& members, ReplacePolicy& policy,
                    const WorkerExit& exit) {
  if (restarts_ >= o_.max_restarts) return false;
  absl::StatusOr<std::string> fallback = policy.FallbackReason();
  if (!fallback.ok() || !fallback->empty()) return false;  // a lost store: Monitor finds out next
  const std::string how = policy.How(exit);
  if (absl::Status replaced = policy.Replace(group, exit, how, restarts_ + 1); !replaced.ok()) {
    Say(absl::StrCat("rank ", exit.global_rank, " failed: ", how, "; cannot replace it: ", replaced.message()));
    return false;
  }
  ++restarts_;
  replaced_ranks_.push_back(exit.global_rank);
  replaced_failures_.push_back({exit.time, exit.global_rank, exit.local_rank, HostLabel(members), how, exit.tail});
  (void)rdzv_->RecordFailure(members.round, replaced_failures_.back());
  Say(absl::StrCat("rank ", exit.global_rank, " failed: ", how, "; replacing it, the others keep running ",
                   "(--restart-policy=replace, restart ", restarts_, " of ", o_.max_restarts, ")"));
  return true;
}

std::optional<Outcome> Agent::CheckRound(const RendezvousResult& members, NodeLiveness& liveness,
                                        ReplacePolicy* replace) {
  absl::StatusOr<std::string> reason = rdzv_->RestartReason(members.round);
  if (!reason.ok()) {
    stop_reason_ = absl::StrCat("lost the rendezvous store at ", ToString(store_.address), ": ",
                                reason.status().message());
    return Outcome::kStoreLost;
  }
  if (!reason->empty()) {
    stop_reason_ = *reason;
    return Outcome::kRemoteRestart;
  }
  if (absl::Status watched = Watch(members, liveness, replace); !watched.ok()) {
    stop_reason_ = absl::IsCancelled(watched) ? std::string(watched.message())
                                              : absl::StrCat("lost the rendezvous store at ", ToString(store_.address),
                                                             ": ", watched.message());
    return absl::IsCancelled(watched) ? Outcome::kLost : Outcome::kStoreLost;
  }
  return std::nullopt;
}

Outcome Agent::Monitor(WorkerGroup& group, const RendezvousResult& members, NodeLiveness& liveness,
                       ReplacePolicy* replace) {
  absl::Time next_check = absl::Now();
  while (true) {
    absl::StatusOr<WorkerEvents> events = group.Poll(std::max(next_check, absl::Now()));
    if (!events.ok()) {
      stop_reason_ = std::string(events.status().message());
      return Outcome::kStoreLost;
    }
    if (events->signal != 0) {
      signal_ = events->signal;
      return Outcome::kSignal;
    }
    // A node the others declared lost (this agent was stopped) must not
    // replace its workers: they were left out on purpose.
    if (replace != nullptr && !events->exited.empty()) {
      if (std::optional<Outcome> ended = CheckRound(members, liveness, replace)) return *ended;
    }
    std::vector<WorkerExit> failed;
    for (const WorkerExit& exit : events->exited) {
      if (!exit.succeeded() && (replace == nullptr || !Replace(group, members, *replace, exit))) failed.push_back(exit);
    }
    // A worker killed by a signal is the likelier cause: its peers exit with
    // an error once they notice it is gone, and one of them can be reaped
    // first (the kernel releases a dying process's memory before it becomes a
    // zombie). So a failure waits a moment for the others before it is told.
    const Deadline settle = DeadlineIn(kFailureSettle);
    while (!failed.empty() && group.running() > 0 && !Expired(settle)) {
      absl::StatusOr<WorkerEvents> more = group.Poll(settle);
      if (!more.ok()) break;
      for (const WorkerExit& exit : more->exited) {
        if (!exit.succeeded()) failed.push_back(exit);
      }
      if (more->signal != 0) {
        signal_ = more->signal;
        return Outcome::kSignal;
      }
    }
    std::stable_partition(failed.begin(), failed.end(),
                          [](const WorkerExit& exit) { return WIFSIGNALED(exit.wait_status); });
    for (const WorkerExit& exit : failed) {
      local_failures_.push_back({exit.time, exit.global_rank, exit.local_rank, HostLabel(members),
                                 replace != nullptr ? replace->How(exit) : exit.Describe(), exit.tail});
    }
    if (!local_failures_.empty()) return Outcome::kLocalFailure;
    if (group.running() == 0) return Outcome::kSucceeded;
    if (absl::Now() < next_check) continue;
    next_check = absl::Now() + o_.monitor_interval;
    if (std::optional<Outcome> ended = CheckRound(members, liveness, replace)) return *ended;
    if (replace != nullptr) {
      // The survivors' verdicts: a live worker they left out (killed here,
      // its exit is replaced above), or too few ranks left for recovery in place.
      absl::StatusOr<std::vector<std::string>> evicted = replace->KillEvicted(group);
      for (const std::string& line : evicted.ok() ? *evicted : std::vector<std::string>()) Say(line);
      absl::StatusOr<std::string> fallback = evicted.ok() ? replace->FallbackReason() : evicted.status();
      if (!fallback.ok()) {
        stop_reason_ = absl::StrCat("lost the rendezvous store at ", ToString(store_.address), ": ",
                                    fallback.status().message());
        return Outcome::kStoreLost;
      }
      if (!fallback->empty() && restarts_ < o_.max_restarts) {
        absl::StatusOr<std::string> why =
            rdzv_->RequestRestart(members.round, absl::StrCat("the workers asked for a full restart: ", *fallback));
        stop_reason_ = why.ok() ? *why : std::string(why.status().message());
        return Outcome::kRemoteRestart;
      }
    }
    if (static_cast<int>(members.nodes.size()) < o_.max_nodes) {
      absl::StatusOr<bool> waiting = rdzv_->NodesWaiting(members.round);
      if (waiting.ok() && *waiting) return Outcome::kMembershipChange;
    }
  }
}

void Agent::Report(const RendezvousResult& members) {
  absl::StatusOr<std::vector<FailureRecord>> all = rdzv_->Failures(members.round);
  // Without the store (it is gone), this node's own failures are all we know.
  std::vector<FailureRecord> failures = replaced_failures_;
  failures.insert(failures.end(), local_failures_.begin(), local_failures_.end());
  if (all.ok()) failures = *all;
  std::string text = absl::StrCat(
      "================ braidrun: job failed ================\n", "run id ", run_id_, ", attempt ",
      members.round, ", restarts used ", restarts_, " of ", o_.max_restarts, ", world size ",
      members.world_size(), "\n",
      RestartPolicyLine(o_.restart_policy, replaced_ranks_, restarts_, o_.max_restarts), "\n");
  if (failures.empty()) {
    absl::StrAppend(&text, "no worker failed; the job stopped because: ", stop_reason_, "\n");
  } else {
    if (!all.ok()) absl::StrAppend(&text, "the job stopped because: ", stop_reason_, "\n");
    const FailureRecord& first = failures.front();
    absl::StrAppend(&text, "first failure: rank ", first.global_rank, " (local rank ", first.local_rank, ") on ",
                    first.host, ": ", first.how, " at ",
                    absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC", first.time, absl::UTCTimeZone()), "\n");
    for (size_t i = 1; i < failures.size(); ++i) {
      absl::StrAppend(&text, "also failed: rank ", failures[i].global_rank, ": ", failures[i].how, " (+",
                      absl::FormatDuration(failures[i].time - first.time), ")\n");
    }
    absl::StrAppend(&text, "last output of rank ", first.global_rank, ":\n");
    for (absl::string_view line : absl::StrSplit(first.tail, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&text, "  ", line, "\n");
    }
  }
  absl::StrAppend(&text, "logs, error files and flight-recorder dumps: ", files_dir_, "/attempt_", members.round,
                  " (tools/flight_analyze.py ", files_dir_, "/attempt_", members.round, "/flight)\n");
  absl::StrAppend(&text, "======================================================\n");
  (void)!write(STDERR_FILENO, text.data(), text.size());
}

}  // namespace agent_internal

int RunAgent(const LaunchOptions& options) { return agent_internal::Agent(options).Run(); }

}  // namespace braid
