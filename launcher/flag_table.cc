#include "launcher/flag_table.h"

#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/socket.h"
#include "base/status.h"

namespace braid {
namespace {

absl::Status Bad(const std::string& flag, const std::string& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("argument ", flag, ": invalid value '", value, "': ", why));
}

absl::StatusOr<int> ParseInt(const std::string& flag, const std::string& value, int min) {
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed)) return Bad(flag, value, "not an integer");
  if (parsed < min) return Bad(flag, value, absl::StrCat("must be at least ", min));
  return parsed;
}

absl::StatusOr<absl::Duration> ParseSeconds(const std::string& flag, const std::string& value) {
  double seconds = 0;
  if (!absl::SimpleAtod(value, &seconds) || !(seconds >= 0)) {
    return Bad(flag, value, "not a non-negative number of seconds");
  }
  return absl::Seconds(seconds);
}

int CountGpus() {
  int count = 0;
  DIR* dir = opendir("/dev");
  if (dir == nullptr) return 0;
  while (dirent* entry = readdir(dir)) {
    absl::string_view name = entry->d_name;
    int index = 0;
    if (absl::ConsumePrefix(&name, "nvidia") && absl::SimpleAtoi(name, &index)) ++count;
  }
  closedir(dir);
  return count;
}

absl::Status SetNproc(LaunchOptions& o, const std::string& value) {
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (value == "cpu") {
    o.nproc_per_node = cpus;
  } else if (value == "gpu" || value == "auto") {
    const int gpus = CountGpus();
    if (gpus == 0 && value == "gpu") return Bad("--nproc-per-node", value, "this node has no GPU");
    o.nproc_per_node = gpus > 0 ? gpus : cpus;
  } else {
    BRAID_ASSIGN_OR_RETURN(o.nproc_per_node, ParseInt("--nproc-per-node", value, 1));
  }
  return absl::OkStatus();
}

absl::Status SetNnodes(LaunchOptions& o, const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(value, ':');
  if (parts.size() > 2) return Bad("--nnodes", value, "expected N or MIN:MAX");
  BRAID_ASSIGN_OR_RETURN(o.min_nodes, ParseInt("--nnodes", parts[0], 1));
  o.max_nodes = o.min_nodes;
  if (parts.size() == 2) {
    BRAID_ASSIGN_OR_RETURN(o.max_nodes, ParseInt("--nnodes", parts[1], 1));
    if (o.max_nodes < o.min_nodes) return Bad("--nnodes", value, "MAX is smaller than MIN");
  }
  return absl::OkStatus();
}

absl::StatusOr<StreamSelection> ParseStreams(const std::string& flag, const std::string& value) {
  StreamSelection selection;
  auto parse_one = [&](const std::string& text) -> absl::StatusOr<int> {
    int v = 0;
    if (!absl::SimpleAtoi(text, &v) || v < 0 || v > 3) {
      return Bad(flag, value, "expected 0 (none), 1 (stdout), 2 (stderr), 3 (both) or LOCAL_RANK:N,...");
    }
    return v;
  };
  if (!absl::StrContains(value, ':')) {
    BRAID_ASSIGN_OR_RETURN(selection.all, parse_one(value));
    return selection;
  }
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits(':', 1));
    int rank = 0;
    if (!absl::SimpleAtoi(kv.first, &rank) || rank < 0) return Bad(flag, value, "bad local rank");
    BRAID_ASSIGN_OR_RETURN(selection.per_rank[rank], parse_one(kv.second));
  }
  return selection;
}

