// What every algorithm file shares (internal to //collectives:algorithms, so
// in namespace braid without clashing with anything outside): the prologue
// every collective starts with, element ranges as bytes, and the pipelined
// receiver of a stream of segments.
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

// Receives in flight per stream: enough to keep data moving while one
// segment is being reduced.
inline constexpr size_t kSlots = 4;

// Element range -> bytes.
template <typename Span>
Span Slice(Span span, const Range& range, size_t element_size) {
  return span.subspan(range.begin * element_size, range.length * element_size);
}

// kInvalidArgument unless `got` bytes are `elements` elements of args.dtype.
absl::Status CheckBytes(const CollectiveArgs& args, size_t got, size_t elements, const char* what);

void CopyIfDistinct(absl::Span<std::byte> to, absl::Span<const std::byte> from);

// The checks every collective of shape `shape` starts with (the algorithm's
// own: args.kind may be another, e.g. the agreement check's all-gather): its
// root, and that its buffers hold what the sizes in algorithms.h say
// (kInvalidArgument naming the buffer otherwise). Then what needs no peer: this rank's own
// block of an all-gather or all-to-all is copied, and a group of one copies
// its result. True when nothing is left to do (no elements, or a group of
// one). A broadcast passes its buffer as both input and output.
absl::StatusOr<bool> Prologue(const Transport& transport, CollectiveKind shape, const CollectiveArgs& args,
                              absl::Span<const std::byte> input, absl::Span<std::byte> output);

// The receives of one stream of segments, `kSlots` in flight, each into its
// own slot of scratch memory; Wait() waits for the next one in order.
class SlottedReceiver {
 public:
  struct Item {
    uint32_t tag;
    size_t bytes;
  };

  SlottedReceiver(Transport& transport, const CollectiveArgs& args, int peer, std::vector<Item> items,
                  absl::Span<std::byte> slots, size_t slot_bytes)
      : transport_(transport), args_(args), peer_(peer), items_(std::move(items)), slots_(slots),
        slot_bytes_(slot_bytes) {}

  absl::Status Start() {
    for (size_t i = 0; i < std::min(kSlots, items_.size()); ++i) BRAID_RETURN_IF_ERROR(Post(i));
    return absl::OkStatus();
  }

  // Waits for item `index` (in order) and returns its bytes; the slot stays
  // valid until Release(index).
  absl::StatusOr<absl::Span<const std::byte>> Wait(size_t index) {
    BRAID_RETURN_IF_ERROR(transport_.Wait({ops_[index % kSlots]}, args_.deadline));
    return absl::Span<const std::byte>(SlotOf(index).data(), items_[index].bytes);
  }

  // The slot of `index` may be reused: post the receive kSlots ahead.
  absl::Status Release(size_t index) {
    if (index + kSlots < items_.size()) return Post(index + kSlots);
    return absl::OkStatus();
  }

 private:
  absl::Span<std::byte> SlotOf(size_t index) { return slots_.subspan((index % kSlots) * slot_bytes_, slot_bytes_); }

  absl::Status Post(size_t index) {
    BRAID_ASSIGN_OR_RETURN(ops_[index % kSlots], transport_.PostRecv(peer_, CollectiveHeader(args_, items_[index].tag),
                                                                     SlotOf(index).subspan(0, items_[index].bytes)));
    return absl::OkStatus();
  }

  Transport& transport_;
  const CollectiveArgs& args_;
  int peer_;
  std::vector<Item> items_;
  absl::Span<std::byte> slots_;
  size_t slot_bytes_;
  OpId ops_[kSlots] = {};
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_ALGORITHM_UTIL_H_
