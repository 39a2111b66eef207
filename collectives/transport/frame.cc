#include "collectives/transport/frame.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid {

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kNone: return "none";
    case CollectiveKind::kAllReduce: return "allreduce";
    case CollectiveKind::kReduceScatter: return "reducescatter";
    case CollectiveKind::kAllGather: return "allgather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kAllToAll: return "alltoall";
    case CollectiveKind::kSendRecv: return "sendrecv";
    case CollectiveKind::kHandshake: return "handshake";
    case CollectiveKind::kCrossCheck: return "crosscheck";
    case CollectiveKind::kSplit: return "split";
    case CollectiveKind::kStragglers: return "stragglers";
  }
  return "unknown";
}

std::string DescribeFrame(const FrameHeader& h) {
  std::string text = absl::StrCat(CollectiveKindName(h.kind), " seq ", h.seq, " (count ", h.count);
  if (h.dtype < kNumDTypes) absl::StrAppend(&text, ", ", DTypeName(static_cast<DType>(h.dtype)));
  if (h.kind == CollectiveKind::kAllReduce || h.kind == CollectiveKind::kReduceScatter ||
      h.kind == CollectiveKind::kReduce) {
    absl::StrAppend(&text, ", ", ReduceOpName(static_cast<ReduceOp>(h.reduce_op)));
  }
  if (h.root >= 0) absl::StrAppend(&text, ", root ", h.root);
  absl::StrAppend(&text, ") step ", h.tag, ", ", h.bytes, " bytes");
  return text;
}

absl::Status CheckFrame(const FrameHeader& expected, const FrameHeader& got, int rank, int peer) {
  if (got.magic != FrameHeader::kMagic) {
    return absl::DataLossError(absl::StrCat("rank ", rank, ": peer ", peer,
                                            " sent a frame without braid's header (corrupt stream?)"));
  }
  const bool same = got.kind == expected.kind && got.dtype == expected.dtype &&
                    got.reduce_op == expected.reduce_op && got.tag == expected.tag && got.root == expected.root &&
                    got.seq == expected.seq && got.count == expected.count && got.bytes == expected.bytes;
  if (same) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": mismatched collective with peer ", peer,
                                                 ": this rank issued ", DescribeFrame(expected), "; peer ", peer,
                                                 " sent ", DescribeFrame(got)));
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

std::string DescribeCollective(const CollectiveArgs& args) {
  std::string frame = DescribeFrame(CollectiveHeader(args));
  frame.resize(std::min(frame.size(), frame.rfind(" step ")));
  return frame;
}

}  // namespace braid
