#include "collectives/transport/mpi/mpi_transport.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace braid {
namespace {

// How long Abort and failures wait for MPI to release a cancelled request.
constexpr absl::Duration kReleaseBudget = absl::Milliseconds(100);


}  // namespace

absl::StatusOr<std::unique_ptr<MpiTransport>> MpiTransport::Create(Bootstrap& bootstrap, Deadline deadline,
                                                                   MpiTransportOptions options) {
  const std::string who = absl::StrCat("rank ", bootstrap.rank(), ": mpi transport");
  BRAID_RETURN_IF_ERROR(Annotate(EnsureMpiInitialized(), who));
  const int world_rank = MpiWorldRank();
  const int world_size = MpiWorldSize();
  if (world_rank != bootstrap.rank() || world_size != bootstrap.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": the group says rank ", bootstrap.rank(), " of ", bootstrap.size(), " but mpirun says rank ",
        world_rank, " of ", world_size, " (the launcher's RANK/WORLD_SIZE must be mpirun's)"));
  }
  if (options.inline_bytes > kMaxAbortText * 16) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": inline_bytes ", options.inline_bytes, " is too large"));
  }
  BRAID_ASSIGN_OR_RETURN(MPI_Comm comm, DuplicateWorld(deadline, who));
  return Over(comm, options, who);
}

absl::StatusOr<std::unique_ptr<MpiTransport>> MpiTransport::Over(MPI_Comm comm, MpiTransportOptions options,
                                                                 const std::string& who) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::unique_ptr<MpiTransport> transport(new MpiTransport(rank, size, comm, options));
  BRAID_RETURN_IF_ERROR(Annotate(transport->CreateUserOps(), who));
  BRAID_RETURN_IF_ERROR(Annotate(transport->PostAbortReceive(), who));
  return transport;
}

absl::StatusOr<std::unique_ptr<Transport>> MpiTransport::Split(int color, int key, Deadline deadline) {
  (void)deadline;  // MPI_Comm_split blocks; see the header
  const std::string who = absl::StrCat("rank ", rank(), ": mpi transport split (color ", color, ")");
  if (!aborted_.ok()) return absl::FailedPreconditionError(absl::StrCat(who, ": ", aborted_.message()));
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &comm);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat(who, ": MPI_Comm_split: ", MpiErrorText(rc)));
  if (comm == MPI_COMM_NULL) return std::unique_ptr<Transport>();
  rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return absl::InternalError(absl::StrCat(who, ": MPI_Comm_set_errhandler: ", MpiErrorText(rc)));
  }
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<MpiTransport> split, Over(comm, options_, who));
  return std::unique_ptr<Transport>(std::move(split));
}

MpiTransport::MpiTransport(int rank, int size, MPI_Comm comm, MpiTransportOptions options)
    : Transport(rank, size),
      comm_(comm),
      options_(options),
      sends_(static_cast<size_t>(size)),
      recvs_(static_cast<size_t>(size)),
      peer_failure_(static_cast<size_t>(size)),
      held_(static_cast<size_t>(size)),
      abort_buffer_(std::make_shared<std::vector<char>>(kMaxAbortText)),
      user_ops_(kNumDTypes, std::vector<MPI_Op>(4, MPI_OP_NULL)) {}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // nothing can be released any more
  FailAllPending(absl::FailedPreconditionError(absl::StrCat("rank ", rank(), ": mpi transport destroyed")));
  if (abort_recv_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&abort_recv_);
    if (!MpiWaitRequest(&abort_recv_, DeadlineIn(kReleaseBudget), "cancel").ok()) {
      MPI_Request_free(&abort_recv_);
      KeepAlive(abort_buffer_);
    }
  }
  for (auto& per_dtype : user_ops_) {
    for (MPI_Op& op : per_dtype) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
  MPI_Comm_free(&comm_);
}

absl::Status MpiTransport::PostAbortReceive() {
  const int rc = MPI_Irecv(abort_buffer_->data(), static_cast<int>(abort_buffer_->size()), MPI_CHAR, MPI_ANY_SOURCE,
                           kAbortTag, comm_, &abort_recv_);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat("MPI_Irecv of abort notices: ", MpiErrorText(rc)));
  return absl::OkStatus();
}

absl::Status MpiTransport::CheckPeer(int peer) const {
  if (!aborted_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank(), ": mpi transport was aborted: ", aborted_.message()));
  }
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank(), ": no peer ", peer, " in a group of ", size()));
  }
  return peer_failure_[static_cast<size_t>(peer)];
}

