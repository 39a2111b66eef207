#include "collectives/transport/local_device_link.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/mutex.h"
#include "base/status.h"

namespace braid {

struct LocalDeviceLinks::Message {
  int sender = 0;
  const void* data = nullptr;
  size_t bytes = 0;
  std::unique_ptr<Event> ready;   // on the sender's stream: the data is there
  std::unique_ptr<Event> copied;  // on the receiver's stream: the copy is done
  bool copied_recorded = false;   // guarded by the links' mu_
};

class LocalDeviceLinks::Link : public DeviceLink {
 public:
  Link(LocalDeviceLinks& links, int rank) : links_(links), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return links_.size_; }
  DeviceRuntime& runtime() override { return links_.runtime_; }
  void Abort(const absl::Status& cause) override { links_.Abort(rank_, cause); }

  void GroupStart() override {
    sends_.clear();
    recvs_.clear();
  }
  absl::Status Send(int peer, const void* data, size_t bytes, Stream& stream) override {
    BRAID_RETURN_IF_ERROR(CheckPeer(peer, "send to"));
    sends_.push_back(Op{peer, const_cast<void*>(data), bytes, &stream, nullptr});
    return absl::OkStatus();
  }
  absl::Status Recv(int peer, void* data, size_t bytes, Stream& stream) override {
    BRAID_RETURN_IF_ERROR(CheckPeer(peer, "receive from"));
    recvs_.push_back(Op{peer, data, bytes, &stream, nullptr});
    return absl::OkStatus();
  }

  absl::Status GroupEnd(Deadline deadline) override {
    // 1. Publish every send, its data ready after the stream's earlier work.
    for (Op& send : sends_) {
      auto message = std::make_shared<Message>();
      message->sender = rank_;
      message->data = send.data;
      message->bytes = send.bytes;
      BRAID_ASSIGN_OR_RETURN(message->ready, links_.runtime_.NewEvent());
      BRAID_ASSIGN_OR_RETURN(message->copied, links_.runtime_.NewEvent());
      BRAID_RETURN_IF_ERROR(send.stream->Record(*message->ready));
      send.message = message;
      MutexLock lock(&links_.mu_);
      links_.mailboxes_[Box(rank_, send.peer)].push_back(std::move(message));
      links_.changed_.SignalAll();
    }
    // 2. Each receive: the peer's next message, copied once it is ready.
    for (Op& recv : recvs_) {
      std::shared_ptr<Message> message;
      {
        MutexLock lock(&links_.mu_);
        auto& box = links_.mailboxes_[Box(recv.peer, rank_)];
        BRAID_RETURN_IF_ERROR(AwaitLocked([&box] { return !box.empty(); }, deadline, [&] {
          return absl::StrCat("receiving ", recv.bytes, " bytes from rank ", recv.peer, ": it never sent them");
        }));
        message = std::move(box.front());
        box.pop_front();
      }
      if (message->bytes != recv.bytes) {
        // Still mark it copied, so the sender does not wait for us.
        MutexLock lock(&links_.mu_);
        message->copied_recorded = true;
        links_.changed_.SignalAll();
        return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": local device link: rank ", recv.peer,
                                                       " sent ", message->bytes, " bytes, this rank expected ",
                                                       recv.bytes));
      }
      BRAID_RETURN_IF_ERROR(recv.stream->WaitEvent(*message->ready));
      BRAID_RETURN_IF_ERROR(recv.stream->Copy(recv.data, message->data, recv.bytes));
      BRAID_RETURN_IF_ERROR(recv.stream->Record(*message->copied));
      MutexLock lock(&links_.mu_);
      message->copied_recorded = true;
      links_.changed_.SignalAll();
    }
    // 3. Each send's stream goes on once the peer has copied the buffer.
    for (Op& send : sends_) {
      {
        MutexLock lock(&links_.mu_);
        BRAID_RETURN_IF_ERROR(AwaitLocked([&send] { return send.message->copied_recorded; }, deadline, [&] {
          return absl::StrCat("sending ", send.bytes, " bytes to rank ", send.peer, ": it never received them");
        }));
      }
      BRAID_RETURN_IF_ERROR(send.stream->WaitEvent(*send.message->copied));
    }
    sends_.clear();
    recvs_.clear();
    return absl::OkStatus();
  }

 private:
  struct Op {
    int peer;
    void* data;
    size_t bytes;
    Stream* stream;
    std::shared_ptr<Message> message;  // a send's, once published
  };

  // With the links' mu_ held: waits until ready(), or kDeadlineExceeded
  // saying what() at `deadline`.
  template <typename Ready, typename What>
  absl::Status AwaitLocked(Ready ready, Deadline deadline, What what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(links_.mu_) {
    while (!ready()) {
      if (!links_.aborted_.ok()) return links_.aborted_;
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat("rank ", rank_, ": local device link: ", what()));
      }
      WaitWithTimeout(&links_.changed_, &links_.mu_, left);
    }
    return absl::OkStatus();
  }
  size_t Box(int sender, int receiver) const {
    return static_cast<size_t>(sender) * static_cast<size_t>(links_.size_) + static_cast<size_t>(receiver);
  }
  absl::Status CheckPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= links_.size_ || peer == rank_) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": local device link: cannot ", what, " rank ", peer, " of ", links_.size_));
    }
    return absl::OkStatus();
  }

  LocalDeviceLinks& links_;
  const int rank_;
  std::vector<Op> sends_;
  std::vector<Op> recvs_;
};

LocalDeviceLinks::LocalDeviceLinks(DeviceRuntime& runtime, int size) : runtime_(runtime), size_(size) {
  {
    MutexLock lock(&mu_);
    mailboxes_.resize(static_cast<size_t>(size) * static_cast<size_t>(size));
  }
  for (int r = 0; r < size; ++r) links_.push_back(std::make_unique<Link>(*this, r));
}

LocalDeviceLinks::~LocalDeviceLinks() = default;

DeviceLink& LocalDeviceLinks::link(int rank) { return *links_.at(static_cast<size_t>(rank)); }

void LocalDeviceLinks::Abort(int rank, const absl::Status& cause) {
  MutexLock lock(&mu_);
  if (aborted_.ok()) {
    aborted_ = absl::AbortedError(absl::StrCat("local device link: rank ", rank, " aborted: ", cause.message()));
  }
  changed_.SignalAll();
}

}  // namespace braid
