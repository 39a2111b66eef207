// braidrun: a drop-in for torchrun. See launcher/options.h for the flags and
// launcher/agent.h for what the agent does; `braidrun -h` lists every flag,
// `braidrun --print-env` every environment knob (launcher/knob_table.h).
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/agent.h"
#include "launcher/knob_table.h"
#include "launcher/options.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<braid::LaunchOptions> options = braid::ParseLaunchOptions(args);
  if (!options.ok()) {
    std::fprintf(stderr, "braidrun: error: %s (braidrun -h lists the flags)\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(braid::LaunchHelpText().c_str(), stdout);
    return 0;
  }
  if (options->print_env) {
    std::fputs(braid::PrintEnvText().c_str(), stdout);
    return 0;
  }
  for (const std::string& note : options->notes) std::fprintf(stderr, "braidrun: note: %s\n", note.c_str());
  return braid::RunAgent(*options);
}
