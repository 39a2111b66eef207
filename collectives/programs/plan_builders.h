// Internal to collectives/programs/: the small constructors the Plans are
// written with (program.cc, shm_programs.cc, tree_programs.cc).
#ifndef BRAID_COLLECTIVES_PROGRAMS_PLAN_BUILDERS_H_
#define BRAID_COLLECTIVES_PROGRAMS_PLAN_BUILDERS_H_

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "collectives/programs/program.h"
#include "collectives/topology.h"

namespace braid::plan {

inline Region In(const Range& r) { return {Buffer::kInput, r.begin, r.length}; }
inline Region Out(const Range& r) { return {Buffer::kOutput, r.begin, r.length}; }
inline Region Scratch(size_t begin, size_t count) { return {Buffer::kScratch, begin, count}; }
// `rank`'s window half (range within the half), what it sent with the last
// Sync, and its published buffers.
inline Region Window(int rank, const Range& r) { return {Buffer::kWindow, r.begin, r.length, rank}; }
inline Region Payload(int rank, const Range& r) { return {Buffer::kSyncPayload, r.begin, r.length, rank}; }
inline Region PeerIn(int rank, const Range& r) { return {Buffer::kPeerInput, r.begin, r.length, rank}; }
inline Region PeerOut(int rank, const Range& r) { return {Buffer::kPeerOutput, r.begin, r.length, rank}; }

inline Op Group(std::vector<Transfer> transfers) {
  Op op;
  op.kind = Op::Kind::kGroup;
  op.transfers = std::move(transfers);
  return op;
}
inline Transfer SendTo(int peer, Region r) { return {true, peer, r}; }
inline Transfer RecvFrom(int peer, Region r) { return {false, peer, r}; }

inline Op Local(Op::Kind kind, Region dst, Region a = {}, Region b = {}) {
  Op op;
  op.kind = kind;
  op.dst = dst;
  op.a = a;
  op.b = b;
  return op;
}
inline Op ReduceOp3(Region dst, Region a, Region b) { return Local(Op::Kind::kReduce, dst, a, b); }
inline Op CopyOp(Region dst, Region src) { return Local(Op::Kind::kCopy, dst, src); }
inline Op DivideOp(Region dst) { return Local(Op::Kind::kDivide, dst); }

// Segment `j` of `chunk` (empty past its end), as SegmentRange cuts it.
inline Range Lane(const Range& chunk, size_t seg, size_t j) {
  const size_t begin = j * seg;
  if (begin >= chunk.length) return Range{chunk.end(), 0};
  return Range{chunk.begin + begin, std::min(seg, chunk.length - begin)};
}

// The pipeline segment: about segment_bytes, `parts` chunks (topology.h).
inline size_t SegmentOf(const PlanRequest& r, int parts) {
  return SegmentElements(r.args.count, parts, DTypeSize(r.args.dtype), r.args.segment_bytes);
}

}  // namespace braid::plan

#endif  // BRAID_COLLECTIVES_PROGRAMS_PLAN_BUILDERS_H_
