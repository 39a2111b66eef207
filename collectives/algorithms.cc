#include "collectives/algorithms.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/topology.h"

namespace braid {
namespace {

// Receives in flight per stream: enough to keep data moving while one
// segment is being reduced.
constexpr size_t kSlots = 4;

FrameHeader Header(const CollectiveArgs& args, uint32_t tag) { return CollectiveHeader(args, tag); }

// Element range -> bytes.
template <typename Span>
Span Slice(Span span, const Range& range, size_t element_size) {
  return span.subspan(range.begin * element_size, range.length * element_size);
}

absl::Status CheckBytes(const CollectiveArgs& args, size_t got, size_t elements, const char* what) {
  const size_t expected = elements * DTypeSize(args.dtype);
  if (got == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(args.kind), ": ", what, " has ", got,
                                                 " bytes, expected ", expected, " (", elements, " x ",
                                                 DTypeName(args.dtype), ")"));
}

void CopyIfDistinct(absl::Span<std::byte> to, absl::Span<const std::byte> from) {
  if (to.data() != from.data() && !to.empty()) std::memmove(to.data(), from.data(), to.size());
}

// The checks every all-reduce starts with; true when nothing is left to do
// (no elements, or a group of one after copying input to output).
absl::StatusOr<bool> AllReduceTrivially(const Transport& transport, const CollectiveArgs& args,
                                        absl::Span<const std::byte> input, absl::Span<std::byte> output) {
  BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), args.count, "input"));
  BRAID_RETURN_IF_ERROR(CheckBytes(args, output.size(), args.count, "output"));
  if (args.count == 0) return true;
  if (transport.size() == 1) {
    CopyIfDistinct(output, input);
    return true;
  }
  return false;
}

// The checks every all-to-all starts with, and this rank's own block copied;
// true when nothing is left to do (no elements, or a group of one).
absl::StatusOr<bool> AllToAllTrivially(const Transport& transport, const CollectiveArgs& args,
                                       absl::Span<const std::byte> input, absl::Span<std::byte> output) {
  const size_t n = static_cast<size_t>(transport.size());
  BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), args.count * n, "input"));
  BRAID_RETURN_IF_ERROR(CheckBytes(args, output.size(), args.count * n, "output"));
  if (args.count == 0) return true;
  if (input.data() < output.data() + output.size() && output.data() < input.data() + input.size()) {
    return absl::InvalidArgumentError("alltoall: input and output must not overlap");
  }
  const size_t block_bytes = input.size() / n;
  const size_t mine = static_cast<size_t>(transport.rank()) * block_bytes;
  std::memcpy(output.data() + mine, input.data() + mine, block_bytes);
  return n == 1;
}

// The receives of one stream of segments, `kSlots` in flight, each into its
// own slot of scratch memory; Next() waits for the next one in order.
class SlottedReceiver {
 public:
  struct Item {
    uint32_t tag;
    size_t bytes;
  };

  SlottedReceiver(Transport& transport, const CollectiveArgs& args, int peer, std::vector<Item> items,
                  absl::Span<std::byte> slots, size_t slot_bytes)
      : transport_(transport), args_(args), peer_(peer), items_(std::move(items)), slots_(slots),
        slot_bytes_(slot_bytes) {}

  absl::Status Start() {
    for (size_t i = 0; i < std::min(kSlots, items_.size()); ++i) BRAID_RETURN_IF_ERROR(Post(i));
    return absl::OkStatus();
  }

  // Waits for item `index` (in order) and returns its bytes; the slot stays
  // valid until Release(index).
  absl::StatusOr<absl::Span<const std::byte>> Wait(size_t index) {
    BRAID_RETURN_IF_ERROR(transport_.Wait({ops_[index % kSlots]}, args_.deadline));
    return absl::Span<const std::byte>(SlotOf(index).data(), items_[index].bytes);
  }

  // The slot of `index` may be reused: post the receive kSlots ahead.
  absl::Status Release(size_t index) {
    if (index + kSlots < items_.size()) return Post(index + kSlots);
    return absl::OkStatus();
  }

 private:
  absl::Span<std::byte> SlotOf(size_t index) { return slots_.subspan((index % kSlots) * slot_bytes_, slot_bytes_); }

  absl::Status Post(size_t index) {
    BRAID_ASSIGN_OR_RETURN(ops_[index % kSlots],
                           transport_.PostRecv(peer_, Header(args_, items_[index].tag),
                                               SlotOf(index).subspan(0, items_[index].bytes)));
    return absl::OkStatus();
  }

  Transport& transport_;
  const CollectiveArgs& args_;
  int peer_;
  std::vector<Item> items_;
  absl::Span<std::byte> slots_;
  size_t slot_bytes_;
  OpId ops_[kSlots] = {};
};

}  // namespace

std::string DescribeCollective(const CollectiveArgs& args) {
  std::string frame = DescribeFrame(CollectiveHeader(args));
  frame.resize(std::min(frame.size(), frame.rfind(" step ")));
  return frame;
}

FrameHeader CollectiveHeader(const CollectiveArgs& args, uint32_t tag) {
  FrameHeader header;
  header.kind = args.kind;
  header.seq = args.seq;
  header.dtype = static_cast<uint8_t>(args.dtype);
  header.reduce_op = static_cast<uint8_t>(args.op);
  header.root = args.root;
  header.count = args.count;
  header.tag = tag;
  return header;
}

