#include "collectives/pairwise.h"

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
#include "tensor/reduce.h"

namespace braid {

// One step: every rank sends its whole input to every other rank and reduces
// all n inputs itself, in rank order (so every rank rounds alike). (n - 1)x
// the bytes of the others, so only for small messages, where one step beats
// rhd's log2(n) and ring's 2(n - 1).
absl::Status OneShotAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                              absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllReduce, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  const size_t bytes = args.count * DTypeSize(args.dtype);
  // Slot r of scratch holds rank r's input (this rank's too when the call is
  // in place: the output overwrites it before its turn in the rank order).
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> slots, scratch.Get(static_cast<size_t>(n) * bytes));
  auto slot = [&](int r) { return slots.subspan(static_cast<size_t>(r) * bytes, bytes); };
  const bool in_place = output.data() == input.data();
  std::vector<OpId> ops;
  ops.reserve(2 * static_cast<size_t>(n - 1));
  for (int k = 1; k < n; ++k) {  // staggered, so no peer gets everyone's send at once
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(from, CollectiveHeader(args, StepTag(0, 0)), slot(from)));
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(to, CollectiveHeader(args, StepTag(0, 0)), input));
    ops.push_back(r);
    ops.push_back(s);
  }
  if (in_place) std::memcpy(slot(me).data(), input.data(), bytes);
  BRAID_RETURN_IF_ERROR(transport.Wait(ops, args.deadline));
  auto data_of = [&](int r) -> absl::Span<const std::byte> { return r == me && !in_place ? input : slot(r); };
  HostReduce(args.dtype, args.op, output, data_of(0), data_of(1));
  for (int r = 2; r < n; ++r) HostReduce(args.dtype, args.op, output, output, data_of(r));
  if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, output, n);
  return absl::OkStatus();
}

// Dissemination: in round k every rank signals rank + 2^k and hears from
// rank - 2^k; after ceil(log2 n) rounds everyone has heard from everyone.
absl::Status DisseminationBarrier(Transport& transport, const CollectiveArgs& args) {
  const int n = transport.size();
  const int me = transport.rank();
  uint32_t round = 0;
  for (int distance = 1; distance < n; distance *= 2, ++round) {
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend((me + distance) % n, CollectiveHeader(args, round), {}));
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv((me - distance + n) % n, CollectiveHeader(args, round), {}));
    BRAID_RETURN_IF_ERROR(transport.Wait({s, r}, args.deadline));
  }
  return absl::OkStatus();
}

// Every pair exchanges its blocks directly; all transfers in flight at once.
absl::Status PairwiseAllToAll(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                              absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllToAll, args, input, output));
  if (done) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  auto block = [&](int peer) { return Range{static_cast<size_t>(peer) * args.count, args.count}; };
  std::vector<OpId> ops;
  for (int k = 1; k < n; ++k) {
    // Staggered so every rank starts with a different partner.
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(from, CollectiveHeader(args, 0), Slice(output, block(from), es)));
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(to, CollectiveHeader(args, 0), Slice(input, block(to), es)));
    ops.push_back(r);
    ops.push_back(s);
  }
  return transport.Wait(ops, args.deadline);
}


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
