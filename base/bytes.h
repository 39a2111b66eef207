// Views of trivially copyable objects as bytes: what SendAll and RecvAll,
// frames and shared-memory records take.
#ifndef BRAID_BASE_BYTES_H_
#define BRAID_BASE_BYTES_H_

#include <cstddef>

#include "absl/types/span.h"

namespace braid {

template <typename T>
absl::Span<const std::byte> AsBytes(const T& value) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(&value), sizeof(T));
}
template <typename T>
absl::Span<std::byte> AsWritableBytes(T& value) {
  return absl::MakeSpan(reinterpret_cast<std::byte*>(&value), sizeof(T));
}

}  // namespace braid

#endif  // BRAID_BASE_BYTES_H_