absl::Status SetRdzvConf(LaunchOptions& o, const std::string& value) {
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string key = absl::StrReplaceAll(kv.first, {{"-", "_"}});
    const std::string flag = absl::StrCat("--rdzv-conf ", key);
    if (key == "join_timeout" || key == "timeout") {
      BRAID_ASSIGN_OR_RETURN(o.join_timeout, ParseSeconds(flag, kv.second));
    } else if (key == "last_call_timeout") {
      BRAID_ASSIGN_OR_RETURN(o.last_call_timeout, ParseSeconds(flag, kv.second));
    } else if (key == "keep_alive_interval") {
      BRAID_ASSIGN_OR_RETURN(o.keep_alive_interval, ParseSeconds(flag, kv.second));
    } else if (key == "keep_alive_max_attempt") {
      if (!absl::SimpleAtoi(kv.second, &o.keep_alive_max_attempt) || o.keep_alive_max_attempt < 1) {
        return Bad(flag, kv.second, "expected a whole number >= 1");
      }
    } else if (key == "close_timeout" || key == "read_timeout") {
      BRAID_ASSIGN_OR_RETURN(o.close_timeout, ParseSeconds(flag, kv.second));
    } else if (key == "is_host") {
      const std::string v = absl::AsciiStrToLower(kv.second);
      if (v == "1" || v == "true" || v == "yes") {
        o.is_host = 1;
      } else if (v == "0" || v == "false" || v == "no") {
        o.is_host = 0;
      } else {
        return Bad(flag, kv.second, "expected true or false");
      }
    } else {
      return Bad("--rdzv-conf", std::string(item),
                 "unknown key (known: join_timeout, last_call_timeout, keep_alive_interval, "
                 "keep_alive_max_attempt, close_timeout, read_timeout, is_host)");
    }
  }
  return absl::OkStatus();
}

// A flag whose value is stored as given.
LaunchFlag::Setter Store(std::string LaunchOptions::*field) {
  return [field](LaunchOptions& o, const std::string& v) {
    o.*field = v;
    return absl::OkStatus();
  };
}

// A flag without a value that turns `field` on.
LaunchFlag::Setter Switch(bool LaunchOptions::*field) {
  return [field](LaunchOptions& o, const std::string&) {
    o.*field = true;
    return absl::OkStatus();
  };
}

// The job's shape and its rendezvous.
std::vector<LaunchFlag> JobShapeFlags() {
  return {
    {{"--nnodes"}, true, "N|MIN:MAX",
     "Number of nodes, or the range an elastic job accepts (default 1).",
     SetNnodes},
    {{"--nproc-per-node"}, true, "N|auto|cpu|gpu",
     "Workers per node: a number, 'cpu' (one per CPU), 'gpu' (one per GPU), or 'auto' (GPUs if any, "
     "else CPUs). Default 1.",
     SetNproc},
    {{"--node-rank"}, true, "N", "This node's rank, for the static backend (default 0).",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       BRAID_ASSIGN_OR_RETURN(o.node_rank, ParseInt("--node-rank", v, 0));
       return absl::OkStatus();
     }},
    {{"--rdzv-backend"}, true, "c10d|static",
     "c10d: nodes join rounds over braid's store and get ranks in join order; static: each node "
     "gives --node-rank. Default static.",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       if (v != "c10d" && v != "static") return Bad("--rdzv-backend", v, "expected c10d or static");
       o.rdzv_backend = v;
       return absl::OkStatus();
     }},
    {{"--rdzv-endpoint"}, true, "HOST[:PORT]",
     "Where the rendezvous store listens (default port 29400). The agent on that host hosts it.",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       // The agent parses it again to host or reach the store; refused here, it never gets that far.
       if (!ParseHostPort(v, kDefaultRdzvPort).ok()) {
         return Bad("--rdzv-endpoint", v, "expected HOST[:PORT] with PORT at most 65535 ([ADDR]:PORT for IPv6)");
       }
       o.rdzv_endpoint = v;
       return absl::OkStatus();
     }},
    {{"--rdzv-id"}, true, "ID", "The job id; agents with the same id form one job (default 'none').",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       if (v.empty() || absl::StrContains(v, '/')) return Bad("--rdzv-id", v, "must be non-empty, without '/'");
       o.rdzv_id = v;
       return absl::OkStatus();
     }},
    {{"--rdzv-conf"}, true, "K=V,...",
     "Rendezvous settings in seconds: join_timeout (600; also how long the agent hosting the store "
     "keeps it up for nodes still running after its own workers finished), last_call_timeout (30), "
     "keep_alive_interval (5) and keep_alive_max_attempt (3: a node whose agent misses that many "
     "heartbeats in a row is lost; under --restart-policy=replace the survivors go on without its "
     "workers and an agent that comes back takes its place); "
     "is_host=true|false forces hosting the store or not. close_timeout and read_timeout are accepted "
     "for torchrun compatibility and have no effect.",
     SetRdzvConf},
    {{"--standalone"}, false, nullptr,
     "One node, its own store on a free port and a random job id: no endpoint needed.",
     Switch(&LaunchOptions::standalone)},
  };
}

