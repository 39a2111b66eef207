#include "collectives/device/device_collectives.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/mutex.h"
#include "base/status.h"
#include "collectives/programs/program.h"

namespace braid {
namespace {

constexpr absl::Duration kWatchEvery = absl::Milliseconds(100);
constexpr absl::Duration kDrain = absl::Seconds(30);

}  // namespace

// What the watchdog and the streams' callbacks share; outlives the object
// if a callback comes after it (a device that never drained).
struct DeviceCollectives::State {
  struct Pending {
    Deadline deadline;
    std::string what;
    OnDone done;
  };
  absl::Mutex mu;
  absl::CondVar wake;
  std::map<uint64_t, Pending> pending ABSL_GUARDED_BY(mu);
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  bool stopping ABSL_GUARDED_BY(mu) = false;

  void Complete(uint64_t id, absl::Status status) {
    OnDone done;
    {
      MutexLock lock(&mu);
      auto it = pending.find(id);
      if (it == pending.end()) return;  // failed already
      done = std::move(it->second.done);
      pending.erase(it);
    }
    done(std::move(status));
  }
  void FailAll(const absl::Status& cause) {
    std::map<uint64_t, Pending> failed;
    {
      MutexLock lock(&mu);
      failed.swap(pending);
    }
    for (auto& [id, p] : failed) p.done(cause);
  }
};

DeviceCollectives::DeviceCollectives(DeviceLink& link, OnFailure on_failure)
    : link_(link), on_failure_(std::move(on_failure)), state_(std::make_shared<State>()) {}

absl::StatusOr<std::unique_ptr<DeviceCollectives>> DeviceCollectives::Create(DeviceLink& link, OnFailure on_failure) {
  std::unique_ptr<DeviceCollectives> device(new DeviceCollectives(link, std::move(on_failure)));
  BRAID_ASSIGN_OR_RETURN(device->stream_, link.runtime().NewStream());
  BRAID_ASSIGN_OR_RETURN(device->executor_, StreamExecutor::Create(link));
  device->watchdog_ = std::thread([d = device.get()] { d->Watch(); });
  return device;
}

DeviceCollectives::~DeviceCollectives() {
  (void)stream_->Synchronize(DeadlineIn(kDrain));
  {
    MutexLock lock(&state_->mu);
    state_->stopping = true;
    state_->wake.SignalAll();
  }
  watchdog_.join();
  executor_.reset();
  link_.runtime().Free(gather_);
}

void DeviceCollectives::Watch() {
  while (true) {
    absl::Status failure;
    {
      MutexLock lock(&state_->mu);
      if (!state_->stopping) WaitWithTimeout(&state_->wake, &state_->mu, kWatchEvery);
      if (state_->stopping) return;
      for (const auto& [id, p] : state_->pending) {
        if (Expired(p.deadline)) {
          failure = absl::DeadlineExceededError(
              absl::StrCat("rank ", link_.rank(), ": ", p.what, " not complete on ", link_.runtime().name(),
                           " by its deadline"));
          break;
        }
      }
    }
    if (failure.ok()) failure = link_.AsyncError();
    if (!failure.ok()) on_failure_(failure);
  }
}

absl::StatusOr<std::shared_ptr<Event>> DeviceCollectives::Ready(Stream* stream) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Event> event, link_.runtime().NewEvent());
  Stream& producer = stream != nullptr ? *stream : link_.runtime().DefaultStream();
  BRAID_RETURN_IF_ERROR(producer.Record(*event));
  return std::shared_ptr<Event>(std::move(event));
}

absl::StatusOr<std::shared_ptr<Event>> DeviceCollectives::Run(Algorithm algorithm, const CollectiveArgs& args,
                                                              int peer, const void* input, void* output, Event& ready,
                                                              OnDone done) {
  BRAID_RETURN_IF_ERROR(stream_->WaitEvent(ready));
  if (algorithm == Algorithm::kNative) {
    BRAID_RETURN_IF_ERROR(link_.Native(args, input, output, *stream_));
  } else if (algorithm == Algorithm::kP2p) {
    const size_t bytes = args.count * DTypeSize(args.dtype);
    link_.GroupStart();
    BRAID_RETURN_IF_ERROR(input != nullptr ? link_.Send(peer, input, bytes, *stream_)
                                           : link_.Recv(peer, output, bytes, *stream_));
    BRAID_RETURN_IF_ERROR(link_.GroupEnd(args.deadline));
  } else {
    BRAID_ASSIGN_OR_RETURN(Plan plan, MakePlan({algorithm, args, link_.rank(), link_.size()}));
    BRAID_RETURN_IF_ERROR(executor_->Run(plan, args, input, output, *stream_));
  }
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Event> finished, link_.runtime().NewEvent());
  BRAID_RETURN_IF_ERROR(stream_->Record(*finished));
  uint64_t id = 0;
  {
    MutexLock lock(&state_->mu);
    id = state_->next_id++;
    state_->pending[id] = State::Pending{args.deadline, DescribeCollective(args), std::move(done)};
  }
  std::shared_ptr<State> state = state_;
  const absl::Status queued = stream_->HostFunc([state, id] { state->Complete(id, absl::OkStatus()); });
  if (!queued.ok()) {
    state_->Complete(id, queued);  // its Work fails; the caller aborts
    return queued;
  }
  return std::shared_ptr<Event>(std::move(finished));
}

absl::Status DeviceCollectives::GatherBytes(const CollectiveArgs& args, absl::Span<const std::byte> mine,
                                            absl::Span<std::byte> all) {
  const size_t need = mine.size() + all.size();
  if (need > gather_bytes_) {
    BRAID_RETURN_IF_ERROR(stream_->Synchronize(args.deadline));
    link_.runtime().Free(gather_);
    gather_ = nullptr;
    gather_bytes_ = 0;
    BRAID_ASSIGN_OR_RETURN(gather_, link_.runtime().Allocate(need));
    gather_bytes_ = need;
  }
  std::byte* device_mine = static_cast<std::byte*>(gather_);
  std::byte* device_all = device_mine + mine.size();
  CollectiveArgs gather = args;
  gather.kind = CollectiveKind::kAllGather;
  gather.dtype = DType::kU8;
  gather.op = ReduceOp::kSum;
  gather.root = -1;
  gather.count = mine.size();
  BRAID_ASSIGN_OR_RETURN(Plan plan, MakePlan({Algorithm::kRing, gather, link_.rank(), link_.size()}));
  BRAID_RETURN_IF_ERROR(stream_->Copy(device_mine, mine.data(), mine.size()));
  BRAID_RETURN_IF_ERROR(executor_->Run(plan, gather, device_mine, device_all, *stream_));
  BRAID_RETURN_IF_ERROR(stream_->Copy(all.data(), device_all, all.size()));
  return stream_->Synchronize(args.deadline);
}

void DeviceCollectives::Abort(const absl::Status& cause) {
  link_.Abort(cause);
  state_->FailAll(cause);
}

}  // namespace braid
