#include "runtime/elastic.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/auth.h"
#include "base/deadline.h"
#include "base/launch_env.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/socket.h"
#include "base/status.h"
#include "collectives/transport/registry.h"
#include "store/tcp_store.h"
#include "tensor/tensor.h"

namespace braid {
namespace {

using membership::Member;

// How often the watcher re-asks the store (and so how long it takes to stop).
constexpr absl::Duration kWatchSlice = absl::Milliseconds(200);

// One process: the same id and incarnation (the host is only its layout).
bool SameProcess(const Member& a, const Member& b) { return a.id == b.id && a.token == b.token; }

bool Has(const std::vector<Member>& members, const Member& m) {
  return std::any_of(members.begin(), members.end(), [&](const Member& x) { return SameProcess(x, m); });
}

std::string Ids(const std::vector<Member>& members) {
  return absl::StrJoin(members, ", ", [](std::string* out, const Member& m) { absl::StrAppend(out, m.id); });
}

absl::StatusOr<bool> Exists(Store& store, const std::string& key) { return store.Check({key}); }

absl::StatusOr<std::shared_ptr<Store>> ConnectStore(const WorkerEnv& env, const JobSecret& secret, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(const HostPort address, ParseHostPort(env.store_addr, 0));
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> client, TcpStore::Connect(address, deadline, secret));
  std::shared_ptr<Store> base = std::move(client);
  if (env.store_prefix.empty()) return base;
  return std::shared_ptr<Store>(std::make_shared<PrefixStore>(env.store_prefix, base));
}

// Why epoch `epoch` was revoked (kAborted), or OK while it stands.
absl::Status EpochRevoked(Store& membership_store, int64_t epoch) {
  BRAID_ASSIGN_OR_RETURN(const std::optional<std::string> cause,
                         GetIfSet(membership_store, membership::RevokedKey(epoch)));
  if (!cause.has_value()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("epoch ", epoch, " revoked while its group was built: ", *cause));
}

// The store a new epoch's group is built over: a wait on it ends with
// `called_off`'s error (kAborted once the epoch is revoked: a member died
// while the group was built, and its agent revoked the epoch being formed)
// within a slice, rather than at the timeout. The group's transports ask
// the same question while they connect (Bootstrap::CalledOff).
class RevocableStore : public Store {
 public:
  RevocableStore(std::shared_ptr<Store> inner, std::function<absl::Status()> called_off)
      : inner_(std::move(inner)), called_off_(std::move(called_off)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override { return inner_->Set(key, value); }
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override { return inner_->Add(key, delta); }
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override {
    return inner_->CompareSet(key, expected, desired);
  }
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override { return inner_->Check(keys); }
  absl::StatusOr<bool> Delete(absl::string_view key) override { return inner_->Delete(key); }
  absl::StatusOr<int64_t> NumKeys() override { return inner_->NumKeys(); }
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override {
    return InSlices(
        deadline, kWatchSlice, [&](Deadline until) { return inner_->Get(key, until); }, called_off_);
  }
  absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline) override {
    return InSlices(
        deadline, kWatchSlice, [&](Deadline until) { return inner_->Wait(keys, until); }, called_off_);
  }

