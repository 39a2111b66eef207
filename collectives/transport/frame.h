// The header every transport frame carries.
//
// Collectives are issued in the same order on every rank, so each frame
// names the collective it belongs to: the communicator's sequence number, the
// kind, element count, dtype, op and root the rank issued, and the algorithm
// step (tag). A receiver compares the header that arrives with the one it
// expects; any difference is a mismatched collective, reported with both
// sides' descriptions, never silently mixed data. The check costs no extra
// round trip: the header travels with the data.
#ifndef BRAID_COLLECTIVES_TRANSPORT_FRAME_H_
#define BRAID_COLLECTIVES_TRANSPORT_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "base/deadline.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid {

enum class CollectiveKind : uint8_t {
  kNone = 0,
  kAllReduce = 1,
  kReduceScatter = 2,
  kAllGather = 3,
  kBroadcast = 4,
  kReduce = 5,
  kBarrier = 6,
  kAllToAll = 7,
  kSendRecv = 8,
  kHandshake = 9,
  kCrossCheck = 10,  // BRAID_DEBUG=detail: every rank's next collective, before it runs
  kSplit = 11,       // a subgroup's making: colors and keys, then its transport's bootstrap
  kStragglers = 12,  // every rank's waits over the last window of collectives (straggler.h)
};
const char* CollectiveKindName(CollectiveKind kind);

// Fixed 40-byte wire layout, little-endian (x86 and ARM hosts alike).
struct FrameHeader {
  static constexpr uint32_t kMagic = 0x31445242;  // "BRD1"
  static constexpr uint8_t kFlagAbort = 1;          // payload = the sender's error text

  uint32_t magic = kMagic;
  CollectiveKind kind = CollectiveKind::kNone;
  uint8_t dtype = 0;      // braid::DType value
  uint8_t reduce_op = 0;  // braid::ReduceOp value
  uint8_t flags = 0;
  uint32_t tag = 0;       // algorithm step within the collective
  int32_t root = -1;      // root rank, -1 when the collective has none
  uint64_t seq = 0;       // communicator sequence number of the collective
  uint64_t count = 0;     // the collective's element count as the rank issued it
  uint64_t bytes = 0;     // payload bytes following this header
};
static_assert(sizeof(FrameHeader) == 40, "FrameHeader is 40 bytes on the wire");
inline constexpr size_t kFrameHeaderBytes = sizeof(FrameHeader);

// "allreduce seq 7 (count 1000, float32, sum) step 3, 4000 bytes".
std::string DescribeFrame(const FrameHeader& header);

// OK when `got` is the frame `expected` describes. Otherwise kInvalidArgument
// "rank R: mismatched collective with peer P: this rank issued <expected>,
// peer P sent <got>", or kDataLoss for a frame that is not a braid frame.
absl::Status CheckFrame(const FrameHeader& expected, const FrameHeader& got, int rank, int peer);

// One collective as a rank issued it: what every frame of it carries (its
// header) and how long it may take. The algorithms and the engines' own
// collectives (NativeCollectives) take it alike.
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

// The frame header of `args` at algorithm step `tag`: what each frame of the
// collective carries, and how errors describe the collective.
FrameHeader CollectiveHeader(const CollectiveArgs& args, uint32_t tag = 0);
// "allreduce seq 7 (count 1000, float32, sum)": a frame's description without
// its step and bytes (how native paths name a collective).
std::string DescribeCollective(const CollectiveArgs& args);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_FRAME_H_
