#include "base/hostlist.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status.h"

namespace braid {
namespace {

// 18 digits fit an int64_t with room for the range arithmetic.
constexpr size_t kMaxDigits = 18;

absl::Status Malformed(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("hostlist \"", text, "\": ", why));
}

bool AllDigits(absl::string_view s) {
  if (s.empty() || s.size() > kMaxDigits) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// One bracket's body ("01-04,07") as the zero-padded numbers it stands for.
absl::StatusOr<std::vector<std::string>> ExpandBracket(absl::string_view text, absl::string_view body) {
  std::vector<std::string> numbers;
  for (absl::string_view range : absl::StrSplit(body, ',')) {
    const std::pair<absl::string_view, absl::string_view> lo_hi = absl::StrSplit(range, absl::MaxSplits('-', 1));
    const absl::string_view lo_text = lo_hi.first;
    const absl::string_view hi_text = absl::StrContains(range, '-') ? lo_hi.second : lo_hi.first;
    if (!AllDigits(lo_text) || !AllDigits(hi_text)) {
      return Malformed(text, absl::StrCat("\"[", body, "]\" is not a comma list of N or LO-HI"));
    }
    int64_t lo = 0, hi = 0;
    (void)absl::SimpleAtoi(lo_text, &lo);
    (void)absl::SimpleAtoi(hi_text, &hi);
    if (hi < lo) return Malformed(text, absl::StrCat("range \"", range, "\" runs backwards"));
    if (static_cast<uint64_t>(hi - lo) >= kMaxHostlistHosts - numbers.size()) {
      return Malformed(text, absl::StrCat("expands to more than ", kMaxHostlistHosts, " hosts"));
    }
    // Slurm pads every number of a range to the width LO is written with.
    const int width = static_cast<int>(lo_text.size());
    for (int64_t n = lo; n <= hi; ++n) numbers.push_back(absl::StrFormat("%0*d", width, n));
  }
  return numbers;
}

// One comma-free (at the top level) item: literal text and bracket groups,
// multiplied out left to right.
absl::Status ExpandItem(absl::string_view text, absl::string_view item, std::vector<std::string>& hosts) {
  if (item.empty()) return Malformed(text, "empty host name (two commas in a row, or a comma at an end)");
  std::vector<std::string> names = {""};
  size_t pos = 0;
  while (pos < item.size()) {
    if (item[pos] == ']') return Malformed(text, "']' without '['");
    if (item[pos] != '[') {
      const size_t next = item.find('[', pos);
      const absl::string_view literal = item.substr(pos, next == absl::string_view::npos ? item.npos : next - pos);
      if (literal.find(']') != absl::string_view::npos) return Malformed(text, "']' without '['");
      for (std::string& name : names) absl::StrAppend(&name, literal);
      pos += literal.size();
      continue;
    }
    const size_t close = item.find(']', pos);
    if (close == absl::string_view::npos) return Malformed(text, "'[' without ']'");
    const absl::string_view body = item.substr(pos + 1, close - pos - 1);
    if (body.find('[') != absl::string_view::npos) return Malformed(text, "brackets nest");
    BRAID_ASSIGN_OR_RETURN(const std::vector<std::string> numbers, ExpandBracket(text, body));
    if (names.size() * numbers.size() + hosts.size() > kMaxHostlistHosts) {
      return Malformed(text, absl::StrCat("expands to more than ", kMaxHostlistHosts, " hosts"));
    }
    std::vector<std::string> multiplied;
    multiplied.reserve(names.size() * numbers.size());
    for (const std::string& name : names) {
      for (const std::string& number : numbers) multiplied.push_back(absl::StrCat(name, number));
    }
    names = std::move(multiplied);
    pos = close + 1;
  }
  if (hosts.size() + names.size() > kMaxHostlistHosts) {
    return Malformed(text, absl::StrCat("expands to more than ", kMaxHostlistHosts, " hosts"));
  }
  hosts.insert(hosts.end(), names.begin(), names.end());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view text) {
  if (text.empty()) return Malformed(text, "empty");
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || !absl::ascii_isprint(static_cast<unsigned char>(c))) {
      return Malformed(text, "whitespace or a control character (Slurm writes none)");
    }
  }
  // Split at the commas outside brackets; those inside belong to a group.
  std::vector<std::string> hosts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[' && ++depth > 1) return Malformed(text, "brackets nest");
    if (c == ']' && --depth < 0) return Malformed(text, "']' without '['");
    if (c != ',' || depth != 0) continue;
    BRAID_RETURN_IF_ERROR(ExpandItem(text, text.substr(start, i - start), hosts));
    start = i + 1;
  }
  if (depth != 0) return Malformed(text, "'[' without ']'");
  return hosts;
}

absl::StatusOr<std::vector<int>> ExpandTaskCounts(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("task counts \"", text, "\": ", why));
  };
  if (text.empty()) return bad("empty");
  std::vector<int> counts;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    absl::string_view count_text = item;
    int64_t repeat = 1;
    if (const size_t open = item.find('('); open != absl::string_view::npos) {
      absl::string_view times = item.substr(open);
      count_text = item.substr(0, open);
      if (!absl::ConsumePrefix(&times, "(x") || !absl::ConsumeSuffix(&times, ")") || !AllDigits(times) ||
          !absl::SimpleAtoi(times, &repeat) || repeat < 1) {
        return bad(absl::StrCat("\"", item, "\" is not N or N(xK)"));
      }
    }
    int count = 0;
    if (!AllDigits(count_text) || !absl::SimpleAtoi(count_text, &count)) {
      return bad(absl::StrCat("\"", item, "\" is not N or N(xK)"));
    }
    if (static_cast<uint64_t>(repeat) > kMaxHostlistHosts - counts.size()) {
      return bad(absl::StrCat("more than ", kMaxHostlistHosts, " nodes"));
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), count);
  }
  return counts;
}

}  // namespace braid