absl::StatusOr<OpId> MpiTransport::PostSend(int peer, FrameHeader header, absl::Span<const std::byte> payload) {
  BRAID_RETURN_IF_ERROR(CheckPeer(peer));
  header.magic = FrameHeader::kMagic;
  header.bytes = payload.size();
  auto [id, op] = ops_.Add(/*is_send=*/true, peer, header, const_cast<std::byte*>(payload.data()), payload.size());
  const bool inline_payload = op.bytes <= options_.inline_bytes;
  op.staging.resize(kFrameHeaderBytes + (inline_payload ? op.bytes : 0));
  std::memcpy(op.staging.data(), &header, kFrameHeaderBytes);
  if (inline_payload && op.bytes > 0) std::memcpy(op.staging.data() + kFrameHeaderBytes, op.data, op.bytes);
  int rc = MPI_Isend(op.staging.data(), static_cast<int>(op.staging.size()), MPI_BYTE, peer, kFrameTag, comm_,
                     &op.first);
  for (size_t offset = 0; rc == MPI_SUCCESS && !inline_payload && offset < op.bytes; offset += kMaxMessageBytes) {
    op.payload.push_back(MPI_REQUEST_NULL);
    rc = MPI_Isend(op.data + offset, static_cast<int>(std::min(kMaxMessageBytes, op.bytes - offset)), MPI_BYTE, peer,
                   kPayloadTag, comm_, &op.payload.back());
  }
  sends_[static_cast<size_t>(peer)].push_back(id);
  if (rc != MPI_SUCCESS) {
    const absl::Status failure = absl::UnavailableError(absl::StrCat(
        "rank ", rank(), ": mpi: MPI_Isend to peer ", peer, " of ", DescribeFrame(header), ": ", MpiErrorText(rc)));
    FailPeer(peer, failure);
    ops_.Erase(id);
    return failure;
  }
  return id;
}

absl::StatusOr<OpId> MpiTransport::PostRecv(int peer, FrameHeader expected, absl::Span<std::byte> payload) {
  BRAID_RETURN_IF_ERROR(CheckPeer(peer));
  expected.magic = FrameHeader::kMagic;
  expected.bytes = payload.size();
  auto [id, op] = ops_.Add(/*is_send=*/false, peer, expected, payload.data(), payload.size());
  std::vector<std::byte>& held = held_[static_cast<size_t>(peer)];
  if (!held.empty()) {
    // PeekFrame already took this peer's next frame message: it is this receive's.
    op.staging = std::move(held);
    held.clear();
    op.first_bytes = static_cast<int>(op.staging.size());
    recvs_[static_cast<size_t>(peer)].push_back(id);
    AdvanceReceives(peer);
    return id;
  }
  // Room for any frame's first message, so a mismatched one is still read and described.
  op.staging.resize(kFrameHeaderBytes + options_.inline_bytes);
  const int rc = MPI_Irecv(op.staging.data(), static_cast<int>(op.staging.size()), MPI_BYTE, peer, kFrameTag, comm_,
                           &op.first);
  recvs_[static_cast<size_t>(peer)].push_back(id);
  if (rc != MPI_SUCCESS) {
    const absl::Status failure = absl::UnavailableError(absl::StrCat(
        "rank ", rank(), ": mpi: MPI_Irecv from peer ", peer, " of ", DescribeFrame(expected), ": ", MpiErrorText(rc)));
    FailPeer(peer, failure);
    ops_.Erase(id);
    return failure;
  }
  return id;
}

