// What every algorithm file shares (internal to //collectives:algorithms, so
// in namespace braid without clashing with anything outside): the shape
// check every collective starts with, and element ranges as bytes.
#ifndef BRAID_COLLECTIVES_ALGORITHM_UTIL_H_
#define BRAID_COLLECTIVES_ALGORITHM_UTIL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/status.h"
#include "collectives/topology.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

// Element range -> bytes.
template <typename Span>
Span Slice(Span span, const Range& range, size_t element_size) {
  return span.subspan(range.begin * element_size, range.length * element_size);
}

// The error CheckBytes returns when the sizes differ.
absl::Status BytesMismatch(const CollectiveArgs& args, size_t got, size_t elements, const char* what);

// kInvalidArgument unless `got` bytes are `elements` elements of args.dtype.
// Inline: every collective checks its buffers.
inline absl::Status CheckBytes(const CollectiveArgs& args, size_t got, size_t elements, const char* what) {
  if (got == elements * DTypeSize(args.dtype)) return absl::OkStatus();
  return BytesMismatch(args, got, elements, what);
}

// The checks every collective of shape `shape` starts with (the algorithm's
// own: args.kind may be another, e.g. the agreement check's all-gather): its
// root, and that its buffers hold what the sizes in algorithms.h say
// (kInvalidArgument naming the buffer otherwise). A broadcast passes its
// buffer as both input and output.
absl::Status CheckShape(const Transport& transport, CollectiveKind shape, const CollectiveArgs& args,
                        absl::Span<const std::byte> input, absl::Span<std::byte> output);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_ALGORITHM_UTIL_H_
