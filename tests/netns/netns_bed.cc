#include "tests/netns/netns_bed.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "tests/harness/subprocess.h"

namespace braid {
namespace {

std::string Script() { return Runfile("tests/netns/netns_bed.sh"); }

// netns_bed.sh with `args`, bounded: the script bounds each ip/tc call, this
// the whole (a bed of a few hosts takes well under a second).
ProcessExit RunBed(const std::vector<std::string>& args, const std::string& tag) {
  std::vector<std::string> argv = {"/bin/bash", Script()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, {}, tag, absl::Seconds(60));
}

bool Succeeds(const std::string& command) {
  return RunProcess({"/bin/sh", "-c", command}, {}, "netns_probe", absl::Seconds(10)).code == 0;
}

}  // namespace

std::string NetnsBed::Unavailable() {
  if (geteuid() != 0) return "needs root (CAP_NET_ADMIN for ip netns and tc): the multi-host bed is not made";
  if (!Succeeds("command -v ip && command -v tc && command -v unshare && command -v timeout")) {
    return "needs iproute2 (ip, tc), unshare and timeout: the multi-host bed is not made";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<NetnsBed>> NetnsBed::Create(Options options) {
  static std::atomic<int> made{0};
  (void)RunBed({"reap"}, "netns_reap");
  const std::string name = absl::StrCat("bn", getpid(), "x", made++);
  std::unique_ptr<NetnsBed> bed(new NetnsBed(options, name));
  const ProcessExit up =
      RunBed({"up", name, absl::StrCat(options.hosts), options.rate, options.delay}, absl::StrCat("netns_up_", name));
  if (up.code != 0) {
    return absl::UnavailableError(absl::StrCat("netns_bed.sh up ", name, " failed: ", Dump(up)));
  }
  for (absl::string_view line : absl::StrSplit(up.out, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "warn: ")) bed->warnings_.emplace_back(line);
  }
  return bed;
}

NetnsBed::~NetnsBed() { (void)RunBed({"down", name_}, absl::StrCat("netns_down_", name_)); }

std::string NetnsBed::Address(int host) const { return absl::StrCat("10.78.0.", host); }
std::string NetnsBed::Namespace(int host) const { return absl::StrCat(name_, "_h", host); }
std::string NetnsBed::HostName(int host) { return absl::StrCat("host", host); }

std::vector<std::string> NetnsBed::On(int host, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"/bin/bash", Script(), "exec", name_, absl::StrCat(host)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> NetnsBed::AgentFlags(int host, int nproc_per_node, int port,
                                              const std::string& run_id) const {
  return {absl::StrCat("--nnodes=", hosts()),
          absl::StrCat("--nproc-per-node=", nproc_per_node),
          "--rdzv-backend=c10d",
          absl::StrCat("--rdzv-endpoint=", Address(1), ":", port),
          absl::StrCat("--rdzv-id=", run_id),
          absl::StrCat("--local-addr=", Address(host))};
}

absl::Status NetnsBed::Cut(int host) const {
  const ProcessExit cut = RunBed({"cut", name_, absl::StrCat(host)}, absl::StrCat("netns_cut_", name_));
  if (cut.code != 0) return absl::InternalError(absl::StrCat("cutting host ", host, ": ", Dump(cut)));
  return absl::OkStatus();
}

}  // namespace braid