const char* AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kRhd: return "rhd";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kNative: return "native";
  }
  return "invalid";
}

absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd, Algorithm::kDirect,
                      Algorithm::kNative}) {
    if (lower == AlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown algorithm \"", name, "\" (expected auto, ring, tree, rhd, direct or native)"));
}

absl::StatusOr<absl::Span<std::byte>> Scratch::Get(size_t bytes) {
  if (!storage_ || storage_->nbytes() < bytes) {
    // Grow geometrically so a sweep of sizes allocates a few times, not every call.
    const size_t grown = std::max(bytes, storage_ ? storage_->nbytes() * 2 : size_t{0});
    storage_.reset();
    BRAID_ASSIGN_OR_RETURN(storage_, Storage::Allocate(grown, Device::Cpu()));
    // First touch now, not inside a transfer. (A zero-byte storage may have
    // no memory at all: memset(nullptr, 0, 0) is undefined.)
    if (grown > 0) std::memset(storage_->data(), 0, grown);
  }
  return absl::MakeSpan(storage_->data(), bytes);
}

// Ring all-reduce: reduce-scatter then all-gather around the ring, every
// chunk split into segments so that a segment is forwarded as soon as it is
// reduced (transfer overlaps reduction). Out of place needs no copy: the
// reduce-scatter combines the input with what arrives straight into output.
absl::Status RingAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const bool done, AllReduceTrivially(transport, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  const size_t es = DTypeSize(args.dtype);
  const RingNeighbors ring = Ring(me, n);
  const size_t seg = SegmentElements(args.count, n, es, args.segment_bytes);
  auto chunk = [&](int c) { return ChunkRange(args.count, n, ((c % n) + n) % n); };
  const uint32_t last_rs_step = static_cast<uint32_t>(n - 2);

  // Reduce-scatter receives: step s brings chunk me - s - 1.
  struct Piece {
    uint32_t step;
    Range range;
    size_t segment;
  };
  std::vector<Piece> pieces;
  std::vector<SlottedReceiver::Item> items;
  for (uint32_t s = 0; s <= last_rs_step; ++s) {
    const Range c = chunk(me - static_cast<int>(s) - 1);
    for (size_t j = 0; j < SegmentCount(c.length, seg); ++j) {
      pieces.push_back({s, SegmentRange(c, seg, j), j});
      items.push_back({StepTag(s, j), pieces.back().range.length * es});
    }
  }
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> slots, scratch.Get(kSlots * seg * es));
  SlottedReceiver receiver(transport, args, ring.left, std::move(items), slots, seg * es);
  BRAID_RETURN_IF_ERROR(receiver.Start());

  std::vector<OpId> rs_sends, ag_sends;
  {
    const Range own = chunk(me);
    for (size_t j = 0; j < SegmentCount(own.length, seg); ++j) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right, Header(args, StepTag(0, j)),
                                                         Slice(input, SegmentRange(own, seg, j), es)));
      rs_sends.push_back(id);
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    BRAID_ASSIGN_OR_RETURN(absl::Span<const std::byte> arrived, receiver.Wait(i));
    absl::Span<std::byte> dst = Slice(output, piece.range, es);
    HostReduce(args.dtype, args.op, dst, Slice(input, piece.range, es), arrived);
    BRAID_RETURN_IF_ERROR(receiver.Release(i));
    const bool final_chunk = piece.step == last_rs_step;
    if (final_chunk && args.op == ReduceOp::kAvg) HostDivide(args.dtype, dst, n);
    // Forward at once: the next reduce-scatter step, or all-gather step 0.
    BRAID_ASSIGN_OR_RETURN(OpId id,
                           transport.PostSend(ring.right, Header(args, StepTag(piece.step + 1, piece.segment)), dst));
    (final_chunk ? ag_sends : rs_sends).push_back(id);
  }
  // Those sends read chunks the all-gather overwrites.
  BRAID_RETURN_IF_ERROR(transport.Wait(rs_sends, args.deadline));

  // All-gather: step t brings chunk me - t, forwarded at step t + 1.
  std::vector<Piece> gathered;
  std::vector<OpId> recvs;
  for (uint32_t t = 0; t <= last_rs_step; ++t) {
    const Range c = chunk(me - static_cast<int>(t));
    for (size_t j = 0; j < SegmentCount(c.length, seg); ++j) {
      const Range range = SegmentRange(c, seg, j);
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostRecv(ring.left, Header(args, StepTag(last_rs_step + 1 + t, j)),
                                                         Slice(output, range, es)));
      gathered.push_back({t, range, j});
      recvs.push_back(id);
    }
  }
  for (size_t i = 0; i < gathered.size(); ++i) {
    BRAID_RETURN_IF_ERROR(transport.Wait({recvs[i]}, args.deadline));
    const Piece& piece = gathered[i];
    if (piece.step < last_rs_step) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right,
                                                         Header(args, StepTag(last_rs_step + 2 + piece.step, piece.segment)),
                                                         Slice(output, piece.range, es)));
      ag_sends.push_back(id);
    }
  }
  return transport.Wait(ag_sends, args.deadline);
}

