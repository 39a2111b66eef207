// Status propagation for braid. Every fallible call returns absl::Status or
// absl::StatusOr<T>; these macros keep the call sites short. They are shaped
// like Abseil's newer ABSL_RETURN_IF_ERROR / ABSL_ASSIGN_OR_RETURN so that a
// later switch is mechanical. Abseil 20220623 has neither.
#ifndef BRAID_BASE_STATUS_H_
#define BRAID_BASE_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace braid {

// Returns `status` with `context` prepended to its message ("context: message"),
// keeping the code. Used at layer boundaries to add rank, peer, op and sequence.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

// The errno of the last failed system call as a Status with a code chosen by
// Abseil's mapping (ECONNRESET -> kUnavailable, ...), message "what: strerror".
absl::Status ErrnoStatus(int error_number, absl::string_view what);

}  // namespace braid

#define BRAID_STATUS_CONCAT_INNER_(a, b) a##b
#define BRAID_STATUS_CONCAT_(a, b) BRAID_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define BRAID_RETURN_IF_ERROR(expr)                          \
  do {                                                       \
    ::absl::Status braid_status_ = (expr);                   \
    if (!braid_status_.ok()) return braid_status_;           \
  } while (false)

// `BRAID_ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns the value of a
// StatusOr, or returns its error from the enclosing function.
#define BRAID_ASSIGN_OR_RETURN(lhs, expr) \
  BRAID_ASSIGN_OR_RETURN_IMPL_(BRAID_STATUS_CONCAT_(braid_statusor_, __LINE__), lhs, expr)

#define BRAID_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // BRAID_BASE_STATUS_H_
