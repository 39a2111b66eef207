#include "collectives/algorithm_util.h"

#include "absl/strings/str_cat.h"
#include "tensor/dtype.h"

namespace braid {

absl::Status BytesMismatch(const CollectiveArgs& args, size_t got, size_t elements, const char* what) {
  const size_t expected = elements * DTypeSize(args.dtype);
  return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(args.kind), ": ", what, " has ", got,
                                                 " bytes, expected ", expected, " (", elements, " x ",
                                                 DTypeName(args.dtype), ")"));
}

absl::Status CheckShape(const Transport& transport, CollectiveKind shape, const CollectiveArgs& args,
                        absl::Span<const std::byte> input, absl::Span<std::byte> output) {
  const size_t n = static_cast<size_t>(transport.size());
  const size_t me = static_cast<size_t>(transport.rank());
  const size_t count = args.count;
  if ((shape == CollectiveKind::kBroadcast || shape == CollectiveKind::kReduce) &&
      (args.root < 0 || static_cast<size_t>(args.root) >= n)) {
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveKindName(args.kind), ": root ", args.root, " not in a group of ", n));
  }
  switch (shape) {
    case CollectiveKind::kAllReduce:
      BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), count, "input"));
      return CheckBytes(args, output.size(), count, "output");
    case CollectiveKind::kReduce:
      BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), count, "input"));
      if (me == static_cast<size_t>(args.root)) return CheckBytes(args, output.size(), count, "output");
      return absl::OkStatus();
    case CollectiveKind::kReduceScatter:
      BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), count * n, "input"));
      return CheckBytes(args, output.size(), count, "output");
    case CollectiveKind::kAllGather:
      BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), count, "input"));
      return CheckBytes(args, output.size(), count * n, "output");
    case CollectiveKind::kBroadcast: return CheckBytes(args, output.size(), count, "buffer");
    case CollectiveKind::kAllToAll:
      BRAID_RETURN_IF_ERROR(CheckBytes(args, input.size(), count * n, "input"));
      BRAID_RETURN_IF_ERROR(CheckBytes(args, output.size(), count * n, "output"));
      if (count > 0 && input.data() < output.data() + output.size() && output.data() < input.data() + input.size()) {
        return absl::InvalidArgumentError("alltoall: input and output must not overlap");
      }
      return absl::OkStatus();
    default: return absl::OkStatus();
  }
}

}  // namespace braid
