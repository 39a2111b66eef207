// Membership epochs of an elastic group, as keys in the job's store: the one
// record that workers (runtime/elastic.h) and braidrun's agent
// (launcher/agent.cc) both read and write, declared once here.
//
// A group's life is a sequence of epochs 0, 1, 2, ...; each epoch has one
// membership, decided once by CompareSet so that no two processes can see
// two different member lists for one epoch. Every key lives under
// "elastic/" in the workers' namespace (BRAID_STORE_PREFIX):
//
//   elastic/latest                 newest decided epoch (decimal)
//   elastic/e<N>/in/<id>           a process checking in for epoch N: its token
//   elastic/e<N>/members           epoch N's members (EncodeMembers)
//   elastic/e<N>/revoked           why epoch N's communicator was revoked (first cause wins)
//   elastic/dead/<id>/<token>      the agent saw that process die (how)
//   elastic/evict/<id>/<token>     the survivors left that (live) process out: its agent kills it
//   elastic/fallback               too few ranks are left: restart everything (from a checkpoint)
//
// A member's id is its launch RANK, kept for life and inherited by the
// process that replaces it; its token ("host:pid") tells incarnations apart.
#ifndef BRAID_STORE_MEMBERSHIP_H_
#define BRAID_STORE_MEMBERSHIP_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "store/store.h"

namespace braid::membership {

std::string LatestKey();
std::string CheckInKey(int64_t epoch, int id);
std::string MembersKey(int64_t epoch);
std::string RevokedKey(int64_t epoch);
std::string DeadKey(int id, absl::string_view token);
std::string EvictKey(int id, absl::string_view token);
std::string FallbackKey();

// "host:pid": what a process checks in with, and what its agent knows of it.
std::string ProcessToken(absl::string_view host, pid_t pid);

struct Member {
  int id = 0;
  std::string token;
  std::string host;  // where it runs: the new group's host layout
};
// One line per member, "id token host", ordered by id (the new ranks).
std::string EncodeMembers(absl::Span<const Member> members);
absl::StatusOr<std::vector<Member>> DecodeMembers(absl::string_view text);
// A check-in's value: "token host".
std::string EncodeCheckIn(const Member& member);
absl::StatusOr<Member> DecodeCheckIn(int id, absl::string_view text);

// The newest decided epoch, or -1 before the first.
absl::StatusOr<int64_t> Latest(Store& store);
// Moves elastic/latest up to `epoch` (never down: a slow member may come last).
absl::Status AdvanceLatest(Store& store, int64_t epoch);
// Epoch `epoch`'s members, with *decided set, once decided; else an empty list.
absl::StatusOr<std::vector<Member>> MembersIfDecided(Store& store, int64_t epoch, bool* decided);

// Revokes `epoch` with `cause` (kept only when it is the first). Returns the
// cause that stands.
absl::StatusOr<std::string> Revoke(Store& store, int64_t epoch, absl::string_view cause);

// The agent's half when one of its workers dies: records the death (so the
// survivors do not wait for it) and revokes the newest built epoch, and every
// decided one after it (being built), wherever that process is a member.
absl::Status DeclareDead(Store& store, int id, absl::string_view token, absl::string_view how);

}  // namespace braid::membership

#endif  // BRAID_STORE_MEMBERSHIP_H_