// Pipelined binary-tree all-reduce: segments flow up the tree, reduced at
// every inner rank, and the root's results flow back down. Latency grows with
// log2(size) rather than size.
absl::Status TreeAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const bool done, AllReduceTrivially(transport, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  const size_t es = DTypeSize(args.dtype);
  const TreeLinks links = BinaryTree(me, n);
  const Range all{0, args.count};
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);

  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> slots, scratch.Get(links.children.size() * kSlots * seg * es));
  std::vector<SlottedReceiver> from_children;
  for (size_t c = 0; c < links.children.size(); ++c) {
    std::vector<SlottedReceiver::Item> items;
    for (size_t j = 0; j < segments; ++j) items.push_back({StepTag(0, j), SegmentRange(all, seg, j).length * es});
    from_children.emplace_back(transport, args, links.children[c], std::move(items),
                               slots.subspan(c * kSlots * seg * es, kSlots * seg * es), seg * es);
    BRAID_RETURN_IF_ERROR(from_children.back().Start());
  }

  std::vector<OpId> up_sends, down_sends;
  for (size_t j = 0; j < segments; ++j) {
    const Range range = SegmentRange(all, seg, j);
    absl::Span<const std::byte> mine = Slice(input, range, es);
    absl::Span<std::byte> dst = Slice(output, range, es);
    for (size_t c = 0; c < from_children.size(); ++c) {
      BRAID_ASSIGN_OR_RETURN(absl::Span<const std::byte> arrived, from_children[c].Wait(j));
      HostReduce(args.dtype, args.op, dst, c == 0 ? mine : absl::Span<const std::byte>(dst), arrived);
      BRAID_RETURN_IF_ERROR(from_children[c].Release(j));
    }
    absl::Span<const std::byte> result = from_children.empty() ? mine : absl::Span<const std::byte>(dst);
    if (links.parent >= 0) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(links.parent, Header(args, StepTag(0, j)), result));
      up_sends.push_back(id);
      continue;
    }
    // The root: results are final; start them down at once.
    CopyIfDistinct(dst, result);
    if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, dst, n);
    for (int child : links.children) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(child, Header(args, StepTag(1, j)), dst));
      down_sends.push_back(id);
    }
  }
  if (links.parent >= 0) {
    // The up sends read `output` (or an in-place input), which the results overwrite.
    BRAID_RETURN_IF_ERROR(transport.Wait(up_sends, args.deadline));
    std::vector<OpId> recvs;
    for (size_t j = 0; j < segments; ++j) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostRecv(links.parent, Header(args, StepTag(1, j)),
                                                         Slice(output, SegmentRange(all, seg, j), es)));
      recvs.push_back(id);
    }
    for (size_t j = 0; j < segments; ++j) {
      BRAID_RETURN_IF_ERROR(transport.Wait({recvs[j]}, args.deadline));
      for (int child : links.children) {
        BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(child, Header(args, StepTag(1, j)),
                                                           Slice(output, SegmentRange(all, seg, j), es)));
        down_sends.push_back(id);
      }
    }
  }
  return transport.Wait(down_sends, args.deadline);
}

