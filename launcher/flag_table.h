// braidrun's flags, one table: each flag's spellings, help and the setter that
// parses its value into LaunchOptions. The command line, torchrun's PET_*
// variables and the Slurm defaults all set options through these setters, so
// a value is checked (and its error worded) the same way whatever its source.
#ifndef BRAID_LAUNCHER_FLAG_TABLE_H_
#define BRAID_LAUNCHER_FLAG_TABLE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "launcher/options.h"

namespace braid {

struct LaunchFlag {
  std::vector<std::string> names;  // canonical "--a-b" spelling first
  bool takes_value;
  const char* metavar;
  const char* help;
  using Setter = std::function<absl::Status(LaunchOptions&, const std::string&)>;
  Setter set;
};

// Every flag, in the order -h lists them.
const std::vector<LaunchFlag>& LaunchFlags();

// "--nproc_per_node" -> "--nproc-per-node"; short flags unchanged.
std::string CanonicalFlagName(absl::string_view name);

// The flag spelled `name` (canonical form), or nullptr.
const LaunchFlag* FindLaunchFlag(const std::string& name);

// torchrun's variable for a flag: PET_ and its long name's dest,
// "--nproc-per-node" -> "PET_NPROC_PER_NODE", "-r/--redirects" -> "PET_REDIRECTS".
std::string PetVariable(const LaunchFlag& flag);

// "SIGTERM,SIGUSR1" (or "TERM,USR1") -> their numbers; unknown names and the
// signals an agent cannot forward (SIGKILL, SIGSTOP, SIGCHLD) are refused.
absl::StatusOr<std::vector<int>> ParseSignalList(const std::string& text);

}  // namespace braid

#endif  // BRAID_LAUNCHER_FLAG_TABLE_H_
