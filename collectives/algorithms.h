// The collective algorithms, each written once over the Transport interface:
// the scheduled ones (ring, tree, rhd, one-shot, chain, pairwise,
// dissemination) and the shared-memory paths (window, peer-access) as Plans
// (collectives/programs/, run by the host executor through
// run_algorithm.h), and point to point (point_to_point.h). Which one runs is
// the selector's call (selection.h).
//
// Every function is collective: all ranks of the transport's group call the
// same function with matching arguments, in the same order. Buffers are
// contiguous host memory as byte spans of `args.dtype` elements; `input` and
// `output` may be the same memory (in place) where noted, never partly
// overlapping. Each blocks until this rank's part is done or `args.deadline`
// passes (kDeadlineExceeded naming what is pending); errors name the rank,
// the peer and the collective (via the frame headers). `scratch` is reused
// memory owned by the caller (the communicator allocates it once).
//
// Sizes, per kind (count = args.count):
//   AllReduce      input count, output count (in place allowed)
//   ReduceScatter  input size * count, output count
//   AllGather      input count, output size * count (input may be output's own chunk)
//   Broadcast      buffer count (root's is sent, others' receive)
//   Reduce         input count, output count on the root (ignored elsewhere; in place allowed)
//   AllToAll       input size * count, output size * count (not in place)
//   Send / Recv    count, with a single peer
//
// avg reduces as sum and the owner of each result divides it once, so every
// rank ends with bit-identical values.
#ifndef BRAID_COLLECTIVES_ALGORITHMS_H_
#define BRAID_COLLECTIVES_ALGORITHMS_H_

#include "collectives/point_to_point.h"
#include "collectives/run_algorithm.h"

#endif  // BRAID_COLLECTIVES_ALGORITHMS_H_
