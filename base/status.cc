#include "base/status.h"

#include <cstring>

namespace braid {

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::Status ErrnoStatus(int error_number, absl::string_view what) {
  // ErrnoToStatus appends ": <strerror text>" itself.
  return absl::ErrnoToStatus(error_number, what);
}

}  // namespace braid
