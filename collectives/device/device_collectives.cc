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
// How long the completer waits on one event before it looks whether it is
// being stopped.
constexpr absl::Duration kCompleteSlice = absl::Milliseconds(50);

}  // namespace

// What the watchdog, the completer and the callers share.
struct DeviceCollectives::State {
  struct Pending {
    Deadline deadline;
    std::string what;
    OnDone done;
    std::shared_ptr<Event> finished;  // recorded after the collective on the communication stream
  };
  absl::Mutex mu;
  absl::CondVar wake;    // the watchdog's: stopping
  absl::CondVar queued;  // the completer's: a collective queued, or stopping
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
  device->completer_ = std::thread([d = device.get()] { d->CompleteInOrder(); });
  return device;
}

DeviceCollectives::~DeviceCollectives() {
  (void)stream_->Synchronize(DeadlineIn(kDrain));
  {
    MutexLock lock(&state_->mu);
    state_->stopping = true;
    state_->wake.SignalAll();
    state_->queued.SignalAll();
  }
  watchdog_.join();
  completer_.join();
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

// Collectives on the communication stream finish in the order they were
// queued: wait for the oldest one's event, complete it, go on. Never a host
// function on a stream (CUDA runs those of every stream on one thread, where
// a user's blocking one would hold braid's completions back).
void DeviceCollectives::CompleteInOrder() {
  while (true) {
    uint64_t id = 0;
    std::shared_ptr<Event> finished;
    bool stopping = false;
    {
      MutexLock lock(&state_->mu);
      while (state_->pending.empty() && !state_->stopping) Wait(&state_->queued, &state_->mu);
      stopping = state_->stopping;
      if (state_->pending.empty()) return;  // stopping, and nothing is left
      id = state_->pending.begin()->first;
      finished = state_->pending.begin()->second.finished;
    }
    if (!stopping) {
      const absl::Status waited = finished->Synchronize(DeadlineIn(kCompleteSlice));
      if (absl::IsDeadlineExceeded(waited)) continue;  // the watchdog owns deadlines; look again
      state_->Complete(id, waited);
      continue;
    }
    // Destroyed: the stream has drained (or its drain timed out).
    absl::StatusOr<bool> done = finished->Query();
    state_->Complete(id, !done.ok() ? done.status()
                         : *done    ? absl::OkStatus()
                                    : absl::AbortedError(absl::StrCat("rank ", link_.rank(),
                                                                      ": the communicator was destroyed before the "
                                                                      "device finished this collective")));
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
    BRAID_ASSIGN_OR_RETURN(const Plan* plan, CachedPlan({algorithm, args, link_.rank(), link_.size()}));
    BRAID_RETURN_IF_ERROR(executor_->Run(*plan, args, input, output, *stream_));
  }
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Event> recorded, link_.runtime().NewEvent());
  std::shared_ptr<Event> finished(std::move(recorded));
  BRAID_RETURN_IF_ERROR(stream_->Record(*finished));
  MutexLock lock(&state_->mu);
  const uint64_t id = state_->next_id++;
  state_->pending[id] = State::Pending{args.deadline, DescribeCollective(args), std::move(done), finished};
  state_->queued.SignalAll();
  return finished;
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
  BRAID_ASSIGN_OR_RETURN(const Plan* plan, CachedPlan({Algorithm::kRing, gather, link_.rank(), link_.size()}));
  BRAID_RETURN_IF_ERROR(stream_->Copy(device_mine, mine.data(), mine.size()));
  BRAID_RETURN_IF_ERROR(executor_->Run(*plan, gather, device_mine, device_all, *stream_));
  BRAID_RETURN_IF_ERROR(stream_->Copy(all.data(), device_all, all.size()));
  return stream_->Synchronize(args.deadline);
}

void DeviceCollectives::Abort(const absl::Status& cause) {
  link_.Abort(cause);
  state_->FailAll(cause);
}

}  // namespace braid