// Recursive halving (reduce-scatter) then doubling (all-gather) among the
// largest power of two of ranks; the others fold into a partner first and
// get the result back at the end. log2(size) steps: good for small and
// medium messages.
namespace {

// Outputs from this size on are written with non-temporal stores (measured
// here: +35% bus bandwidth at 64 MiB out of place, a loss below ~4 MiB).
// Out of place, they go through the windows even where ranks can write each
// other's memory (PeerAllReduce): writing a peer's output reads each of its
// uncached lines first. Measured here against direct writes: 4 ranks +25 % at
// 16 MiB, 2 and 4 ranks +20-30 % at 32-128 MiB; 2 ranks -17 % at 16 MiB.
constexpr size_t kStreamOutputBytes = size_t{16} << 20;
// A slice is reduced in pieces of this size, each while cached (measured
// here: 256 KiB beat 16, 64, 128 KiB and 1 MiB by a little, 2 and 4 ranks).
constexpr size_t kPeerPieceBytes = size_t{256} << 10;

// Copies every rank's reduced slice of a window round out of that rank's
// half into `out`, the round's part of the output; around the cache with
// `stream_out`.
void CopyRoundOut(const std::vector<std::byte*>& half, int n, int me, size_t es, absl::Span<std::byte> out,
                  bool stream_out) {
  const size_t count = out.size() / es;
  for (int k = 0; k < n; ++k) {
    const int rank = (me + k) % n;
    const Range slice = ChunkRange(count, n, rank);
    absl::Span<std::byte> to = Slice(out, slice, es);
    absl::Span<const std::byte> from(half[static_cast<size_t>(rank)] + slice.begin * es, to.size());
    if (stream_out) {
      HostStreamCopy(to, from);
    } else {
      std::memcpy(to.data(), from.data(), to.size());
    }
  }
}

// Direct all-reduce through the peers' own buffers (cross-memory copies):
// each rank reduces one slice of the whole vector, a piece at a time, reading
// the peers' inputs into cached scratch, and writes the result into every
// peer's output. Each input byte is read once and each output byte written
// once, with no window in between and no rounds. Safe in place too: only the
// slice's owner reads or writes a slice of anyone's buffers, and it reads
// each piece before it writes it. The first Sync publishes the buffers (and
// its header check means every peer's hold args.count elements, so no copy
// can land outside them); the last keeps them published until every rank is
// done.
//
// Where any rank has a large output of its own (kStreamOutputBytes, out of
// place), the results go through the windows instead, in rounds: each rank
// reduces its slice of the round from the peers' inputs into its window,
// and after a Sync every rank copies every slice out, around the cache. A
// round needs one Sync: the inputs stay published, and a window half is
// refilled only after the next round's Sync, when every peer has copied it.
absl::Status PeerAllReduce(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                           absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch) {
  const int n = transport.size();
  const int me = transport.rank();
  const size_t es = DTypeSize(args.dtype);
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> piece_buffer, scratch.Get(kPeerPieceBytes));
  const bool stream_out = output.data() != input.data() && output.size() >= kStreamOutputBytes;
  const std::byte wants_windows{stream_out ? uint8_t{1} : uint8_t{0}};
  BRAID_RETURN_IF_ERROR(windows.Sync(Header(args, StepTag(0, 0)), args.deadline, {input.data(), output.data()},
                                     absl::MakeConstSpan(&wants_windows, 1)));
  std::vector<PeerBuffers> peers(static_cast<size_t>(n));
  bool through_windows = false;
  for (int rank = 0; rank < n; ++rank) {
    if (rank != me) peers[static_cast<size_t>(rank)] = windows.Published(rank);
    through_windows = through_windows || *windows.SyncPayload(rank) != std::byte{0};
  }
  const size_t piece_elems = kPeerPieceBytes / es;
  // Reduces `slice` (elements of the whole vector) into `sum`, a piece at a time.
  auto reduce = [&](const Range& slice, absl::Span<std::byte> sum) -> absl::Status {
    for (size_t at = 0; at < slice.length; at += piece_elems) {
      const Range piece{slice.begin + at, std::min(piece_elems, slice.length - at)};
      absl::Span<std::byte> into = sum.subspan(at * es, piece.length * es);
      absl::Span<std::byte> theirs = piece_buffer.subspan(0, into.size());
      for (int k = 1; k < n; ++k) {
        const int peer = (me + k) % n;
        BRAID_RETURN_IF_ERROR(windows.ReadPeer(peer, peers[static_cast<size_t>(peer)].input + piece.begin * es, theirs));
        HostReduce(args.dtype, args.op, into, k == 1 ? Slice(input, piece, es) : into, theirs);
      }
      if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, into, n);
      if (through_windows) continue;
      for (int k = 1; k < n; ++k) {
        const int peer = (me + k) % n;
        BRAID_RETURN_IF_ERROR(windows.WritePeer(peer, into, peers[static_cast<size_t>(peer)].output + piece.begin * es));
      }
    }
    return absl::OkStatus();
  };
  if (!through_windows) {
    const Range mine = ChunkRange(args.count, n, me);
    BRAID_RETURN_IF_ERROR(reduce(mine, Slice(output, mine, es)));
    return windows.Sync(Header(args, StepTag(1, 0)), args.deadline);
  }
  const size_t round_elems = windows.half_bytes() / es;
  for (size_t begin = 0, round = 0; begin < args.count; begin += round_elems, ++round) {
    const Range part{begin, std::min(round_elems, args.count - begin)};
    const std::vector<std::byte*>& half = windows.NextRound();
    auto window = [&](int rank, const Range& range) {  // range within the round
      return absl::Span<std::byte>(half[static_cast<size_t>(rank)] + range.begin * es, range.length * es);
    };
    const Range mine = ChunkRange(part.length, n, me);
    BRAID_RETURN_IF_ERROR(reduce(Range{part.begin + mine.begin, mine.length}, window(me, mine)));
    BRAID_RETURN_IF_ERROR(windows.Sync(Header(args, StepTag(1, round)), args.deadline));
    CopyRoundOut(half, n, me, es, Slice(output, part, es), stream_out);
  }
  // The inputs stay published until every rank has read its last slice.
  return windows.Sync(Header(args, StepTag(2, 0)), args.deadline);
}

