#include "store/membership.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace braid::membership {

std::string LatestKey() { return "elastic/latest"; }
std::string CheckInKey(int64_t epoch, int id) { return absl::StrCat("elastic/e", epoch, "/in/", id); }
std::string MembersKey(int64_t epoch) { return absl::StrCat("elastic/e", epoch, "/members"); }
std::string RevokedKey(int64_t epoch) { return absl::StrCat("elastic/e", epoch, "/revoked"); }
std::string DeadKey(int id, absl::string_view token) { return absl::StrCat("elastic/dead/", id, "/", token); }
std::string EvictKey(int id, absl::string_view token) { return absl::StrCat("elastic/evict/", id, "/", token); }
std::string FallbackKey() { return "elastic/fallback"; }

std::string ProcessToken(absl::string_view host, pid_t pid) { return absl::StrCat(host, ":", pid); }

std::string EncodeCheckIn(const Member& member) { return absl::StrCat(member.token, " ", member.host); }

absl::StatusOr<Member> DecodeCheckIn(int id, absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ' ');
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
    return absl::DataLossError(absl::StrCat("a malformed check-in for member ", id, ": \"", text, "\""));
  }
  return Member{id, std::string(parts[0]), std::string(parts[1])};
}

std::string EncodeMembers(absl::Span<const Member> members) {
  std::string text;
  for (const Member& m : members) absl::StrAppend(&text, m.id, " ", m.token, " ", m.host, "\n");
  return text;
}

absl::StatusOr<std::vector<Member>> DecodeMembers(absl::string_view text) {
  std::vector<Member> members;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    int id = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &id) || (!members.empty() && id <= members.back().id)) {
      return absl::DataLossError(absl::StrCat("a malformed member list: \"", line, "\""));
    }
    members.push_back(Member{id, std::string(parts[1]), std::string(parts[2])});
  }
  return members;
}

absl::StatusOr<int64_t> Latest(Store& store) {
  const std::string key = LatestKey();
  absl::StatusOr<std::optional<std::string>> value = GetIfSet(store, key);
  if (!value.ok()) return value.status();
  if (!value->has_value()) return -1;
  int64_t epoch = 0;
  if (!absl::SimpleAtoi(**value, &epoch)) return absl::DataLossError(absl::StrCat(key, " holds \"", **value, "\""));
  return epoch;
}

absl::Status AdvanceLatest(Store& store, int64_t epoch) {
  while (true) {
    absl::StatusOr<int64_t> latest = Latest(store);
    if (!latest.ok()) return latest.status();
    if (*latest >= epoch) return absl::OkStatus();
    const std::string expected = *latest < 0 ? std::string() : absl::StrCat(*latest);
    const std::string desired = absl::StrCat(epoch);
    absl::StatusOr<std::string> now = store.CompareSet(LatestKey(), expected, desired);
    if (!now.ok()) return now.status();
    if (*now == desired) return absl::OkStatus();
  }
}

absl::StatusOr<std::vector<Member>> MembersIfDecided(Store& store, int64_t epoch, bool* decided) {
  *decided = false;
  absl::StatusOr<std::optional<std::string>> value = GetIfSet(store, MembersKey(epoch));
  if (!value.ok()) return value.status();
  if (!value->has_value()) return std::vector<Member>();
  *decided = true;
  return DecodeMembers(**value);
}

absl::StatusOr<std::string> Revoke(Store& store, int64_t epoch, absl::string_view cause) {
  const std::string text = cause.empty() ? std::string("revoked") : std::string(cause);
  return store.CompareSet(RevokedKey(epoch), "", text);
}

absl::Status DeclareDead(Store& store, int id, absl::string_view token, absl::string_view how) {
  absl::Status status = store.Set(DeadKey(id, token), how);
  if (!status.ok()) return status;
  absl::StatusOr<int64_t> latest = Latest(store);
  if (!latest.ok()) return latest.status();
  // Every decided epoch from the newest built one on: those past it are
  // being built (or failed to be), and a member of one must not be waited for.
  for (int64_t epoch = std::max<int64_t>(0, *latest);; ++epoch) {
    bool decided = false;
    absl::StatusOr<std::vector<Member>> members = MembersIfDecided(store, epoch, &decided);
    if (!members.ok()) return members.status();
    if (!decided) break;
    for (const Member& m : *members) {
      if (m.id == id && m.token == token) {
        absl::StatusOr<std::string> revoked =
            Revoke(store, epoch, absl::StrCat("rank ", id, " (", token, ") died: ", how));
        if (!revoked.ok()) return revoked.status();
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace braid::membership
