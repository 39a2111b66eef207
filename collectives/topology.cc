#include "collectives/topology.h"

#include <algorithm>

namespace braid {

Range ChunkRange(size_t count, int parts, int index) {
  const size_t p = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>(index);
  const size_t base = count / p;
  const size_t extra = count % p;
  return Range{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

size_t SegmentCount(size_t length, size_t segment_elems) {
  return (length + segment_elems - 1) / segment_elems;
}

Range SegmentRange(const Range& chunk, size_t segment_elems, size_t index) {
  const size_t begin = index * segment_elems;
  return Range{chunk.begin + begin, std::min(segment_elems, chunk.length - begin)};
}

size_t SegmentElements(size_t count, int parts, size_t element_size, size_t segment_bytes) {
  size_t elems = std::max<size_t>(1, segment_bytes / element_size);
  const size_t largest_chunk = (count + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
  const size_t at_least = (largest_chunk + 0xfffe) / 0xffff;  // <= 65535 segments a chunk
  return std::max(elems, at_least);
}

RingNeighbors Ring(int rank, int size) { return RingNeighbors{Mod(rank - 1, size), Mod(rank + 1, size)}; }

ChainLinks Chain(int rank, int size, int root) {
  ChainLinks links;
  links.position = Mod(rank - root, size);
  if (links.position > 0) links.previous = Mod(rank - 1, size);
  if (links.position < size - 1) links.next = Mod(rank + 1, size);
  return links;
}

TreeLinks BinaryTree(int rank, int size) {
  TreeLinks links;
  links.parent = rank == 0 ? -1 : (rank - 1) / 2;
  for (int child : {2 * rank + 1, 2 * rank + 2}) {
    if (child < size) links.children.push_back(child);
  }
  return links;
}

TreeLinks ReversedBinaryTree(int rank, int size) {
  const auto flip = [size](int r) { return size - 1 - r; };
  TreeLinks links = BinaryTree(flip(rank), size);
  if (links.parent >= 0) links.parent = flip(links.parent);
  for (int& child : links.children) child = flip(child);
  return links;
}

RhdRole RhdPlan(int rank, int size) {
  RhdRole role;
  int p = 1;
  while (p * 2 <= size) p *= 2;
  role.power_of_two = p;
  const int pairs = size - p;  // ranks [0, 2 * pairs) pair up
  if (rank < 2 * pairs) {
    role.partner = rank ^ 1;
    if (rank % 2 == 1) {
      role.folded = true;
      return role;
    }
    role.virtual_rank = rank / 2;
  } else {
    role.virtual_rank = rank - pairs;
  }
  return role;
}

int RhdRealRank(int virtual_rank, int size) {
  int p = 1;
  while (p * 2 <= size) p *= 2;
  const int pairs = size - p;
  return virtual_rank < pairs ? virtual_rank * 2 : virtual_rank + pairs;
}

}  // namespace braid
