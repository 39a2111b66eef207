// Slurm's compressed list notations, expanded: the hostlist
// (SLURM_JOB_NODELIST) and the task-count list (SLURM_TASKS_PER_NODE), as
// Slurm writes them, so braidrun and a worker started by srun read the same
// node list the same way.
//
//   ExpandHostlist("node[01-03,07],gpu-a[1-2]")
//       -> node01 node02 node03 node07 gpu-a1 gpu-a2
//   ExpandHostlist("rack[1-2]-n[1-2]")  -> rack1-n1 rack1-n2 rack2-n1 rack2-n2
//   ExpandTaskCounts("2(x3),1")         -> 2 2 2 1
//
// Pure functions: no environment, no I/O; safe from any thread.
#ifndef BRAID_BASE_HOSTLIST_H_
#define BRAID_BASE_HOSTLIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace braid {

// No list expands to more hosts than this (a typo such as "n[0-999999999]"
// must not exhaust memory).
inline constexpr size_t kMaxHostlistHosts = size_t{1} << 20;

// Expands a comma-separated hostlist in Slurm's order. A name may hold
// several bracket groups (each a comma list of N or LO-HI, LO <= HI); the
// groups multiply, the leftmost varying slowest. A range keeps LO's width
// when LO has a leading zero ("n[08-11]" -> n08..n11, "n[8-11]" -> n8..n11).
// Empty input, an empty item, unbalanced or nested brackets, a reversed range,
// anything but digits in a bracket, whitespace, or more than
// kMaxHostlistHosts hosts: kInvalidArgument naming the text.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view text);

// Expands Slurm's per-node count list: comma-separated "N" or "N(xK)" (N
// repeated K times). Malformed text is kInvalidArgument naming it.
absl::StatusOr<std::vector<int>> ExpandTaskCounts(absl::string_view text);

}  // namespace braid

#endif  // BRAID_BASE_HOSTLIST_H_
