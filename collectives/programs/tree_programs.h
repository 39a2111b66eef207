// Internal to collectives/programs/: the tree all-reduces as Plans (see
// program.h for their ops).
#ifndef BRAID_COLLECTIVES_PROGRAMS_TREE_PROGRAMS_H_
#define BRAID_COLLECTIVES_PROGRAMS_TREE_PROGRAMS_H_

#include "collectives/programs/program.h"

namespace braid {

// One binary tree: up it, reduced at every inner rank; the root's result
// back down. Latency grows with log2(size), but an inner rank moves three
// times what a leaf does.
Plan TreeAllReduce(const PlanRequest& r);
// Two: the vector's first half over BinaryTree, its second over
// ReversedBinaryTree (topology.h), a segment of each in every lane. Each
// rank is inner in at most one tree, so each moves about twice the vector
// each way, as in a ring, with a latency of the trees' depth.
Plan DoubleTreeAllReduce(const PlanRequest& r);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_PROGRAMS_TREE_PROGRAMS_H_