 private:
  const std::shared_ptr<Store> inner_;
  const std::function<absl::Status()> called_off_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ElasticGroup>> ElasticGroup::Create(const WorkerEnv& env, ElasticOptions options) {
  if (env.under_mpirun || RequestedTransport(options.group.transport) == "mpi") {
    return absl::FailedPreconditionError(
        "in-place recovery cannot run over MPI: Open MPI 4.1 has no ULFM, so an MPI job cannot outlive a rank "
        "(use shm or tcp under braidrun)");
  }
  if (env.store_addr.empty()) {
    return absl::FailedPreconditionError(
        "in-place recovery needs a store that outlives every worker (braidrun's, BRAID_STORE_ADDR); a store "
        "hosted by rank 0 would die with it: start the job with braidrun");
  }
  if (options.group.store != nullptr) return absl::InvalidArgumentError("ElasticOptions::group.store must be empty");
  std::unique_ptr<ElasticGroup> elastic(new ElasticGroup());
  ElasticGroup& e = *elastic;
  e.env_ = env;
  e.options_ = std::move(options);
  BRAID_ASSIGN_OR_RETURN(e.timeout_, ResolveTimeout(e.options_.group.timeout));
  e.options_.group.timeout = e.timeout_;
  e.id_ = env.rank;
  e.world0_ = env.world_size;
  const std::string host = HostName();
  e.me_ = Member{env.rank, membership::ProcessToken(host, getpid()),
                 e.options_.group.communicator.host_name.empty() ? host : e.options_.group.communicator.host_name};
  const char* join = std::getenv(launch_env::kJoinRunning);
  e.joined_running_ = join != nullptr && std::string(join) == "1";
  SetLogRank(env.rank);

  const Deadline deadline = DeadlineIn(e.timeout_);
  BRAID_ASSIGN_OR_RETURN(const JobSecret secret, JobSecret::FromEnv());
  BRAID_ASSIGN_OR_RETURN(e.store_, ConnectStore(env, secret, deadline));
  BRAID_ASSIGN_OR_RETURN(e.watcher_store_, ConnectStore(env, secret, deadline));

  std::vector<Member> everyone;
  for (int id = 0; id < e.world0_; ++id) everyone.push_back(Member{id, "", ""});
  absl::Status joined;
  BRAID_ASSIGN_OR_RETURN(const int64_t latest, membership::Latest(*e.store_));
  if (!e.joined_running_ || latest < 0) {
    joined = e.JoinFrom(0, everyone, /*everyone=*/true);
  } else {
    bool decided = false;
    BRAID_ASSIGN_OR_RETURN(std::vector<Member> current, membership::MembersIfDecided(*e.store_, latest, &decided));
    joined = e.JoinFrom(latest + 1, current, /*everyone=*/false);
  }
  BRAID_RETURN_IF_ERROR(Annotate(joined, absl::StrCat("rank ", env.rank, ": elastic group")));
  e.watcher_ = std::thread([&e] { e.Watch(); });
  return elastic;
}

ElasticGroup::~ElasticGroup() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    epoch_changed_.Signal();
  }
  if (watcher_.joinable()) watcher_.join();
  std::unique_ptr<ProcessGroup> current;
  {
    MutexLock lock(&mu_);
    current = std::move(group_);
  }
  current.reset();
  retired_.clear();
}

ProcessGroup& ElasticGroup::group() {
  MutexLock lock(&mu_);
  return *group_;
}

absl::Status ElasticGroup::Revoke(absl::string_view cause) {
  BRAID_ASSIGN_OR_RETURN(const std::string standing, membership::Revoke(*store_, epoch_, cause));
  MutexLock lock(&mu_);
  if (revoked_.ok()) revoked_ = absl::AbortedError(absl::StrCat("epoch ", epoch_, " revoked: ", standing));
  if (group_) group_->comm().Abort(revoked_);
  return absl::OkStatus();
}

absl::Status ElasticGroup::Reform(const absl::Status& cause) {
  const std::string why = cause.ok() ? std::string("asked to regroup") : std::string(cause.message());
  BRAID_RETURN_IF_ERROR(Revoke(absl::StrCat("rank ", id_, " (", me_.token, "): ", why)));
  const absl::Time start = absl::Now();
  BRAID_RETURN_IF_ERROR(Annotate(JoinFrom(epoch_ + 1, members_, /*everyone=*/false),
                                 absl::StrCat("rank ", id_, ": regrouping after epoch ", epoch_)));
  BRAID_LOG(INFO) << "elastic: epoch " << epoch_ << " up with " << members_.size() << " ranks (ids "
                  << Ids(members_) << ") in " << absl::FormatDuration(absl::Now() - start);
  return absl::OkStatus();
}

