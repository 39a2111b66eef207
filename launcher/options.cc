#include "launcher/options.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "launcher/flag_table.h"
#include "launcher/slurm_defaults.h"

namespace braid {
namespace {

constexpr char kPrintEnvFlag[] = "--print-env";

// One flag's value, and where it came from: "" for the command line, else
// the variable(s) it was read from.
struct Setting {
  const LaunchFlag* flag;
  std::string value;
  std::string source;
};

absl::Status Apply(LaunchOptions& options, const Setting& setting) {
  absl::Status status = setting.flag->set(options, setting.value);
  return setting.source.empty() ? status : Annotate(status, setting.source);
}

// torchrun's argparse actions: `env` makes PET_<DEST> a flag's default,
// `check_env` reads a switch's PET_<DEST> as an integer (non-zero: on).
absl::StatusOr<std::vector<Setting>> PetSettings(const EnvLookup& env) {
  std::vector<Setting> settings;
  for (const LaunchFlag& flag : LaunchFlags()) {
    if (flag.names[0] == kPrintEnvFlag) continue;  // an action, not a setting
    const std::string variable = PetVariable(flag);
    const std::optional<std::string> value = env(variable);
    if (!value.has_value()) continue;
    if (flag.takes_value) {
      settings.push_back({&flag, *value, variable});
      continue;
    }
    int on = 0;
    if (!absl::SimpleAtoi(*value, &on)) {
      return absl::InvalidArgumentError(absl::StrCat(variable, "=\"", *value, "\" is not an integer (1 turns ",
                                                     flag.names[0], " on, 0 off, as torchrun reads it)"));
    }
    if (on != 0) settings.push_back({&flag, "", variable});
  }
  return settings;
}

absl::Status CheckCombinations(LaunchOptions& o) {
  if (o.program.empty()) return absl::InvalidArgumentError("the following arguments are required: program");
  if (o.no_python && (o.module || o.run_path)) {
    return absl::InvalidArgumentError("--no-python cannot be used with --module or --run-path");
  }
  if (o.module && o.run_path) return absl::InvalidArgumentError("--module and --run-path exclude each other");
  if (o.standalone) {
    if (o.max_nodes != 1) return absl::InvalidArgumentError("--standalone runs one node: drop --nnodes or set it to 1");
    if (!o.rdzv_endpoint.empty()) {
      return absl::InvalidArgumentError("--standalone hosts its own store: drop --rdzv-endpoint");
    }
    o.rdzv_backend = "c10d";
  }
  if (o.rdzv_backend == "static") {
    if (o.min_nodes != o.max_nodes) {
      return absl::InvalidArgumentError("--nnodes MIN:MAX needs --rdzv-backend=c10d (static needs a fixed count)");
    }
    if (o.node_rank < 0) o.node_rank = 0;
    if (o.node_rank >= o.max_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--node-rank ", o.node_rank, " is out of range for --nnodes ", o.max_nodes));
    }
  } else {
    if (o.node_rank >= 0 && !o.standalone) {
      return absl::InvalidArgumentError("--node-rank is for --rdzv-backend=static (c10d assigns node ranks)");
    }
    if (!o.standalone && o.max_nodes > 1 && o.rdzv_endpoint.empty()) {
      return absl::InvalidArgumentError("--rdzv-backend=c10d with several nodes needs --rdzv-endpoint HOST[:PORT]");
    }
  }
  if (o.rdzv_backend == "static" && o.max_nodes > 1 && o.rdzv_endpoint.empty() && o.master_port >= 65535) {
    // The static backend's store then listens on MASTER_PORT + 1.
    return absl::InvalidArgumentError(absl::StrCat("--master-port ", o.master_port,
                                                   " leaves no port for the store at MASTER_PORT+1: give "
                                                   "--rdzv-endpoint HOST:PORT or a lower --master-port"));
  }
  if (o.mpi && o.max_nodes != 1) return absl::InvalidArgumentError("--mpi starts one node's workers: use --nnodes=1");
  if (o.mpi && o.restart_policy == RestartPolicy::kReplace) {
    return absl::InvalidArgumentError(
        "--restart-policy=replace cannot be used with --mpi: mpirun cannot replace one rank "
        "(use --restart-policy=all)");
  }
  for (int rank : o.local_ranks_filter) {
    if (rank >= o.nproc_per_node) {
      return absl::InvalidArgumentError(absl::StrCat("--local-ranks-filter ", rank, " is not a local rank (0..",
                                                     o.nproc_per_node - 1, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int StreamSelection::For(int local_rank) const {
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? all : it->second;
}

absl::StatusOr<LaunchOptions> ParseLaunchOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  LaunchOptions options;
  std::vector<Setting> given;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      options.help = true;
      return options;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    std::string name = arg;
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos && absl::StartsWith(arg, "--")) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    } else if (arg.size() > 2 && arg[1] != '-') {  // "-t3" style
      name = arg.substr(0, 2);
      value = arg.substr(2);
      has_value = true;
    }
    const LaunchFlag* flag = FindLaunchFlag(CanonicalFlagName(name));
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unrecognized argument: ", name));
    if (flag->takes_value && !has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("argument ", name, ": expected a value"));
      value = args[++i];
    } else if (!flag->takes_value && has_value) {
      return absl::InvalidArgumentError(absl::StrCat("argument ", name, ": takes no value"));
    }
    if (flag->names[0] == kPrintEnvFlag) {
      // Like --help, nothing after it matters; a bad flag before it is still refused.
      for (const Setting& setting : given) BRAID_RETURN_IF_ERROR(Apply(options, setting));
      options.print_env = true;
      return options;
    }
    given.push_back({flag, value, ""});
  }
  if (i < args.size()) {
    options.program = args[i];
    options.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  }
  // Lowest first: Slurm's defaults, then PET_* (torchrun's defaults), then the command line.
  BRAID_ASSIGN_OR_RETURN(std::vector<Setting> pet, PetSettings(env));
  std::map<std::string, std::string> asked;
  for (const std::vector<Setting>* layer : {&pet, &given}) {
    for (const Setting& setting : *layer) asked[setting.flag->names[0]] = setting.value;
  }
  BRAID_ASSIGN_OR_RETURN(SlurmDefaults slurm, SlurmFlagDefaults(env, asked));
  options.notes = std::move(slurm.notes);
  std::vector<Setting> from_slurm;
  for (const SlurmDefault& slurm_default : slurm.flags) {
    from_slurm.push_back({FindLaunchFlag(slurm_default.flag), slurm_default.value, slurm_default.source});
  }
  for (const std::vector<Setting>* layer : {&from_slurm, &pet, &given}) {
    for (const Setting& setting : *layer) BRAID_RETURN_IF_ERROR(Apply(options, setting));
  }
  BRAID_RETURN_IF_ERROR(CheckCombinations(options));
  return options;
}

std::string LaunchHelpText() {
  std::string text =
      "usage: braidrun [flags] program [args...]\n\n"
      "Starts nproc-per-node workers on each node with torchrun's environment (RANK, LOCAL_RANK,\n"
      "WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), supervises them, restarts the group (or only the\n"
      "failed worker: --restart-policy) after a failure (--max-restarts) and reports the first\n"
      "failure. A .py program runs with python3 -u; anything else is executed directly. Every flag\n"
      "also accepts underscores (--nproc_per_node).\n\n"
      "As torchrun, a flag not on the command line takes its value from PET_<FLAG> when set\n"
      "(PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR, ...; 1 or 0 for a switch such as\n"
      "PET_STANDALONE), as a Kubeflow PyTorchJob sets them. Under srun with one task per node,\n"
      "--nnodes, --node-rank, --rdzv-id and the master address and port default to the step's\n"
      "SLURM_* values. The command line wins over PET_*, which wins over SLURM_*.\n\n";
  for (const LaunchFlag& flag : LaunchFlags()) {
    std::string names = absl::StrJoin(flag.names, ", ");
    if (flag.takes_value) absl::StrAppend(&names, " ", flag.metavar);
    absl::StrAppend(&text, "  ", names, "\n      ", flag.help, "\n");
  }
  absl::StrAppend(&text, "  -h, --help\n      This text.\n");
  return text;
}

std::vector<std::string> WorkerCommand(const LaunchOptions& options) {
  std::vector<std::string> command;
  const bool python = !options.no_python && (options.module || options.run_path ||
                                              absl::EndsWith(options.program, ".py"));
  if (python) {
    command = {"python3", "-u"};
    if (options.module) command.push_back("-m");
  }
  command.push_back(options.program);
  command.insert(command.end(), options.program_args.begin(), options.program_args.end());
  return command;
}

}  // namespace braid