// Direct all-reduce through the shared windows, in rounds of up to one window
// half of the vector: every rank copies its part into its half (or, with
// `read_peers`, publishes its input for the peers to read instead); after a
// barrier, each reduces one slice reading every rank's data (writing the
// result into its own half); after a second barrier, each copies every slice
// out. Every byte is copied in once and out once, with no stream in between,
// and every phase keeps all ranks busy, which matters most when they
// outnumber the cores. Inputs of up to kSyncPayloadBytes ride with one Sync;
// other small rounds skip the slicing: every rank reduces the whole round
// itself, in rank order, after the first barrier.
absl::Status WindowAllReduce(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                             absl::Span<const std::byte> input, absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  const size_t es = DTypeSize(args.dtype);
  const size_t round_elems = windows.half_bytes() / es;
  // A large output of its own is not in the cache (the input was read, not
  // it): write it around the cache rather than read each line first.
  const bool stream_out = output.data() != input.data() && output.size() >= kStreamOutputBytes;
  if (input.size() <= SharedWindows::kSyncPayloadBytes) {
    // The inputs ride with the Sync, in the cache line each rank polls.
    BRAID_RETURN_IF_ERROR(windows.Sync(Header(args, StepTag(0, 0)), args.deadline, {}, input));
    auto input_of = [&](int rank) { return absl::MakeConstSpan(windows.SyncPayload(rank), input.size()); };
    HostReduce(args.dtype, args.op, output, input_of(0), input_of(1));
    for (int r = 2; r < n; ++r) HostReduce(args.dtype, args.op, output, output, input_of(r));
    if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, output, n);
    return absl::OkStatus();
  }
  for (size_t begin = 0, round = 0; begin < args.count; begin += round_elems, ++round) {
    const Range part{begin, std::min(round_elems, args.count - begin)};
    const std::vector<std::byte*>& half = windows.NextRound();
    auto window = [&](int rank, const Range& range) {
      return absl::Span<std::byte>(half[static_cast<size_t>(rank)] + range.begin * es, range.length * es);
    };
    const Range all{0, part.length};
    absl::Span<const std::byte> in = Slice(input, part, es);
    absl::Span<std::byte> out = Slice(output, part, es);
    if (part.length * es <= windows.whole_round_bytes()) {
      std::memcpy(window(me, all).data(), in.data(), in.size());
      BRAID_RETURN_IF_ERROR(windows.Sync(Header(args, StepTag(0, round)), args.deadline));
      HostReduce(args.dtype, args.op, out, window(0, all), window(1, all));
      for (int r = 2; r < n; ++r) HostReduce(args.dtype, args.op, out, out, window(r, all));
      if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, out, n);
      continue;
    }
    // This rank's own slice is read from its input, so it is not copied in.
    const Range mine = ChunkRange(part.length, n, me);
    for (const Range& other : {Range{0, mine.begin}, Range{mine.end(), part.length - mine.end()}}) {
      std::memcpy(window(me, other).data(), Slice(in, other, es).data(), other.length * es);
    }
    BRAID_RETURN_IF_ERROR(windows.Sync(Header(args, StepTag(0, round)), args.deadline));
    absl::Span<std::byte> sum = window(me, mine);
    HostReduce(args.dtype, args.op, sum, Slice(in, mine, es), window((me + 1) % n, mine));
    for (int k = 2; k < n; ++k) HostReduce(args.dtype, args.op, sum, sum, window((me + k) % n, mine));
    if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, sum, n);
    BRAID_RETURN_IF_ERROR(windows.Sync(Header(args, StepTag(1, round)), args.deadline));
    CopyRoundOut(half, n, me, es, out, stream_out);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DirectAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                             absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const bool done, AllReduceTrivially(transport, args, input, output));
  if (done) return absl::OkStatus();
  if (SharedWindows* windows = transport.shared_windows()) {
    // Every rank decides alike: same size, same collective probe verdict.
    const size_t slice_bytes = args.count / static_cast<size_t>(transport.size()) * DTypeSize(args.dtype);
    if (windows->CanAccessPeers() && slice_bytes >= windows->peer_access_min_slice_bytes()) {
      return PeerAllReduce(transport, *windows, args, input, output, scratch);
    }
    return WindowAllReduce(transport, *windows, args, input, output);
  }
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
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(from, Header(args, StepTag(0, 0)), slot(from)));
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(to, Header(args, StepTag(0, 0)), input));
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

absl::Status RhdAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                          absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const bool done, AllReduceTrivially(transport, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  CopyIfDistinct(output, input);  // the steps below work in place
  const size_t es = DTypeSize(args.dtype);
  const RhdRole role = RhdPlan(me, n);
  const int p = role.power_of_two;
  uint32_t step = 0;
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> incoming, scratch.Get(args.count * es));

  if (role.folded) {
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(role.partner, Header(args, StepTag(0, 0)), output));
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(role.partner, Header(args, StepTag(1000, 0)), output));
    return transport.Wait({s, r}, args.deadline);
  }
  if (role.partner >= 0) {
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(role.partner, Header(args, StepTag(0, 0)), incoming));
    BRAID_RETURN_IF_ERROR(transport.Wait({r}, args.deadline));
    HostReduce(args.dtype, args.op, output, output, incoming);
  }
  ++step;
  const int v = role.virtual_rank;
  // Chunk ranges in units of the p chunks; [lo, hi) is what this rank still reduces.
  auto span_of = [&](int lo, int hi) {
    const Range first = ChunkRange(args.count, p, lo);
    const Range last = ChunkRange(args.count, p, hi - 1);
    return Range{first.begin, last.end() - first.begin};
  };
  int lo = 0, hi = p;
  for (int mask = p / 2; mask >= 1; mask /= 2, ++step) {
    const int partner = RhdRealRank(v ^ mask, n);
    const int mid = (lo + hi) / 2;
    const bool keep_low = (v & mask) == 0;
    const Range keep = keep_low ? span_of(lo, mid) : span_of(mid, hi);
    const Range give = keep_low ? span_of(mid, hi) : span_of(lo, mid);
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(partner, Header(args, StepTag(step, 0)), Slice(output, give, es)));
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(partner, Header(args, StepTag(step, 0)),
                                                      incoming.subspan(0, keep.length * es)));
    BRAID_RETURN_IF_ERROR(transport.Wait({s, r}, args.deadline));
    absl::Span<std::byte> dst = Slice(output, keep, es);
    HostReduce(args.dtype, args.op, dst, dst, incoming.subspan(0, keep.length * es));
    if (keep_low) hi = mid; else lo = mid;
  }
  if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, Slice(output, span_of(lo, hi), es), n);
  for (int mask = 1; mask < p; mask *= 2, ++step) {
    const int partner = RhdRealRank(v ^ mask, n);
    const int width = hi - lo;
    const bool low = (v & mask) == 0;
    const Range mine = span_of(lo, hi);
    const Range theirs = low ? span_of(hi, hi + width) : span_of(lo - width, lo);
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(partner, Header(args, StepTag(step, 0)), Slice(output, mine, es)));
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(partner, Header(args, StepTag(step, 0)), Slice(output, theirs, es)));
    BRAID_RETURN_IF_ERROR(transport.Wait({s, r}, args.deadline));
    if (low) hi += width; else lo -= width;
  }
  if (role.partner >= 0) {
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(role.partner, Header(args, StepTag(1000, 0)), output));
    BRAID_RETURN_IF_ERROR(transport.Wait({s}, args.deadline));
  }
  return absl::OkStatus();
}

