#include "collectives/programs/host_executor.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/topology.h"
#include "tensor/reduce.h"

namespace braid {
namespace {

// One lane in the window: the op it runs next and the group it waits for.
struct LaneRun {
  size_t lane = 0;
  size_t next = 0;
  absl::InlinedVector<OpId, 4> posted;
  bool done = false;
};

class PlanRun {
 public:
  PlanRun(const Plan& plan, Transport& transport, SharedWindows* windows, const CollectiveArgs& args,
          absl::Span<const std::byte> input, absl::Span<std::byte> output, absl::Span<std::byte> scratch, size_t window,
          PlanLevels* levels)
      : plan_(plan), transport_(transport), windows_(windows), levels_(levels), args_(args), input_(input),
        output_(output), scratch_(scratch), es_(DTypeSize(args.dtype)), peers_(static_cast<size_t>(transport.size())),
        window_(window), mask_(SlotsFor(window) - 1), runs_(SlotsFor(window)),
        // Only the scheduled plans have groups (the others' lanes never count messages).
        counts_(plan.shared_windows || plan.levels ? 0 : SlotsFor(window) * peers_ * 2) {}

  // Slots for a window of lanes: the next power of two, so a lane's slot is
  // a mask away (no division per op).
  static size_t SlotsFor(size_t window) { return std::bit_ceil(window); }

  absl::Status Run() {
    const size_t lanes = plan_.lanes.size();
    const size_t window = window_;
    size_t first = 0;  // the oldest unfinished lane
    size_t end = 0;    // lanes started
    while (first < lanes) {
      for (; end < lanes && end - first < window; ++end) Start(end);
      for (size_t lane = first; lane < end; ++lane) BRAID_RETURN_IF_ERROR(Advance(runs_[SlotOf(lane)]));
      while (first < end && runs_[SlotOf(first)].done) ++first;
    }
    return absl::OkStatus();
  }

 private:
  // A lane's slot (its LaneRun, scratch and message counts): the lanes in
  // flight are at most window_ consecutive ones, so their slots differ.
  size_t SlotOf(size_t lane) const { return lane & mask_; }

  void Start(size_t lane) {
    const size_t slot = SlotOf(lane);
    LaneRun& run = runs_[slot];
    run.lane = lane;
    run.next = 0;
    run.posted.clear();
    run.done = false;
    if (!counts_.empty()) std::fill_n(counts_.begin() + static_cast<std::ptrdiff_t>(slot * peers_ * 2), peers_ * 2, 0u);
  }

  // One round of a lane: waits for its last group, runs its local ops up
  // to the next group and posts that. A group with nothing to move still
  // ends the round, so a lane's groups fall in the same rounds on every rank.
  absl::Status Advance(LaneRun& run) {
    if (run.done) return absl::OkStatus();
    if (!run.posted.empty()) {
      BRAID_RETURN_IF_ERROR(transport_.Wait(run.posted, args_.deadline));
      run.posted.clear();
    }
    const std::vector<Op>& ops = plan_.lanes[run.lane];
    while (run.next < ops.size()) {
      const Op& op = ops[run.next++];
      if (op.kind == Op::Kind::kGroup) return Post(run, op);
      BRAID_RETURN_IF_ERROR(RunLocal(run, op));
    }
    run.done = true;
    return absl::OkStatus();
  }

  absl::Status Post(LaneRun& run, const Op& op) {
    if (counts_.empty()) return absl::InternalError("a group in a shared-memory or hierarchical plan");
    const size_t slot = SlotOf(run.lane);
    for (const Transfer& t : op.transfers) {
      if (t.region.count == 0) continue;
      if (t.peer < 0 || static_cast<size_t>(t.peer) >= peers_ || t.peer == transport_.rank()) {
        return absl::InternalError(absl::StrCat("program names a bad peer ", t.peer));
      }
      BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> bytes, SpanOf(t.region, slot));
      uint32_t& count = counts_[(slot * peers_ + static_cast<size_t>(t.peer)) * 2 + (t.send ? 1 : 0)];
      const FrameHeader header = CollectiveHeader(args_, StepTag(count++, run.lane));
      BRAID_ASSIGN_OR_RETURN(OpId id, t.send ? transport_.PostSend(t.peer, header, bytes)
                                             : transport_.PostRecv(t.peer, header, bytes));
      run.posted.push_back(id);
    }
    return absl::OkStatus();
  }

