// braidrun's command line: torchrun's flags, parsed into LaunchOptions.
//
//   braidrun --standalone --nproc-per-node=4 train_mlp --epochs=2
//   braidrun --nnodes=1:3 --rdzv-endpoint=10.0.0.1:29400 --rdzv-id=job7 train.py
//
// Every flag takes both spellings (--nproc-per-node and --nproc_per_node), and
// both "--flag=value" and "--flag value". The first argument that is not a
// flag (or everything after "--") is the program and its arguments. A bad flag
// or an impossible combination is kInvalidArgument with one line that says
// what is wrong; braidrun prints it and exits 2, as argparse does. Every check
// that needs no other process is made here, so that braidrun refuses a bad
// command line before it prints or starts anything.
//
// Defaults come, lowest first, from braidrun itself, from a Slurm step
// (launcher/slurm_defaults.h), from torchrun's PET_<FLAG> variables (as a
// Kubeflow PyTorchJob sets them), and the command line wins over all.
#ifndef BRAID_LAUNCHER_OPTIONS_H_
#define BRAID_LAUNCHER_OPTIONS_H_

#include <signal.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/env.h"

namespace braid {

// Which of a worker's streams go to log files (torchrun's -r/-t values:
// 0 none, 1 stdout, 2 stderr, 3 both), per local rank.
struct StreamSelection {
  int all = 0;                      // the value for ranks not in per_rank
  std::map<int, int> per_rank;      // "0:3,1:2" form
  int For(int local_rank) const;
};

// What a worker's failure restarts (--restart-policy): every worker on every
// node, in a new rendezvous round (torchrun's way), or only the failed one,
// replaced in its slot while the others keep running (launcher/replace_policy.h).
enum class RestartPolicy { kAll, kReplace };

// The rendezvous store's port when --rdzv-endpoint names none (torchrun's).
inline constexpr uint16_t kDefaultRdzvPort = 29400;
// MASTER_PORT of a static multi-node job when --master-port names none
// (torchrun's); the static backend's store then listens one port above.
inline constexpr int kDefaultMasterPort = 29500;

struct LaunchOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  int node_rank = -1;  // -1: assigned by rendezvous (c10d), 0 for static
  std::string rdzv_backend = "static";  // "static" or "c10d"
  std::string rdzv_endpoint;            // HOST[:PORT] (checked), default port kDefaultRdzvPort
  std::string rdzv_id = "none";
  absl::Duration join_timeout = absl::Seconds(600);
  absl::Duration last_call_timeout = absl::Seconds(30);
  absl::Duration close_timeout = absl::Seconds(30);
  // Agents beat this often; one that misses keep_alive_max_attempt beats in
  // a row is lost (launcher/node_liveness.h). torchrun's defaults.
  absl::Duration keep_alive_interval = absl::Seconds(5);
  int keep_alive_max_attempt = 3;
  int is_host = -1;  // --rdzv-conf is_host: -1 decide by address
  bool standalone = false;
  int max_restarts = 0;  // whole-group restarts and replacements together
  RestartPolicy restart_policy = RestartPolicy::kAll;
  // Forwarded to every worker (then the job stops), as torchrun's default.
  std::vector<int> signals_to_handle = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  // Between the signal that stops the workers and SIGKILL.
  absl::Duration shutdown_timeout = absl::Seconds(5);
  absl::Duration monitor_interval = absl::Milliseconds(100);
  std::string master_addr;  // empty: node 0's address (127.0.0.1 on one node)
  int master_port = -1;  // -1: a free port (single node) or 29500 (multi-node static)
  std::string role = "default";
  std::string local_addr;
  StreamSelection redirects;
  StreamSelection tee;
  std::string log_dir;
  std::vector<int> local_ranks_filter;  // empty: every rank on the console
  bool no_python = false;
  bool run_path = false;
  bool module = false;
  bool mpi = false;
  std::string program;
  std::vector<std::string> program_args;
  bool help = false;
  bool print_env = false;  // --print-env: list braid's environment knobs and exit
  std::vector<std::string> notes;  // one line each for braidrun to print (an environment it ignored, and why)
};

// Parses argv[1..] (without the program name), with PET_* and SLURM_* read
// through `env`. --help sets `help`, and --print-env `print_env`; either
// stops parsing there and skips the environment and the checks that need a
// program. A malformed PET_* value is an error naming the variable.
absl::StatusOr<LaunchOptions> ParseLaunchOptions(const std::vector<std::string>& args,
                                                 const EnvLookup& env = ProcessEnv());

// What -h prints: every flag, one paragraph each.
std::string LaunchHelpText();

// The worker command line: "python3 -u [-m] program args" for a .py program,
// -m or --run-path; the program itself otherwise (always with --no-python).
std::vector<std::string> WorkerCommand(const LaunchOptions& options);

}  // namespace braid

#endif  // BRAID_LAUNCHER_OPTIONS_H_
