#include "collectives/point_to_point.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/status.h"
#include "collectives/algorithm_util.h"

namespace braid {

absl::Status SendTo(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<const std::byte> data) {
  BRAID_RETURN_IF_ERROR(CheckBytes(args, data.size(), args.count, "send buffer"));
  BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(peer, CollectiveHeader(args, 0), data));
  return transport.Wait({id}, args.deadline);
}

absl::Status RecvFrom(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<std::byte> data) {
  BRAID_RETURN_IF_ERROR(CheckBytes(args, data.size(), args.count, "receive buffer"));
  BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostRecv(peer, CollectiveHeader(args, 0), data));
  return transport.Wait({id}, args.deadline);
}

absl::StatusOr<int> RecvFromAny(Transport& transport, const CollectiveArgs& args, absl::Span<std::byte> data) {
  BRAID_RETURN_IF_ERROR(CheckBytes(args, data.size(), args.count, "receive buffer"));
  const int n = transport.size();
  const int me = transport.rank();
  // Yields first (a sender on this core may need it), then sleeps up to 1 ms:
  // a receive from any source is for control messages, not the fast path.
  absl::Duration pause = absl::ZeroDuration();
  for (int round = 0;; ++round) {
    // A peer that has left (its stream ended) sends nothing more: look at
    // the others, and fail only when every one has left. An abort notice fails at once.
    absl::Status gone;
    int left = 0;
    // Start each round past the last peer looked at first, so no peer starves.
    for (int i = 1; i < n; ++i) {
      const int peer = (me + round + i) % n;
      if (peer == me) continue;
      absl::StatusOr<std::optional<FrameHeader>> next = transport.PeekFrame(peer);
      if (!next.ok() && absl::IsUnavailable(next.status())) {
        gone = next.status();
        ++left;
        continue;
      }
      if (!next.ok()) return next.status();
      if (!next->has_value() || (*next)->kind != CollectiveKind::kSendRecv) continue;
      BRAID_RETURN_IF_ERROR(RecvFrom(transport, args, peer, data));
      return peer;
    }
    if (left == n - 1) return gone;
    if (Expired(args.deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", me, ": receive from any source (",
                                                      DescribeFrame(CollectiveHeader(args, 0)), "): no peer sent one"));
    }
    if (round < 64) {
      std::this_thread::yield();
    } else {
      pause = std::min(absl::Milliseconds(1), std::max(absl::Microseconds(20), pause * 2));
      absl::SleepFor(pause);
    }
  }
}

}  // namespace braid