absl::Status ElasticGroup::JoinFrom(int64_t from, std::vector<Member> expected, bool everyone) {
  for (int64_t epoch = from;; ++epoch) {
    BRAID_ASSIGN_OR_RETURN(const bool evicted, Exists(*store_, membership::EvictKey(id_, me_.token)));
    if (evicted) {
      return absl::AbortedError(absl::StrCat("rank ", id_, " (", me_.token, ") was left out by the others (it did "
                                             "not check in within the timeout)"));
    }
    BRAID_RETURN_IF_ERROR(store_->Set(membership::CheckInKey(epoch, id_), membership::EncodeCheckIn(me_)));
    // A newcomer makes the running epoch end, so that its members regroup with it.
    if (epoch > 0 && epoch_ != epoch - 1) {
      BRAID_RETURN_IF_ERROR(
          membership::Revoke(*store_, epoch - 1, absl::StrCat("rank ", id_, " (", me_.token, ") joins")).status());
    }
    BRAID_ASSIGN_OR_RETURN(std::vector<Member> members, Agree(epoch, expected, everyone));
    everyone = false;
    if (!Has(members, me_)) {
      if (epoch_ >= 0) {
        return absl::AbortedError(absl::StrCat("rank ", id_, " (", me_.token, ") was left out of epoch ", epoch,
                                               " (members: ", Ids(members), ")"));
      }
      expected = std::move(members);  // a newcomer that came too late for `epoch`: the next one
      continue;
    }
    if (static_cast<int>(members.size()) < options_.min_ranks) {
      const std::string why = absl::StrCat("only ", members.size(), members.size() == 1 ? " rank is" : " ranks are",
                                           " left (ids ", Ids(members),
                                           "), fewer than the minimum of ", options_.min_ranks);
      (void)store_->CompareSet(membership::FallbackKey(), "", why);
      return absl::UnavailableError(absl::StrCat(why, ": asking braidrun to restart everything"));
    }
    absl::Status built = Build(epoch, members);
    if (built.ok()) return membership::AdvanceLatest(*store_, epoch);
    BRAID_LOG(WARNING) << "elastic: building epoch " << epoch << " failed, regrouping: " << built.message();
    BRAID_RETURN_IF_ERROR(
        membership::Revoke(*store_, epoch, absl::StrCat("rank ", id_, " could not build it: ", built.message()))
            .status());
    epoch_ = epoch;  // a member of the failed epoch: no newcomer's revoke for it
    expected = std::move(members);
  }
}

absl::StatusOr<std::vector<Member>> ElasticGroup::Agree(int64_t epoch, const std::vector<Member>& expected,
                                                        bool everyone) {
  const Deadline deadline = DeadlineIn(timeout_);
  absl::Duration backoff = absl::Milliseconds(1);
  while (true) {
    bool decided = false;
    BRAID_ASSIGN_OR_RETURN(std::vector<Member> members, membership::MembersIfDecided(*store_, epoch, &decided));
    if (decided) return members;
    // Whom the decision still waits for: expected members neither in nor
    // seen dead by their agent.
    std::vector<Member> missing;
    for (const Member& m : expected) {
      BRAID_ASSIGN_OR_RETURN(const bool in, Exists(*store_, membership::CheckInKey(epoch, m.id)));
      if (in) continue;
      if (!everyone) {
        BRAID_ASSIGN_OR_RETURN(const bool dead, Exists(*store_, membership::DeadKey(m.id, m.token)));
        if (dead) continue;
      }
      missing.push_back(m);
    }
    if (!missing.empty() && !Expired(deadline)) {
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(20));
      continue;
    }
    if (everyone && !missing.empty()) {
      return absl::DeadlineExceededError(absl::StrCat("ranks ", Ids(missing), " of ", world0_,
                                                      " never checked in for epoch ", epoch, " within ",
                                                      absl::FormatDuration(timeout_)));
    }
    // Decide: everyone checked in now, less those seen dead since.
    std::vector<Member> present;
    for (int id = 0; id < world0_; ++id) {
      BRAID_ASSIGN_OR_RETURN(const std::optional<std::string> value,
                             GetIfSet(*store_, membership::CheckInKey(epoch, id)));
      if (!value.has_value()) continue;
      BRAID_ASSIGN_OR_RETURN(Member m, membership::DecodeCheckIn(id, *value));
      BRAID_ASSIGN_OR_RETURN(const bool dead, Exists(*store_, membership::DeadKey(m.id, m.token)));
      if (!dead) present.push_back(std::move(m));
    }
    const std::string proposal = membership::EncodeMembers(present);
    BRAID_ASSIGN_OR_RETURN(const std::string standing,
                           store_->CompareSet(membership::MembersKey(epoch), "", proposal));
    if (standing == proposal) {
      for (const Member& m : missing) {
        BRAID_LOG(WARNING) << "elastic: rank " << m.id << " (" << m.token << ") did not check in for epoch " << epoch
                           << " within " << absl::FormatDuration(timeout_) << ": left out";
        BRAID_RETURN_IF_ERROR(store_->Set(membership::EvictKey(m.id, m.token),
                                          absl::StrCat("no check-in for epoch ", epoch, " within ",
                                                       absl::FormatDuration(timeout_))));
      }
    }
  }
}

