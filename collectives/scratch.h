// Scratch: reusable host memory for the algorithms, grown on demand and
// kept, so a large buffer is never allocated (and first-touched) per call.
// The communicator owns one and hands it to every collective. Not
// thread-safe: one collective at a time uses it.
#ifndef BRAID_COLLECTIVES_SCRATCH_H_
#define BRAID_COLLECTIVES_SCRATCH_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace braid {

class Scratch {
 public:
  // At least `bytes` bytes; invalidates earlier spans when it grows.
  absl::StatusOr<absl::Span<std::byte>> Get(size_t bytes);

 private:
  std::shared_ptr<Storage> storage_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_SCRATCH_H_