absl::StatusOr<std::optional<FrameHeader>> MpiTransport::PeekFrame(int peer) {
  // Abort notices arrive through Progress: look at them first.
  absl::StatusOr<bool> moved = Progress();
  if (!moved.ok()) {
    FailAllPending(moved.status());
    return moved.status();
  }
  BRAID_RETURN_IF_ERROR(CheckPeer(peer));
  std::vector<std::byte>& held = held_[static_cast<size_t>(peer)];
  if (held.empty()) {
    if (!recvs_[static_cast<size_t>(peer)].empty()) return std::nullopt;  // a receive owns the next message
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    int rc = MPI_Improbe(peer, kFrameTag, comm_, &found, &message, &status);
    if (rc == MPI_SUCCESS && !found) return std::nullopt;
    int length = 0;
    if (rc == MPI_SUCCESS) rc = MPI_Get_count(&status, MPI_BYTE, &length);
    if (rc == MPI_SUCCESS) {
      // A frame's first message: a header and at most an inline payload.
      held.resize(static_cast<size_t>(std::max(length, 0)));
      rc = MPI_Mrecv(held.data(), length, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
      held.clear();
      FailPeer(peer, absl::UnavailableError(absl::StrCat("rank ", rank(), ": mpi: probing peer ", peer,
                                                         " for a message: ", MpiErrorText(rc))));
      return peer_failure_[static_cast<size_t>(peer)];
    }
  }
  if (held.size() < kFrameHeaderBytes) {
    FailPeer(peer, absl::DataLossError(absl::StrCat("rank ", rank(), ": mpi: peer ", peer, " sent a ", held.size(),
                                                    "-byte message, not a braid frame")));
    return peer_failure_[static_cast<size_t>(peer)];
  }
  FrameHeader header;
  std::memcpy(&header, held.data(), kFrameHeaderBytes);
  return header;
}

void MpiTransport::Complete(OpId id, absl::Status status) {
  Op& op = ops_.at(id);
  op.complete = true;
  op.status = std::move(status);
}

void MpiTransport::ReleaseRequests(Op& op, Deadline until) {
  bool kept = false;
  auto release = [&](MPI_Request& request) {
    if (request == MPI_REQUEST_NULL) return;
    if (!op.is_send) {
      // A receive that has not matched yet cancels at once; one that has
      // (a large payload under way) completes on its own shortly.
      MPI_Cancel(&request);
      if (MpiWaitRequest(&request, until, "cancel").ok()) return;
    }
    // Sends cannot be cancelled in Open MPI 4.1: freed, they finish (or not)
    // in the background, so their staging memory is kept.
    MPI_Request_free(&request);
    kept = true;
  };
  release(op.first);
  for (MPI_Request& request : op.payload) release(request);
  if (kept) KeepAlive(std::move(op.staging));
}

void MpiTransport::FailPeer(int peer, const absl::Status& status) {
  absl::Status& failure = peer_failure_[static_cast<size_t>(peer)];
  if (failure.ok()) failure = status;
  const Deadline until = DeadlineIn(kReleaseBudget);
  for (auto* queue : {&sends_[static_cast<size_t>(peer)], &recvs_[static_cast<size_t>(peer)]}) {
    for (OpId id : *queue) {
      Op& op = ops_.at(id);
      ReleaseRequests(op, until);
      if (!op.complete) Complete(id, status);
    }
    queue->clear();
  }
}

void MpiTransport::FailAllPending(const absl::Status& status) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank()) FailPeer(peer, status);
  }
}

std::string MpiTransport::DescribePending(absl::Span<const OpId> ops) const {
  return ops_.DescribePending(
      ops, [](int peer) { return absl::StrCat("peer ", peer); },
      [](const Op& op) -> const char* {
        if (op.is_send) return "";
        return op.header_checked ? " (header arrived, payload pending)" : " (no header yet)";
      });
}

absl::Status MpiTransport::Wait(absl::Span<const OpId> ops, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(ops_.CheckWaitable(ops, rank()));
  MpiPoller poller;
  while (true) {
    absl::StatusOr<bool> moved = Progress();
    if (!moved.ok()) FailAllPending(moved.status());
    if (std::optional<absl::Status> outcome = ops_.Collect(ops)) return *outcome;
    if (moved.ok() && *moved) {
      poller.Progressed();
      continue;
    }
    if (Expired(deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", rank(), ": mpi: deadline exceeded waiting for ", DescribePending(ops)));
    }
    poller.Idle();
  }
}

void MpiTransport::Abort(const absl::Status& cause) {
  if (!aborted_.ok()) return;
  aborted_ = cause.ok() ? absl::CancelledError("aborted") : cause;
  // Tell every peer why (one eager message each), best effort and bounded.
  auto notice = std::make_shared<std::string>(aborted_.message().substr(0, kMaxAbortText));
  std::vector<MPI_Request> notices;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank() || !peer_failure_[static_cast<size_t>(peer)].ok()) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(notice->data(), static_cast<int>(notice->size()), MPI_CHAR, peer, kAbortTag, comm_, &request) ==
        MPI_SUCCESS) {
      notices.push_back(request);
    }
  }
  const Deadline until = DeadlineIn(kReleaseBudget);
  int all_sent = notices.empty() ? 1 : 0;
  MpiPoller poller;
  while (!all_sent) {
    if (MPI_Testall(static_cast<int>(notices.size()), notices.data(), &all_sent, MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
        Expired(until)) {
      break;
    }
    if (!all_sent) poller.Idle();
  }
  if (!all_sent) {
    for (MPI_Request& request : notices) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
    KeepAlive(notice);
  }
  FailAllPending(absl::AbortedError(absl::StrCat("rank ", rank(), ": mpi transport aborted: ", aborted_.message())));
  if (abort_recv_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&abort_recv_);
    if (!MpiWaitRequest(&abort_recv_, DeadlineIn(kReleaseBudget), "cancel").ok()) {
      MPI_Request_free(&abort_recv_);
      KeepAlive(abort_buffer_);
    }
  }
}

// ---------------------------------------------------------------------------
// Native collectives.

}  // namespace braid