// Ring reduce-scatter: step s sends chunk me - s - 1 (its partial sum) and
// receives chunk me - s - 2, so the last step delivers this rank's own chunk.
absl::Status RingReduceScatter(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                               absl::Span<std::byte> output, Scratch& scratch) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), args.count * static_cast<size_t>(n), "input"));
  BRAID_RETURN_IF_ERROR(CheckBytes(args, output.size(), args.count, "output"));
  if (args.count == 0) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  auto chunk = [&](int c) { return Range{static_cast<size_t>(((c % n) + n) % n) * args.count, args.count}; };
  if (n == 1) {
    CopyIfDistinct(output, Slice(input, chunk(0), es));
    return absl::OkStatus();
  }
  const RingNeighbors ring = Ring(me, n);
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);
  const uint32_t last_step = static_cast<uint32_t>(n - 2);
  // Partial sums of steps 0 .. n-3 live in scratch until forwarded.
  const size_t partial_bytes = static_cast<size_t>(n - 2) * args.count * es;
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> memory, scratch.Get(partial_bytes + kSlots * seg * es));
  absl::Span<std::byte> partials = memory.subspan(0, partial_bytes);

  std::vector<SlottedReceiver::Item> items;
  for (uint32_t s = 0; s <= last_step; ++s) {
    for (size_t j = 0; j < segments; ++j) items.push_back({StepTag(s, j), SegmentRange({0, args.count}, seg, j).length * es});
  }
  SlottedReceiver receiver(transport, args, ring.left, std::move(items), memory.subspan(partial_bytes), seg * es);
  BRAID_RETURN_IF_ERROR(receiver.Start());
  std::vector<OpId> sends;
  for (size_t j = 0; j < segments; ++j) {
    const Range range = SegmentRange(chunk(me - 1), seg, j);
    BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right, Header(args, StepTag(0, j)), Slice(input, range, es)));
    sends.push_back(id);
  }
  size_t index = 0;
  for (uint32_t s = 0; s <= last_step; ++s) {
    const Range c = chunk(me - static_cast<int>(s) - 2);
    for (size_t j = 0; j < segments; ++j, ++index) {
      const Range in_chunk = SegmentRange({0, args.count}, seg, j);
      BRAID_ASSIGN_OR_RETURN(absl::Span<const std::byte> arrived, receiver.Wait(index));
      absl::Span<std::byte> dst = s == last_step ? Slice(output, in_chunk, es)
                                                 : Slice(partials.subspan(s * args.count * es, args.count * es), in_chunk, es);
      HostReduce(args.dtype, args.op, dst, Slice(input, SegmentRange(c, seg, j), es), arrived);
      BRAID_RETURN_IF_ERROR(receiver.Release(index));
      if (s == last_step) {
        if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, dst, n);
        continue;
      }
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right, Header(args, StepTag(s + 1, j)), dst));
      sends.push_back(id);
    }
  }
  return transport.Wait(sends, args.deadline);
}

// Ring all-gather: step t forwards chunk me - t to the right.
absl::Status RingAllGather(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), args.count, "input"));
  BRAID_RETURN_IF_ERROR(CheckBytes(args, output.size(), args.count * static_cast<size_t>(n), "output"));
  if (args.count == 0) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  auto chunk = [&](int c) { return Range{static_cast<size_t>(((c % n) + n) % n) * args.count, args.count}; };
  CopyIfDistinct(Slice(output, chunk(me), es), input);
  if (n == 1) return absl::OkStatus();
  const RingNeighbors ring = Ring(me, n);
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);
  const uint32_t last_step = static_cast<uint32_t>(n - 2);
  std::vector<OpId> recvs, sends;
  for (uint32_t t = 0; t <= last_step; ++t) {
    for (size_t j = 0; j < segments; ++j) {
      const Range range = SegmentRange(chunk(me - static_cast<int>(t) - 1), seg, j);
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostRecv(ring.left, Header(args, StepTag(t, j)), Slice(output, range, es)));
      recvs.push_back(id);
    }
  }
  for (size_t j = 0; j < segments; ++j) {
    BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right, Header(args, StepTag(0, j)),
                                                       Slice(output, SegmentRange(chunk(me), seg, j), es)));
    sends.push_back(id);
  }
  size_t index = 0;
  for (uint32_t t = 0; t <= last_step; ++t) {
    for (size_t j = 0; j < segments; ++j, ++index) {
      BRAID_RETURN_IF_ERROR(transport.Wait({recvs[index]}, args.deadline));
      if (t == last_step) continue;
      const Range range = SegmentRange(chunk(me - static_cast<int>(t) - 1), seg, j);
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right, Header(args, StepTag(t + 1, j)), Slice(output, range, es)));
      sends.push_back(id);
    }
  }
  return transport.Wait(sends, args.deadline);
}

