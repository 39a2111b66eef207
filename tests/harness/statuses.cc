#include "tests/harness/statuses.h"

#include "absl/strings/str_cat.h"

namespace braid::testing {

std::string DescribeStatuses(const std::vector<absl::Status>& statuses) {
  std::string text = "statuses:";
  for (size_t r = 0; r < statuses.size(); ++r) absl::StrAppend(&text, "\n  rank ", r, ": ", statuses[r].ToString());
  return text;
}

bool AllOk(const std::vector<absl::Status>& statuses) {
  for (const absl::Status& status : statuses) {
    if (!status.ok()) return false;
  }
  return true;
}

}  // namespace braid::testing