absl::Status ElasticGroup::Build(int64_t epoch, std::vector<Member> members) {
  WorkerEnv env = env_;
  env.world_size = static_cast<int>(members.size());
  env.local_world_size = 0;
  env.local_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (SameProcess(members[i], me_)) {
      env.rank = static_cast<int>(i);
      env.local_rank = env.local_world_size;
    }
    if (members[i].host == me_.host) ++env.local_world_size;
  }
  env.store_prefix.clear();
  env.under_mpirun = false;
  ProcessGroupOptions options = options_.group;
  // One question for the group's store waits and its transports' connections
  // (tcp: a member that died after the address exchange is never connected to).
  options.called_off = [membership_store = store_, epoch] { return EpochRevoked(*membership_store, epoch); };
  options.store = std::make_shared<RevocableStore>(
      std::make_shared<PrefixStore>(absl::StrCat("elastic/e", epoch, "/group"), store_), options.called_off);
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, ProcessGroup::Create(env, std::move(options)));
  SetLogRank(id_);  // logs keep the launch rank: the id the others know
  MutexLock lock(&mu_);
  if (group_) retired_.push_back(std::move(group_));
  group_ = std::move(group);
  epoch_ = epoch;
  members_ = std::move(members);
  watched_epoch_ = epoch;
  revoked_ = absl::OkStatus();
  epoch_changed_.Signal();
  return absl::OkStatus();
}

absl::StatusOr<int> ElasticGroup::MostAdvanced(int64_t progress) {
  Communicator& comm = group().comm();
  BRAID_ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({1}, DType::kI64));
  BRAID_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({comm.size()}, DType::kI64));
  mine.data<int64_t>()[0] = progress;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllGather(mine, all));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(timeout_)));
  int best = 0;
  for (int r = 1; r < comm.size(); ++r) {
    if (all.data<int64_t>()[r] > all.data<int64_t>()[best]) best = r;
  }
  return best;
}

void ElasticGroup::Watch() {
  while (true) {
    int64_t epoch = -1;
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      epoch = watched_epoch_;
      if (!revoked_.ok()) {
        // Seen: wait for the next epoch (or the end).
        if (!WatchedEpochOver()) WaitWithTimeout(&epoch_changed_, &mu_, kWatchSlice);
        continue;
      }
    }
    absl::StatusOr<std::string> cause = watcher_store_->Get(membership::RevokedKey(epoch), DeadlineIn(kWatchSlice));
    if (!cause.ok()) {
      if (!absl::IsDeadlineExceeded(cause.status())) absl::SleepFor(kWatchSlice);  // the store is gone: keep trying
      continue;
    }
    MutexLock lock(&mu_);
    if (watched_epoch_ != epoch || !revoked_.ok()) continue;
    revoked_ = absl::AbortedError(absl::StrCat("epoch ", epoch, " revoked: ", *cause));
    if (group_) group_->comm().Abort(revoked_);
  }
}

}  // namespace braid
