// libFuzzer target: braidrun's flag parser. The input is argv (arguments
// separated by NUL bytes). Parsing must never crash; an accepted command line
// must name a program (or ask for help or --print-env) and give a worker command for it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.emplace_back();
    } else {
      args.back().push_back(static_cast<char>(data[i]));
    }
  }
  absl::StatusOr<braid::LaunchOptions> options = braid::ParseLaunchOptions(args);
  if (!options.ok()) {
    if (options.status().message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  if (options->help || options->print_env) return 0;
  if (options->program.empty()) std::abort();
  if (braid::WorkerCommand(*options).empty()) std::abort();
  if (options->min_nodes > options->max_nodes || options->nproc_per_node < 1) std::abort();
  return 0;
}