// Pipelined chain from the root: each rank forwards a segment to the next as
// soon as it arrives.
absl::Status ChainBroadcast(Transport& transport, const CollectiveArgs& args, absl::Span<std::byte> buffer) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_RETURN_IF_ERROR(CheckBytes(args, buffer.size(), args.count, "buffer"));
  if (args.root < 0 || args.root >= n) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", args.root, " not in a group of ", n));
  }
  if (args.count == 0 || n == 1) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  const int position = (me - args.root + n) % n;
  const int next = position < n - 1 ? (me + 1) % n : -1;
  const int previous = (me + n - 1) % n;
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);
  const Range all{0, args.count};
  std::vector<OpId> recvs, sends;
  if (position > 0) {
    for (size_t j = 0; j < segments; ++j) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostRecv(previous, Header(args, StepTag(0, j)),
                                                         Slice(buffer, SegmentRange(all, seg, j), es)));
      recvs.push_back(id);
    }
  }
  for (size_t j = 0; j < segments; ++j) {
    if (position > 0) BRAID_RETURN_IF_ERROR(transport.Wait({recvs[j]}, args.deadline));
    if (next < 0) continue;
    BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(next, Header(args, StepTag(0, j)),
                                                       Slice(buffer, SegmentRange(all, seg, j), es)));
    sends.push_back(id);
  }
  return transport.Wait(sends, args.deadline);
}

// Pipelined chain toward the root: the rank farthest from the root sends its
// input; each rank adds its own and passes it on.
absl::Status ChainReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                         absl::Span<std::byte> output, Scratch& scratch) {
  const int n = transport.size();
  const int me = transport.rank();
  if (args.root < 0 || args.root >= n) {
    return absl::InvalidArgumentError(absl::StrCat("reduce: root ", args.root, " not in a group of ", n));
  }
  const bool root = me == args.root;
  BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), args.count, "input"));
  if (root) BRAID_RETURN_IF_ERROR(CheckBytes(args, output.size(), args.count, "output"));
  if (args.count == 0) return absl::OkStatus();
  if (n == 1) {
    CopyIfDistinct(output, input);
    return absl::OkStatus();
  }
  const size_t es = DTypeSize(args.dtype);
  const int position = (me - args.root + n) % n;
  const int from = position < n - 1 ? (me + 1) % n : -1;
  const int to = (me + n - 1) % n;
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);
  const Range all{0, args.count};
  std::vector<OpId> sends;
  if (from < 0) {
    for (size_t j = 0; j < segments; ++j) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(to, Header(args, StepTag(0, j)),
                                                         Slice(input, SegmentRange(all, seg, j), es)));
      sends.push_back(id);
    }
    return transport.Wait(sends, args.deadline);
  }
  const size_t partial_bytes = root ? 0 : args.count * es;
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> memory, scratch.Get(partial_bytes + kSlots * seg * es));
  absl::Span<std::byte> target = root ? output : memory.subspan(0, partial_bytes);
  std::vector<SlottedReceiver::Item> items;
  for (size_t j = 0; j < segments; ++j) items.push_back({StepTag(0, j), SegmentRange(all, seg, j).length * es});
  SlottedReceiver receiver(transport, args, from, std::move(items), memory.subspan(partial_bytes), seg * es);
  BRAID_RETURN_IF_ERROR(receiver.Start());
  for (size_t j = 0; j < segments; ++j) {
    const Range range = SegmentRange(all, seg, j);
    BRAID_ASSIGN_OR_RETURN(absl::Span<const std::byte> arrived, receiver.Wait(j));
    absl::Span<std::byte> dst = Slice(target, range, es);
    HostReduce(args.dtype, args.op, dst, Slice(input, range, es), arrived);
    BRAID_RETURN_IF_ERROR(receiver.Release(j));
    if (root) {
      if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, dst, n);
      continue;
    }
    BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(to, Header(args, StepTag(0, j)), dst));
    sends.push_back(id);
  }
  return transport.Wait(sends, args.deadline);
}

// Dissemination: in round k every rank signals rank + 2^k and hears from
// rank - 2^k; after ceil(log2 n) rounds everyone has heard from everyone.
absl::Status DisseminationBarrier(Transport& transport, const CollectiveArgs& args) {
  const int n = transport.size();
  const int me = transport.rank();
  uint32_t round = 0;
  for (int distance = 1; distance < n; distance *= 2, ++round) {
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend((me + distance) % n, Header(args, round), {}));
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv((me - distance + n) % n, Header(args, round), {}));
    BRAID_RETURN_IF_ERROR(transport.Wait({s, r}, args.deadline));
  }
  return absl::OkStatus();
}

// Every pair exchanges its blocks directly; all transfers in flight at once.
absl::Status PairwiseAllToAll(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                              absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, AllToAllTrivially(transport, args, input, output));
  if (done) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  auto block = [&](int peer) { return Range{static_cast<size_t>(peer) * args.count, args.count}; };
  std::vector<OpId> ops;
  for (int k = 1; k < n; ++k) {
    // Staggered so every rank starts with a different partner.
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(from, Header(args, 0), Slice(output, block(from), es)));
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(to, Header(args, 0), Slice(input, block(to), es)));
    ops.push_back(r);
    ops.push_back(s);
  }
  return transport.Wait(ops, args.deadline);
}