// What happens when a worker fails.
std::vector<LaunchFlag> RestartFlags() {
  return {
    {{"--max-restarts"}, true, "N",
     "Restarts after a failure: of the whole worker group, or (--restart-policy=replace) of one worker "
     "in its slot; both count (default 0).",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       BRAID_ASSIGN_OR_RETURN(o.max_restarts, ParseInt("--max-restarts", v, 0));
       return absl::OkStatus();
     }},
    {{"--restart-policy"}, true, "all|replace",
     "What a failed worker restarts. all: every worker on every node stops and the group restarts "
     "(a new rendezvous round). replace: only the failed worker is replaced, by a new process in its "
     "slot with BRAID_JOIN_RUNNING=1, while the others keep running and shrink their group in place "
     "(runtime/elastic.h); a worker the others evicted is killed and replaced too, and when they ask "
     "for it (too few ranks left) every worker restarts as with all. Not with --mpi. Default all.",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       if (v == "all") {
         o.restart_policy = RestartPolicy::kAll;
       } else if (v == "replace") {
         o.restart_policy = RestartPolicy::kReplace;
       } else {
         return Bad("--restart-policy", v, "expected all or replace");
       }
       return absl::OkStatus();
     }},
    {{"--monitor-interval"}, true, "SECONDS",
     "How often the agent checks the other nodes for failures, and under --restart-policy=replace the "
     "workers' evict and fallback keys (default 0.1).",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       BRAID_ASSIGN_OR_RETURN(o.monitor_interval, ParseSeconds("--monitor-interval", v));
       if (o.monitor_interval <= absl::ZeroDuration()) return Bad("--monitor-interval", v, "must be positive");
       return absl::OkStatus();
     }},
  };
}

// What the workers' environment says.
std::vector<LaunchFlag> WorkerEnvFlags() {
  return {
    {{"--master-addr"}, true, "HOST", "MASTER_ADDR for the workers (default: node 0's address).",
     Store(&LaunchOptions::master_addr)},
    {{"--master-port"}, true, "PORT",
     "MASTER_PORT for the workers: where a PyTorch script's rank 0 hosts its store. Default: a free "
     "port on one node, 29500 for a static multi-node job.",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       BRAID_ASSIGN_OR_RETURN(o.master_port, ParseInt("--master-port", v, 1));
       if (o.master_port > 65535) return Bad("--master-port", v, "not a port");
       return absl::OkStatus();
     }},
    {{"--role"}, true, "NAME", "ROLE_NAME for the workers (default 'default').",
     Store(&LaunchOptions::role)},
    {{"--local-addr"}, true, "HOST",
     "This node's address as the other nodes reach it (default: the address that routes to the "
     "endpoint).",
     Store(&LaunchOptions::local_addr)},
  };
}

// Where the workers' output goes.
std::vector<LaunchFlag> OutputFlags() {
  return {
    {{"--redirects", "-r"}, true, "0|1|2|3|R:N,...",
     "Send worker stdout (1), stderr (2) or both (3) to log files only, not the console.",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       BRAID_ASSIGN_OR_RETURN(o.redirects, ParseStreams("--redirects", v));
       return absl::OkStatus();
     }},
    {{"--tee", "-t"}, true, "0|1|2|3|R:N,...",
     "Copy worker stdout (1), stderr (2) or both (3) to log files as well as the console.",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       BRAID_ASSIGN_OR_RETURN(o.tee, ParseStreams("--tee", v));
       return absl::OkStatus();
     }},
    {{"--log-dir"}, true, "DIR",
     "Log files go to DIR/<run_id>/attempt_<k>/<rank>/{stdout,stderr}.log (default: a new directory "
     "under /tmp when -r or -t asks for files).",
     Store(&LaunchOptions::log_dir)},
    {{"--local-ranks-filter"}, true, "R,...",
     "Show only these local ranks' output on the console (files still get every rank).",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       o.local_ranks_filter.clear();
       for (absl::string_view r : absl::StrSplit(v, ',', absl::SkipEmpty())) {
         BRAID_ASSIGN_OR_RETURN(int rank, ParseInt("--local-ranks-filter", std::string(r), 0));
         o.local_ranks_filter.push_back(rank);
       }
       return absl::OkStatus();
     }},
  };
}

