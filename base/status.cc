#include "base/status.h"

#include <cstring>

namespace braid {

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::Status ErrnoStatus(int error_number, absl::string_view what) {
  char buffer[256];
  // GNU strerror_r returns the message (maybe not in buffer).
  const char* text = strerror_r(error_number, buffer, sizeof(buffer));
  return absl::ErrnoToStatus(error_number, absl::StrCat(what, ": ", text));
}

}  // namespace braid
