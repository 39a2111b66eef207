// The collective algorithms, each written once over the Transport interface.
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

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/deadline.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace braid {

enum class Algorithm : uint8_t { kAuto = 0, kRing = 1, kTree = 2, kRhd = 3, kDirect = 4, kNative = 5 };
const char* AlgorithmName(Algorithm algorithm);
absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name);

struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kNone;
  uint64_t seq = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  size_t count = 0;
  Deadline deadline = absl::InfiniteFuture();
  // Pipelining granularity.
  size_t segment_bytes = size_t{256} << 10;
};

// Reusable host memory, grown on demand and kept: a large buffer is never
// allocated (and first-touched) per call. Not thread-safe.
class Scratch {
 public:
  // At least `bytes` bytes; invalidates earlier spans when it grows.
  absl::StatusOr<absl::Span<std::byte>> Get(size_t bytes);

 private:
  std::shared_ptr<Storage> storage_;
};

// The frame header of `args` at algorithm step `tag`: what each frame of the
// collective carries, and how errors describe the collective.
FrameHeader CollectiveHeader(const CollectiveArgs& args, uint32_t tag = 0);
// "allreduce seq 7 (count 1000, float32, sum)": a frame's description without
// its step and bytes (how native paths name a collective).
std::string DescribeCollective(const CollectiveArgs& args);

absl::Status RingAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch);
absl::Status TreeAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch);
absl::Status RhdAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                          absl::Span<std::byte> output, Scratch& scratch);
// One step: every rank sends its whole input to every other rank and reduces
// all n inputs itself, in rank order (so every rank rounds alike). (n - 1)x the
// bytes of the others, so only for small messages, where one step beats
// rhd's log2(n) and ring's 2(n - 1). Over a transport with shared windows
// (shm) it instead goes through them, each rank reducing one slice of each
// round: every byte copied in once and out once, for any size; and where
// ranks can reach each other's memory, large ones read the peers' inputs and
// write their outputs where they lie (see PeerAllReduce).
absl::Status DirectAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                             absl::Span<std::byte> output, Scratch& scratch);

absl::Status RingReduceScatter(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                               absl::Span<std::byte> output, Scratch& scratch);
absl::Status RingAllGather(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output);
absl::Status ChainBroadcast(Transport& transport, const CollectiveArgs& args, absl::Span<std::byte> buffer);
absl::Status ChainReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                         absl::Span<std::byte> output, Scratch& scratch);
absl::Status DisseminationBarrier(Transport& transport, const CollectiveArgs& args);
absl::Status PairwiseAllToAll(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                              absl::Span<std::byte> output);
// Direct collectives, over a transport whose ranks can reach each other's
// memory (SharedWindows::CanAccessPeers, shm): between two barriers each rank
// copies what it needs straight from the peers' buffers, one kernel copy per
// byte and no stream in between. The same sizes and rules as the ones above;
// CanCopyDirect says whether the transport has them and `block_bytes` (the
// bytes one rank takes from one peer) is large enough for them to win.
// Measured here against ring and pairwise over shm's streams: 2-6x at 64 KiB
// to 4 MiB, 2 and 4 ranks. (Broadcast has none: its chain of streams copies
// cached data faster than the kernel's copy, which pins every page.)
bool CanCopyDirect(Transport& transport, size_t block_bytes);
absl::Status DirectReduceScatter(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                                 absl::Span<std::byte> output, Scratch& scratch);
absl::Status DirectAllGather(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                             absl::Span<std::byte> output);
absl::Status DirectAllToAll(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                            absl::Span<std::byte> output);
absl::Status SendTo(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<const std::byte> data);
absl::Status RecvFrom(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<std::byte> data);

// An engine's own collectives (Open MPI's, NCCL's): what Algorithm::kNative
// runs, as a baseline and an option. A Transport that has them also derives
// from this class; the communicator finds them with dynamic_cast, so the
// Transport interface stays point-to-point only. Each method is the
// collective of the same name above: same buffers, sizes and in-place rules,
// the same avg (sum, then one division by the group size), every rank calls
// it in the same order; it blocks until this rank's part is done or
// args.deadline passes (kDeadlineExceeded naming the collective).
// kUnimplemented for a dtype/op the engine cannot do. Called from one thread
// at a time, like the Transport.
class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // "MPI", "NCCL": how errors and benchmarks name the engine.
  virtual const char* native_name() const = 0;
  virtual absl::Status NativeAllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                       absl::Span<std::byte> output) = 0;
  virtual absl::Status NativeReduceScatter(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                           absl::Span<std::byte> output) = 0;
  virtual absl::Status NativeAllGather(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                       absl::Span<std::byte> output) = 0;
  virtual absl::Status NativeBroadcast(const CollectiveArgs& args, absl::Span<std::byte> buffer) = 0;
  virtual absl::Status NativeReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                    absl::Span<std::byte> output) = 0;
  virtual absl::Status NativeBarrier(const CollectiveArgs& args) = 0;
  virtual absl::Status NativeAllToAll(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                      absl::Span<std::byte> output) = 0;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_ALGORITHMS_H_
