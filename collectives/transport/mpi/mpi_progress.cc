// The MPI transport's progress: one MPI_Testsome over every pending request,
// then each receive's steps (header checked, then its payload).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/transport/mpi/mpi_transport.h"

namespace braid {

void MpiTransport::CollectPending() {
  poll_requests_.clear();
  poll_slots_.clear();
  if (abort_recv_ != MPI_REQUEST_NULL) {
    poll_requests_.push_back(abort_recv_);
    poll_slots_.push_back({0, -1});
  }
  for (int peer = 0; peer < size(); ++peer) {
    for (auto* queue : {&sends_[static_cast<size_t>(peer)], &recvs_[static_cast<size_t>(peer)]}) {
      for (OpId id : *queue) {
        const Op& op = ops_.at(id);
        if (op.first != MPI_REQUEST_NULL) {
          poll_requests_.push_back(op.first);
          poll_slots_.push_back({id, -1});
        }
        for (size_t k = 0; k < op.payload.size(); ++k) {
          if (op.payload[k] == MPI_REQUEST_NULL) continue;
          poll_requests_.push_back(op.payload[k]);
          poll_slots_.push_back({id, static_cast<int>(k)});
        }
      }
    }
  }
}

absl::StatusOr<bool> MpiTransport::Progress() {
  CollectPending();
  const int n = static_cast<int>(poll_requests_.size());
  if (n == 0) return false;
  poll_indices_.resize(static_cast<size_t>(n));
  poll_statuses_.resize(static_cast<size_t>(n));
  int completed = 0;
  const int rc = MPI_Testsome(n, poll_requests_.data(), &completed, poll_indices_.data(), poll_statuses_.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    return absl::InternalError(absl::StrCat("rank ", rank(), ": mpi: MPI_Testsome: ", MpiErrorText(rc)));
  }
  if (completed == MPI_UNDEFINED || completed == 0) return false;
  // Completed requests are now MPI_REQUEST_NULL: copy the handles back.
  for (int i = 0; i < n; ++i) {
    const Slot& slot = poll_slots_[static_cast<size_t>(i)];
    if (slot.id == 0) {
      abort_recv_ = poll_requests_[static_cast<size_t>(i)];
      continue;
    }
    Op& op = ops_.at(slot.id);
    (slot.payload < 0 ? op.first : op.payload[static_cast<size_t>(slot.payload)]) =
        poll_requests_[static_cast<size_t>(i)];
  }
  std::vector<int> dirty_peers;
  for (int j = 0; j < completed; ++j) {
    const int i = poll_indices_[static_cast<size_t>(j)];
    const Slot& slot = poll_slots_[static_cast<size_t>(i)];
    MPI_Status& status = poll_statuses_[static_cast<size_t>(j)];
    const int error = rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : MPI_SUCCESS;
    if (slot.id == 0) {
      if (error != MPI_SUCCESS) continue;
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      const int peer = status.MPI_SOURCE;
      const std::string text(abort_buffer_->data(), static_cast<size_t>(std::max(length, 0)));
      if (peer >= 0 && peer < size() && peer != rank()) {
        FailPeer(peer, absl::AbortedError(
                           absl::StrCat("rank ", rank(), ": peer ", peer, " aborted the communicator: ", text)));
      }
      if (aborted_.ok()) BRAID_RETURN_IF_ERROR(PostAbortReceive());
      continue;
    }
    Op& op = ops_.at(slot.id);
    if (op.complete) continue;
    if (error != MPI_SUCCESS) {
      FailPeer(op.peer, absl::UnavailableError(absl::StrCat(
                            "rank ", rank(), ": mpi: ", op.is_send ? "send to" : "receive from", " peer ", op.peer,
                            " of ", DescribeFrame(op.header), ": ", MpiErrorText(error))));
      continue;
    }
    if (!op.is_send && slot.payload < 0) MPI_Get_count(&status, MPI_BYTE, &op.first_bytes);
    dirty_peers.push_back(op.peer);
  }
  for (int peer : dirty_peers) {
    auto& sends = sends_[static_cast<size_t>(peer)];
    for (auto it = sends.begin(); it != sends.end();) {
      Op& op = ops_.at(*it);
      const bool done = op.first == MPI_REQUEST_NULL &&
                        std::all_of(op.payload.begin(), op.payload.end(),
                                    [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
      if (!done) {
        ++it;
        continue;
      }
      Complete(*it, absl::OkStatus());
      it = sends.erase(it);
    }
    AdvanceReceives(peer);
  }
  return true;
}

void MpiTransport::AdvanceReceives(int peer) {
  auto& queue = recvs_[static_cast<size_t>(peer)];
  for (auto it = queue.begin(); it != queue.end();) {
    const OpId id = *it;
    Op& op = ops_.at(id);
    if (!op.header_checked) {
      // MPI matches a peer's header messages in posting order: if this one
      // has not arrived, no later one has.
      if (op.first != MPI_REQUEST_NULL) return;
      if (op.first_bytes < static_cast<int>(kFrameHeaderBytes)) {
        FailPeer(peer, absl::DataLossError(absl::StrCat("rank ", rank(), ": mpi: peer ", peer, " sent a ",
                                                        op.first_bytes, "-byte message, not a braid frame")));
        return;
      }
      FrameHeader got;
      std::memcpy(&got, op.staging.data(), kFrameHeaderBytes);
      absl::Status match = CheckFrame(op.header, got, rank(), peer);
      const bool inline_payload = op.bytes <= options_.inline_bytes;
      const size_t want = kFrameHeaderBytes + (inline_payload ? op.bytes : 0);
      if (match.ok() && static_cast<size_t>(op.first_bytes) != want) {
        match = absl::DataLossError(absl::StrCat("rank ", rank(), ": mpi: peer ", peer, " sent ", op.first_bytes,
                                                 " bytes for ", DescribeFrame(got), ", expected ", want));
      }
      if (!match.ok()) {
        // The rest of this peer's stream cannot be trusted: fail it all.
        FailPeer(peer, match);
        return;
      }
      op.header_checked = true;
      if (inline_payload) {
        if (op.bytes > 0) std::memcpy(op.data, op.staging.data() + kFrameHeaderBytes, op.bytes);
        std::vector<std::byte>().swap(op.staging);
        Complete(id, absl::OkStatus());
        it = queue.erase(it);
        continue;
      }
      std::vector<std::byte>().swap(op.staging);
      for (size_t offset = 0; offset < op.bytes; offset += kMaxMessageBytes) {
        op.payload.push_back(MPI_REQUEST_NULL);
        const int rc = MPI_Irecv(op.data + offset, static_cast<int>(std::min(kMaxMessageBytes, op.bytes - offset)),
                                 MPI_BYTE, peer, kPayloadTag, comm_, &op.payload.back());
        if (rc != MPI_SUCCESS) {
          FailPeer(peer, absl::UnavailableError(absl::StrCat("rank ", rank(), ": mpi: MPI_Irecv from peer ", peer,
                                                             " of ", DescribeFrame(op.header), ": ",
                                                             MpiErrorText(rc))));
          return;
        }
      }
      ++it;
      continue;
    }
    if (std::all_of(op.payload.begin(), op.payload.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; })) {
      Complete(id, absl::OkStatus());
      it = queue.erase(it);
      continue;
    }
    ++it;
  }
}

}  // namespace braid
