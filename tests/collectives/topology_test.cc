#include "collectives/topology.h"

#include <set>
#include <vector>

#include "catch2/catch.hpp"

namespace braid {
namespace {

TEST_CASE("ChunkRange: chunks tile the count and differ by at most one", "[collectives][topology]") {
  for (size_t count : {0, 1, 2, 7, 8, 9, 100, 1001}) {
    for (int parts = 1; parts <= 9; ++parts) {
      size_t next = 0;
      size_t smallest = SIZE_MAX, largest = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = ChunkRange(count, parts, i);
        REQUIRE(r.begin == next);
        next = r.end();
        smallest = std::min(smallest, r.length);
        largest = std::max(largest, r.length);
      }
      REQUIRE(next == count);
      REQUIRE(largest - smallest <= 1);
    }
  }
}

TEST_CASE("SegmentRange: segments tile a chunk; indices fit 16 bits", "[collectives][topology]") {
  for (size_t length : {0, 1, 5, 64, 65, 1000}) {
    for (size_t seg : {1, 3, 64, 2000}) {
      const Range chunk{17, length};
      size_t next = chunk.begin;
      for (size_t j = 0; j < SegmentCount(length, seg); ++j) {
        const Range r = SegmentRange(chunk, seg, j);
        REQUIRE(r.begin == next);
        REQUIRE(r.length >= 1);
        REQUIRE(r.length <= seg);
        next = r.end();
      }
      REQUIRE(next == chunk.end());
    }
  }
  // 2^40 floats in 2 chunks with 4-byte segments would need 2^39 segments: the plan widens them.
  const size_t elems = SegmentElements(size_t{1} << 40, 2, 4, 4);
  REQUIRE(SegmentCount(size_t{1} << 39, elems) <= 0xffff);
  REQUIRE(SegmentElements(1000, 4, 4, 256) == 64);
  REQUIRE(SegmentElements(10, 4, 8, 1) == 1);
}

TEST_CASE("Ring and BinaryTree: every rank is linked consistently", "[collectives][topology]") {
  for (int size = 1; size <= 17; ++size) {
    int roots = 0;
    for (int rank = 0; rank < size; ++rank) {
      const RingNeighbors ring = Ring(rank, size);
      REQUIRE(Ring(ring.right, size).left == rank);
      const TreeLinks links = BinaryTree(rank, size);
      if (links.parent < 0) {
        ++roots;
      } else {
        const TreeLinks up = BinaryTree(links.parent, size);
        REQUIRE(std::count(up.children.begin(), up.children.end(), rank) == 1);
      }
      for (int child : links.children) REQUIRE(BinaryTree(child, size).parent == rank);
    }
    REQUIRE(roots == 1);
  }
  CHECK(BinaryTree(2, 7).children == std::vector<int>{5, 6});
}

TEST_CASE("ReversedBinaryTree: linked consistently; with BinaryTree, a double binary tree", "[collectives][topology]") {
  for (int size = 1; size <= 17; ++size) {
    int roots = 0;
    for (int rank = 0; rank < size; ++rank) {
      const TreeLinks links = ReversedBinaryTree(rank, size);
      if (links.parent < 0) ++roots;
      if (links.parent >= 0) {
        const TreeLinks up = ReversedBinaryTree(links.parent, size);
        REQUIRE(std::count(up.children.begin(), up.children.end(), rank) == 1);
      }
      for (int child : links.children) REQUIRE(ReversedBinaryTree(child, size).parent == rank);
      // Inner in at most one of the two trees (for an even size, in exactly one).
      const bool inner_first = !BinaryTree(rank, size).children.empty();
      const bool inner_second = !links.children.empty();
      REQUIRE(!(inner_first && inner_second));
      if (size % 2 == 0 && size > 1) REQUIRE(inner_first != inner_second);
    }
    REQUIRE(roots == 1);
  }
  CHECK(ReversedBinaryTree(6, 7).parent == -1);
  CHECK(ReversedBinaryTree(4, 7).children == std::vector<int>{1, 0});
}

TEST_CASE("RhdPlan: p active ranks with distinct virtual ranks; folded ranks pair with an active one",
          "[collectives][topology]") {
  for (int size = 1; size <= 33; ++size) {
    std::set<int> virtual_ranks;
    int p = 0;
    for (int rank = 0; rank < size; ++rank) {
      const RhdRole role = RhdPlan(rank, size);
      p = role.power_of_two;
      REQUIRE((p & (p - 1)) == 0);
      REQUIRE(p <= size);
      REQUIRE(p * 2 > size);
      if (role.folded) {
        const RhdRole partner = RhdPlan(role.partner, size);
        REQUIRE_FALSE(partner.folded);
        REQUIRE(partner.partner == rank);
      } else {
        REQUIRE(virtual_ranks.insert(role.virtual_rank).second);
        REQUIRE(RhdRealRank(role.virtual_rank, size) == rank);
      }
    }
    REQUIRE(static_cast<int>(virtual_ranks.size()) == p);
    REQUIRE(*virtual_ranks.rbegin() == p - 1);
  }
}

}  // namespace
}  // namespace braid