// How the program starts and stops.
std::vector<LaunchFlag> ProgramFlags() {
  return {
    {{"--no-python"}, false, nullptr, "Execute the program directly, even a .py file.",
     Switch(&LaunchOptions::no_python)},
    {{"--run-path"}, false, nullptr, "Run the program as a Python file (python3 -u PROGRAM).",
     Switch(&LaunchOptions::run_path)},
    {{"--module", "-m"}, false, nullptr, "Run the program as a Python module (python3 -u -m PROGRAM).",
     Switch(&LaunchOptions::module)},
    {{"--mpi"}, false, nullptr,
     "Start this node's workers through Open MPI's mpirun, with the same environment (one node only).",
     Switch(&LaunchOptions::mpi)},
    {{"--signals-to-handle"}, true, "SIG,...",
     "Signals braidrun forwards to every worker, then stops the job (default "
     "SIGTERM,SIGINT,SIGHUP,SIGQUIT; add SIGUSR1 or SIGUSR2 for Slurm's --signal preemption warning). "
     "Others have their default effect on braidrun (its workers die with it).",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       absl::StatusOr<std::vector<int>> signals = ParseSignalList(v);
       if (!signals.ok()) return Bad("--signals-to-handle", v, std::string(signals.status().message()));
       o.signals_to_handle = std::move(*signals);
       return absl::OkStatus();
     }},
    {{"--shutdown-timeout"}, true, "SECONDS",
     "When braidrun stops the workers (a forwarded signal, a failure, a restart), how long they get "
     "between that signal and SIGKILL (default 5).",
     [](LaunchOptions& o, const std::string& v) -> absl::Status {
       BRAID_ASSIGN_OR_RETURN(o.shutdown_timeout, ParseSeconds("--shutdown-timeout", v));
       return absl::OkStatus();
     }},
    {{"--print-env"}, false, nullptr,
     "List every environment knob braid reads (BRAID_*, and TORCHELASTIC_RUN_ID) with its value here, or "
     "its default, and what it does; then exit.",
     Switch(&LaunchOptions::print_env)},
    {{"--start-method"}, true, "spawn|fork|forkserver",
     "Accepted for torchrun compatibility; braidrun always starts workers with fork+exec.",
     [](LaunchOptions&, const std::string& v) -> absl::Status {
       if (v != "spawn" && v != "fork" && v != "forkserver") {
         return Bad("--start-method", v, "expected spawn, fork or forkserver");
       }
       return absl::OkStatus();
     }},
  };
}

}  // namespace

const std::vector<LaunchFlag>& LaunchFlags() {
  // In --help's order.
  static const auto* flags = [] {
    auto* all = new std::vector<LaunchFlag>;
    for (auto group : {JobShapeFlags, RestartFlags, WorkerEnvFlags, OutputFlags, ProgramFlags}) {
      for (LaunchFlag& flag : group()) all->push_back(std::move(flag));
    }
    return all;
  }();
  return *flags;
}

std::string CanonicalFlagName(absl::string_view name) {
  if (!absl::StartsWith(name, "--")) return std::string(name);
  return absl::StrCat("--", absl::StrReplaceAll(name.substr(2), {{"_", "-"}}));
}

const LaunchFlag* FindLaunchFlag(const std::string& name) {
  for (const LaunchFlag& flag : LaunchFlags()) {
    for (const std::string& n : flag.names) {
      if (n == name) return &flag;
    }
  }
  return nullptr;
}


std::string PetVariable(const LaunchFlag& flag) {
  std::string dest;
  for (const std::string& name : flag.names) {
    if (name.size() > dest.size()) dest = name;  // argparse's dest: the longest spelling
  }
  return absl::StrCat("PET_", absl::AsciiStrToUpper(absl::StrReplaceAll(absl::StripPrefix(dest, "--"), {{"-", "_"}})));
}

absl::StatusOr<std::vector<int>> ParseSignalList(const std::string& text) {
  std::vector<int> signals;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    absl::string_view name = absl::StripAsciiWhitespace(item);
    absl::ConsumePrefix(&name, "SIG");
    int found = 0;
    for (int sig = 1; sig < SIGRTMIN && found == 0; ++sig) {
      const char* abbrev = sigabbrev_np(sig);
      if (abbrev != nullptr && name == abbrev) found = sig;
    }
    if (found == 0) return absl::InvalidArgumentError(absl::StrCat("unknown signal '", item, "'"));
    if (found == SIGKILL || found == SIGSTOP || found == SIGCHLD) {
      return absl::InvalidArgumentError(absl::StrCat("SIG", name, " cannot be forwarded by braidrun"));
    }
    if (std::find(signals.begin(), signals.end(), found) == signals.end()) signals.push_back(found);
  }
  return signals;
}

}  // namespace braid
