// Pure topology and chunking functions the algorithms are schedules over.
// No I/O: each is tested exhaustively on its own (tests/collectives/topology_test.cc).
#ifndef BRAID_COLLECTIVES_TOPOLOGY_H_
#define BRAID_COLLECTIVES_TOPOLOGY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid {

// A run of elements [begin, begin + length).
struct Range {
  size_t begin = 0;
  size_t length = 0;
  size_t end() const { return begin + length; }
  friend bool operator==(const Range& a, const Range& b) { return a.begin == b.begin && a.length == b.length; }
};

// Splits `count` elements into `parts` contiguous chunks whose lengths differ
// by at most one (the first count % parts chunks are one longer); chunk `index`.
Range ChunkRange(size_t count, int parts, int index);

// Segments of a chunk for pipelining: segments of `segment_elems` elements,
// the last one shorter. A zero-length chunk has zero segments.
size_t SegmentCount(size_t length, size_t segment_elems);
Range SegmentRange(const Range& chunk, size_t segment_elems, size_t index);

// Elements per segment for a transfer of `count` elements of `element_size`
// bytes split into `parts` chunks: about `segment_bytes`, at least one element,
// and few enough segments per chunk that a segment index fits in 16 bits.
size_t SegmentElements(size_t count, int parts, size_t element_size, size_t segment_bytes);

// The frame tag for segment `segment` of algorithm step `step`.
inline uint32_t StepTag(uint32_t step, size_t segment) {
  return (step << 16) | static_cast<uint32_t>(segment & 0xffff);
}

// a mod n in [0, n), for a negative `a` too.
inline int Mod(int a, int n) { return ((a % n) + n) % n; }

struct RingNeighbors {
  int left;   // receives from
  int right;  // sends to
};
RingNeighbors Ring(int rank, int size);

// A binary tree over ranks in heap order rooted at rank 0 (size 7):
//
//   0
//   +-- 1
//   |   +-- 3
//   |   +-- 4
//   +-- 2
//       +-- 5
//       +-- 6
//
// parent = (rank - 1) / 2, children 2 rank + 1 and 2 rank + 2 when < size.
struct TreeLinks {
  int parent = -1;            // -1 for the root
  std::vector<int> children;  // 0, 1 or 2
};
TreeLinks BinaryTree(int rank, int size);
// The same tree over the ranks in reverse order (position size - 1 - rank):
// for an even size its inner ranks are exactly BinaryTree's leaves, so the
// pair is a double binary tree (NCCL's idea) where every rank forwards
// data in one tree and only sends and receives its own in the other.
TreeLinks ReversedBinaryTree(int rank, int size);

// A chain from `root` through root + 1, root + 2, ... (mod size): a
// broadcast flows down it, a reduction up it toward the root.
struct ChainLinks {
  int position = 0;  // hops from the root
  int previous = -1;  // toward the root; -1 at the root
  int next = -1;      // away from it; -1 at the end
};
ChainLinks Chain(int rank, int size, int root);

// Recursive halving-doubling over the largest power of two p <= size. The
// first 2 * (size - p) ranks pair up (even keeps, odd folds into it) so p
// ranks remain. RhdRole tells one rank its part.
struct RhdRole {
  int power_of_two = 1;   // p
  bool folded = false;    // this rank hands its data to `partner` and waits for the result
  int partner = -1;       // fold partner (for a folding pair), else -1
  int virtual_rank = -1;  // rank among the p active ranks, -1 when folded
};
RhdRole RhdPlan(int rank, int size);
// The real rank of active virtual rank `virtual_rank`.
int RhdRealRank(int virtual_rank, int size);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TOPOLOGY_H_