bool CanCopyDirect(Transport& transport, size_t block_bytes) {
  SharedWindows* windows = transport.shared_windows();
  return windows != nullptr && windows->CanAccessPeers() && block_bytes >= windows->peer_access_min_slice_bytes();
}

namespace {

// The frame of the direct collectives below: the first Sync publishes every
// rank's buffers (and, as its header must match, that they hold as much as
// this rank's), `copy` moves this rank's part with cross-memory copies, and
// the second Sync keeps every buffer published until every rank is done.
template <typename Copy>
absl::Status DirectCopies(Transport& transport, const CollectiveArgs& args, PeerBuffers mine, Copy copy) {
  SharedWindows& windows = *transport.shared_windows();
  BRAID_RETURN_IF_ERROR(windows.Sync(Header(args, StepTag(0, 0)), args.deadline, mine));
  std::vector<PeerBuffers> peers(static_cast<size_t>(transport.size()));
  for (int peer = 0; peer < transport.size(); ++peer) {
    if (peer != transport.rank()) peers[static_cast<size_t>(peer)] = windows.Published(peer);
  }
  BRAID_RETURN_IF_ERROR(copy(windows, peers));
  return windows.Sync(Header(args, StepTag(1, 0)), args.deadline);
}

}  // namespace

absl::Status DirectAllGather(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                             absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), args.count, "input"));
  BRAID_RETURN_IF_ERROR(CheckBytes(args, output.size(), args.count * static_cast<size_t>(n), "output"));
  auto chunk = [&](int rank) { return output.subspan(static_cast<size_t>(rank) * input.size(), input.size()); };
  CopyIfDistinct(chunk(me), input);
  if (n == 1 || args.count == 0) return absl::OkStatus();
  return DirectCopies(transport, args, {input.data(), nullptr},
                      [&](SharedWindows& windows, const std::vector<PeerBuffers>& peers) -> absl::Status {
                        for (int k = 1; k < n; ++k) {
                          const int peer = (me + k) % n;
                          BRAID_RETURN_IF_ERROR(windows.ReadPeer(peer, peers[static_cast<size_t>(peer)].input, chunk(peer)));
                        }
                        return absl::OkStatus();
                      });
}

absl::Status DirectReduceScatter(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                                 absl::Span<std::byte> output, Scratch& scratch) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), args.count * static_cast<size_t>(n), "input"));
  BRAID_RETURN_IF_ERROR(CheckBytes(args, output.size(), args.count, "output"));
  const size_t es = DTypeSize(args.dtype);
  const size_t offset = static_cast<size_t>(me) * output.size();  // of this rank's chunk in every input
  if (n == 1 || args.count == 0) {
    CopyIfDistinct(output, input.subspan(offset, output.size()));
    return absl::OkStatus();
  }
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> piece_buffer, scratch.Get(kPeerPieceBytes));
  return DirectCopies(
      transport, args, {input.data(), nullptr},
      [&](SharedWindows& windows, const std::vector<PeerBuffers>& peers) -> absl::Status {
        const size_t piece_bytes = kPeerPieceBytes / es * es;
        for (size_t at = 0; at < output.size(); at += piece_bytes) {
          absl::Span<std::byte> sum = output.subspan(at, std::min(piece_bytes, output.size() - at));
          absl::Span<std::byte> theirs = piece_buffer.subspan(0, sum.size());
          for (int k = 1; k < n; ++k) {
            const int peer = (me + k) % n;
            BRAID_RETURN_IF_ERROR(windows.ReadPeer(peer, peers[static_cast<size_t>(peer)].input + offset + at, theirs));
            HostReduce(args.dtype, args.op, sum, k == 1 ? input.subspan(offset + at, sum.size()) : sum, theirs);
          }
          if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, sum, n);
        }
        return absl::OkStatus();
      });
}

absl::Status DirectAllToAll(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                            absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, AllToAllTrivially(transport, args, input, output));
  if (done) return absl::OkStatus();
  const size_t block_bytes = args.count * DTypeSize(args.dtype);
  auto block = [&](auto span, int rank) { return span.subspan(static_cast<size_t>(rank) * block_bytes, block_bytes); };
  return DirectCopies(transport, args, {input.data(), nullptr},
                      [&](SharedWindows& windows, const std::vector<PeerBuffers>& peers) -> absl::Status {
                        for (int k = 1; k < n; ++k) {
                          const int peer = (me + k) % n;
                          BRAID_RETURN_IF_ERROR(windows.ReadPeer(
                              peer, peers[static_cast<size_t>(peer)].input + static_cast<size_t>(me) * block_bytes,
                              block(output, peer)));
                        }
                        return absl::OkStatus();
                      });
}

absl::Status SendTo(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<const std::byte> data) {
  BRAID_RETURN_IF_ERROR(CheckBytes(args, data.size(), args.count, "send buffer"));
  BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(peer, Header(args, 0), data));
  return transport.Wait({id}, args.deadline);
}

absl::Status RecvFrom(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<std::byte> data) {
  BRAID_RETURN_IF_ERROR(CheckBytes(args, data.size(), args.count, "receive buffer"));
  BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostRecv(peer, Header(args, 0), data));
  return transport.Wait({id}, args.deadline);
}

}  // namespace braid