  absl::Status RunLocal(const LaneRun& run, const Op& op) {
    if (op.when != Op::When::kAlways && !OnPath(op.when)) return absl::OkStatus();  // another path's
    const size_t slot = SlotOf(run.lane);
    switch (op.kind) {
      case Op::Kind::kSync: return Sync(op, slot);
      case Op::Kind::kNextRound: half_ = &windows_->NextRound(); return absl::OkStatus();
      default: break;
    }
    if (op.dst.count == 0) return absl::OkStatus();
    if (op.kind == Op::Kind::kWritePeer) {
      BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> from, SpanOf(op.a, slot));
      BRAID_ASSIGN_OR_RETURN(std::byte* to, PeerAt(op.dst));
      return windows_->WritePeer(op.dst.rank, from, to, op.stream);
    }
    BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> dst, SpanOf(op.dst, slot));
    switch (op.kind) {
      case Op::Kind::kReduce: {
        BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> a, SpanOf(op.a, slot));
        BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> b,
                               op.b.buffer == Buffer::kPeerInput ? PeerOperand(op.b) : SpanOf(op.b, slot));
        if (op.also.count == 0) {
          HostReduce(args_.dtype, args_.op, dst, a, b);
          return absl::OkStatus();
        }
        BRAID_ASSIGN_OR_RETURN(std::byte* to, PeerAt(op.also));
        if (std::byte* mapped = windows_->MappedPeer(op.also.rank, to, dst.size())) {
          HostReduceTwice(args_.dtype, args_.op, dst, absl::MakeSpan(mapped, dst.size()), a, b);
          return absl::OkStatus();
        }
        HostReduce(args_.dtype, args_.op, dst, a, b);
        return windows_->WritePeer(op.also.rank, dst, to, /*stream=*/false);
      }
      case Op::Kind::kCopy: {
        BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> src, SpanOf(op.a, slot));
        if (op.stream) {
          HostStreamCopy(dst, src);
        } else {
          HostCopy(dst, src);
        }
        return absl::OkStatus();
      }
      case Op::Kind::kDivide: HostDivide(args_.dtype, dst, transport_.size()); return absl::OkStatus();
      case Op::Kind::kReadPeer: {
        BRAID_ASSIGN_OR_RETURN(std::byte* from, PeerAt(op.a));
        return windows_->ReadPeer(op.a.rank, from, dst);
      }
      case Op::Kind::kStep: {
        BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> from, SpanOf(op.a, slot));
        return levels_->RunStep(op.step, args_, from, dst);
      }
      case Op::Kind::kZero: std::memset(dst.data(), 0, dst.size()); return absl::OkStatus();
      default: break;
    }
    return absl::InternalError("not a local op");
  }

  // The windows' barrier: with this rank's payload or vote, publishing its
  // buffers if asked; then what the peers published, and the vote's outcome.
  absl::Status Sync(const Op& op, size_t slot) {
    const PeerBuffers mine = op.publish ? PeerBuffers{input_.data(), output_.data()} : PeerBuffers{};
    // kDirect, kThroughWindows, kWindow as 0, 1, 2: the largest wins.
    const std::byte vote{static_cast<uint8_t>(static_cast<uint8_t>(op.vote) - 1)};
    absl::Span<const std::byte> payload;
    if (op.vote != Op::Vote::kNone) {
      payload = absl::MakeConstSpan(&vote, 1);
    } else if (op.a.count > 0) {
      BRAID_ASSIGN_OR_RETURN(payload, SpanOf(op.a, slot));
    }
    BRAID_RETURN_IF_ERROR(windows_->Sync(CollectiveHeader(args_, op.tag), args_.deadline, mine, payload));
    const int n = transport_.size();
    if (op.publish) {
      published_.assign(peers_, PeerBuffers{});
      for (int rank = 0; rank < n; ++rank) {
        if (rank != transport_.rank()) published_[static_cast<size_t>(rank)] = windows_->Published(rank);
      }
    }
    if (op.vote != Op::Vote::kNone) {
      uint8_t strongest = 0;
      uint8_t weakest = 2;
      for (int rank = 0; rank < n; ++rank) {
        const uint8_t cast = static_cast<uint8_t>(rank == transport_.rank() ? vote : *windows_->SyncPayload(rank));
        if (cast > 2) return absl::InternalError(absl::StrCat("rank ", rank, " cast an unknown vote ", int{cast}));
        strongest = std::max(strongest, cast);
        weakest = std::min(weakest, cast);
      }
      path_ = static_cast<Op::Vote>(strongest + 1);
      split_ = weakest != strongest;
    }
    return absl::OkStatus();
  }

  bool OnPath(Op::When when) const {
    switch (when) {
      case Op::When::kIfDirect: return path_ == Op::Vote::kDirect;
      case Op::When::kIfThroughWindows: return path_ == Op::Vote::kThroughWindows;
      case Op::When::kIfWindow: return path_ == Op::Vote::kWindow;
      case Op::When::kIfWindowSplit: return path_ == Op::Vote::kWindow && split_;
      default: return true;
    }
  }

  // Where a peer region starts in that peer's memory (ReadPeer, WritePeer).
  absl::StatusOr<std::byte*> PeerAt(const Region& r) const {
    const bool input = r.buffer == Buffer::kPeerInput;
    if ((!input && r.buffer != Buffer::kPeerOutput) || r.rank < 0 || static_cast<size_t>(r.rank) >= published_.size()) {
      return absl::InternalError(absl::StrCat("program reads or writes a peer's memory outside what was published (rank ",
                                              r.rank, ")"));
    }
    const PeerBuffers& theirs = published_[static_cast<size_t>(r.rank)];
    std::byte* base = input ? const_cast<std::byte*>(theirs.input) : theirs.output;
    if (base == nullptr) {
      // Every rank takes the path the vote chose; a rank that voted for the
      // window publishes nothing, and then no rank reads a peer's buffers.
      return absl::InternalError(absl::StrCat("rank ", r.rank, " published no ", input ? "input" : "output",
                                              " buffer for this rank's peer access"));
    }
    return base + r.begin * es_;
  }

  // A peer's input read in place where it is mapped here, else copied into
  // peer_copy_ first.
  absl::StatusOr<absl::Span<std::byte>> PeerOperand(const Region& r) {
    BRAID_ASSIGN_OR_RETURN(std::byte* at, PeerAt(r));
    const size_t bytes = r.count * es_;
    if (std::byte* mapped = windows_->MappedPeer(r.rank, at, bytes)) return absl::MakeSpan(mapped, bytes);
    if (peer_copy_.size() < bytes) peer_copy_.resize(bytes);
    BRAID_RETURN_IF_ERROR(windows_->ReadPeer(r.rank, at, absl::MakeSpan(peer_copy_.data(), bytes)));
    return absl::MakeSpan(peer_copy_.data(), bytes);
  }

  // Inline, its errors out of line: every op of a small collective asks it.
  ABSL_ATTRIBUTE_ALWAYS_INLINE absl::StatusOr<absl::Span<std::byte>> SpanOf(const Region& r, size_t slot) const {
    std::byte* base;
    size_t bytes;
    switch (r.buffer) {
      case Buffer::kInput:
        base = const_cast<std::byte*>(input_.data());
        bytes = input_.size();
        break;
      case Buffer::kOutput:
        base = output_.data();
        bytes = output_.size();
        break;
      case Buffer::kScratch:
        bytes = plan_.scratch_elements * es_;
        base = scratch_.data() + slot * bytes;
        break;
      case Buffer::kWindow:
        if (half_ == nullptr || r.rank < 0 || static_cast<size_t>(r.rank) >= peers_) return RegionError(r);
        base = (*half_)[static_cast<size_t>(r.rank)];
        bytes = windows_->half_bytes();
        break;
      case Buffer::kSyncPayload:
        if (r.rank < 0 || static_cast<size_t>(r.rank) >= peers_) return RegionError(r);
        base = const_cast<std::byte*>(windows_->SyncPayload(r.rank));
        bytes = SharedWindows::kSyncPayloadBytes;
        break;
      default: return RegionError(r);
    }
    if ((r.begin + r.count) * es_ > bytes) return RegionError(r, bytes);
    return absl::MakeSpan(base + r.begin * es_, r.count * es_);
  }

  // Why `r` is no region of this run (a plan builder's bug); `bytes`: the
  // size of the buffer it overruns.
  ABSL_ATTRIBUTE_NOINLINE absl::Status RegionError(const Region& r, size_t bytes = 0) const {
    if (r.buffer == Buffer::kPeerInput || r.buffer == Buffer::kPeerOutput) {
      return absl::InternalError("a peer's buffer is reached with ReadPeer and WritePeer only");
    }
    if (r.buffer == Buffer::kWindow || r.buffer == Buffer::kSyncPayload) {
      if (r.rank < 0 || static_cast<size_t>(r.rank) >= peers_ || (r.buffer == Buffer::kWindow && half_ == nullptr)) {
        return absl::InternalError(absl::StrCat("program names rank ", r.rank, "'s window outside a round"));
      }
    }
    return absl::InternalError(absl::StrCat("program region [", r.begin, ", ", r.begin + r.count,
                                            ") outside a buffer of ", bytes / es_, " elements"));
  }

  const Plan& plan_;
  Transport& transport_;
  SharedWindows* const windows_;  // for plans with shared_windows
  PlanLevels* const levels_;      // for plans with levels
  const std::vector<std::byte*>* half_ = nullptr;  // this round's
  absl::InlinedVector<PeerBuffers, 8> published_;  // by the last publishing Sync
  std::vector<std::byte> peer_copy_;                // PeerOperand's, where no mapping is
  Op::Vote path_ = Op::Vote::kDirect;              // the last vote's outcome
  bool split_ = false;                             // and whether some rank voted otherwise
  const CollectiveArgs& args_;
  absl::Span<const std::byte> input_;
  absl::Span<std::byte> output_;
  absl::Span<std::byte> scratch_;
  const size_t es_;
  const size_t peers_;
  const size_t window_;  // lanes in flight at most
  const size_t mask_;    // slots - 1
  absl::InlinedVector<LaneRun, kLaneWindow> runs_;
  absl::InlinedVector<uint32_t, 64> counts_;  // [slot][peer][receive, send]: messages of the lane so far
};

}  // namespace

absl::Status RunPlanOnTransport(const Plan& plan, Transport& transport, const CollectiveArgs& args,
                                absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                                PlanLevels* levels) {
  if (plan.lanes.empty()) return absl::OkStatus();
  if (plan.levels && levels == nullptr) return absl::InternalError("a hierarchical plan without its levels");
  SharedWindows* windows = plan.shared_windows ? transport.shared_windows() : nullptr;
  if (plan.shared_windows && windows == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("a shared-memory plan over ", transport.name(), ", which has no windows"));
  }
  const size_t window = std::min(std::max<size_t>(plan.lane_window, 1), plan.lanes.size());
  absl::Span<std::byte> slots;
  if (plan.scratch_elements > 0) {
    BRAID_ASSIGN_OR_RETURN(slots,
                           scratch.Get(PlanRun::SlotsFor(window) * plan.scratch_elements * DTypeSize(args.dtype)));
  }
  PlanRun run(plan, transport, windows, args, input, output, slots, window, levels);
  return run.Run();
}

}  // namespace braid
