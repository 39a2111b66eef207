// ElasticGroup: a process group that survives the loss of ranks, in place.
//
//   BRAID_ASSIGN_OR_RETURN(auto elastic, braid::ElasticGroup::Create(env));
//   while (...) {
//     absl::Status step = TrainStep(elastic->group());
//     if (!step.ok()) {
//       BRAID_RETURN_IF_ERROR(elastic->Reform(step));   // survivors (and newcomers) regroup
//       ... sync the model state from elastic->MostAdvanced(...), redo the step ...
//     }
//   }
//
// Its life is a sequence of membership epochs (store/membership.h), each with
// its own ProcessGroup over a fresh transport (the registry's choice for the
// new members: shm on one host, else tcp), met through the launcher's store:
// no new process, no new rendezvous round. Members keep their launch RANK as
// their id; ranks in an epoch follow the ids' order.
//
// Revoke: when a collective fails (a dead peer, a deadline, an abort notice)
// the communicator's own abort reaches the peers it talks to; Reform (or
// Revoke) also records the cause as the epoch's revocation in the store, and
// every member's watcher thread aborts its communicator on seeing it, so
// ranks that were not talking to the dead one fail fast too, with that cause.
// braidrun's agent revokes the epoch when it sees a worker die.
//
// Agreement: each survivor checks in for the next epoch; the first to see
// every expected member in (the previous members less those its agent saw
// die) or the timeout (BRAID_TIMEOUT_SEC) pass decides the member list, by
// CompareSet, once. Whoever checks in later is left out (kAborted) and
// marked evicted, so its agent kills and replaces it; no process can be in
// two member lists of one epoch. A death while the new group is built fails
// that build and starts the next epoch within a slice (200 ms) of its
// agent's DeclareDead, whether the members are exchanging addresses (the
// store's waits) or connecting their transports (Bootstrap::CalledOff).
//
// Grow: a process started with BRAID_JOIN_RUNNING=1 (braidrun's replacement
// for a failed worker) checks in for the next epoch and revokes the current
// one; the members' next collective fails, they Reform, and the newcomer is
// among the members. Its state comes from the others (MostAdvanced).
//
// Needs a store that outlives every worker (braidrun's: BRAID_STORE_ADDR).
// Not over mpi: Open MPI 4.1 has no ULFM, so an MPI job cannot lose a rank.
//
// Threads: one thread calls Create, Reform and MostAdvanced; group() may be
// used from any thread between Reforms. A watcher thread runs inside.
#ifndef BRAID_RUNTIME_ELASTIC_H_
#define BRAID_RUNTIME_ELASTIC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/process_group.h"
#include "runtime/worker_env.h"
#include "store/membership.h"
#include "store/store.h"

namespace braid {

struct ElasticOptions {
  // Each epoch's process group (transport, timeout, communicator options);
  // `store` must be left empty.
  ProcessGroupOptions group;
  // Fewer members than this: Reform fails kUnavailable and asks braidrun,
  // through the store, to restart everything (the checkpoint fallback).
  int min_ranks = 1;
};

class ElasticGroup {
 public:
  // Collective over the launch's WORLD_SIZE ranks (epoch 0); with
  // BRAID_JOIN_RUNNING=1, joins the running group instead (a grow).
  static absl::StatusOr<std::unique_ptr<ElasticGroup>> Create(const WorkerEnv& env, ElasticOptions options = {});
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // The current epoch's group. A group replaced by Reform stays alive (its
  // communicator aborted) until this object dies, so a reducer built on it
  // can still be destroyed safely.
  ProcessGroup& group();
  int64_t epoch() const { return epoch_; }
  int id() const { return id_; }
  bool joined_running() const { return joined_running_; }
  const std::vector<membership::Member>& members() const { return members_; }

  // After a collective of the current group failed with `cause` (or when
  // the watcher saw the epoch revoked): revokes the epoch, agrees on the
  // next members with the others and builds their group; retries with the
  // next epoch when a member dies meanwhile. kAborted when this process was
  // left out; kUnavailable when fewer than min_ranks remain (the fallback
  // key is set); kDeadlineExceeded when nobody decides in time.
  absl::Status Reform(const absl::Status& cause);
  // Revokes the current epoch with `cause` (every member's communicator
  // fails fast with it); Reform follows.
  absl::Status Revoke(absl::string_view cause);

  // Collective over the current group: every rank's `progress` (steps done,
  // say); returns the lowest rank of those with the most, which the others
  // copy their state from (a newcomer passes -1).
  absl::StatusOr<int> MostAdvanced(int64_t progress);

 private:
  ElasticGroup() = default;
  // Checks in for `epoch` and waits for its member list. `expected`: the
  // ids whose check-in the decision waits for (others are taken if present).
  absl::StatusOr<std::vector<membership::Member>> Agree(int64_t epoch, const std::vector<membership::Member>& expected,
                                                        bool everyone);
  // Builds `members`' group for `epoch`; this process is one of them.
  absl::Status Build(int64_t epoch, std::vector<membership::Member> members);
  // Check in for `from` and on until a member list has this process.
  absl::Status JoinFrom(int64_t from, std::vector<membership::Member> expected, bool everyone);
  void Watch();
  // The watcher's wait after a revocation: the end, or the next epoch.
  bool WatchedEpochOver() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || revoked_.ok(); }

  WorkerEnv env_;
  ElasticOptions options_;
  absl::Duration timeout_;
  int id_ = 0;
  int world0_ = 0;  // the launch's WORLD_SIZE: ids are below it
  membership::Member me_;
  bool joined_running_ = false;
  std::shared_ptr<Store> store_;    // the workers' namespace
  std::shared_ptr<Store> watcher_store_;  // its own connection: its Gets block
  int64_t epoch_ = -1;
  std::vector<membership::Member> members_;
  std::vector<std::unique_ptr<ProcessGroup>> retired_;

  mutable absl::Mutex mu_;
  std::unique_ptr<ProcessGroup> group_ ABSL_GUARDED_BY(mu_);
  int64_t watched_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status revoked_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Signalled when watched_epoch_ moves on or stopping_ is set (a condition
  // variable, not an Await: see communicator.h).
  absl::CondVar epoch_changed_;
  std::thread watcher_;
};

}  // namespace braid

#endif  // BRAID_RUNTIME_ELASTIC_H_
