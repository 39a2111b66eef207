// NetnsBed: several "hosts" on this one machine, for tests that need a real
// network between ranks: H network namespaces, each with its own address
// (10.78.0.N), joined through a bridge in a switch namespace, each host's
// link shaped with tc (tbf for the rate, netem for the delay, where this
// kernel has them: what it lacks is reported in warnings(), never an error).
// A program started through On(N, ...) runs in host N's namespace under its
// own host name "hostN" (a UTS namespace), so braid's gethostname()
// comparisons (the shm transport's "same host" test, the topology) see N
// different hosts; /dev/shm stays shared, as on one host.
//
// tests/netns/netns_bed.sh is the one definition of the bed (tools/netns_bench.sh
// builds the same); this class runs it, bounded in time, and removes the bed
// on destruction. Names carry the test's pid (bn<pid>x<k>_...), and Create
// first removes beds left by processes that are gone (a SIGKILLed test).
//
//   if (std::string why = NetnsBed::Unavailable(); !why.empty()) { WARN(why); return; }
//   absl::StatusOr<std::unique_ptr<NetnsBed>> bed = NetnsBed::Create({.hosts = 3});
//   REQUIRE(bed.ok());
//   pid_t agent = Spawn((*bed)->On(2, {Runfile("launcher/braidrun"), ...}), env, "agent2");
//
// Not thread-safe; one test thread owns a bed.
#ifndef BRAID_TESTS_NETNS_NETNS_BED_H_
#define BRAID_TESTS_NETNS_NETNS_BED_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace braid {

class NetnsBed {
 public:
  struct Options {
    int hosts = 2;
    // tc's units; rate "none" leaves the links unshaped.
    std::string rate = "1gbit";
    std::string delay = "100us";
  };

  // Empty when beds can be made here; else why not (not root, no iproute2
  // or unshare): the test WARNs that and passes nothing else.
  static std::string Unavailable();
  // Builds the bed (blocks, at most ~30 s); an error says which step failed.
  static absl::StatusOr<std::unique_ptr<NetnsBed>> Create(Options options);
  // Removes every namespace of the bed (and with them the links).
  ~NetnsBed();
  NetnsBed(const NetnsBed&) = delete;
  NetnsBed& operator=(const NetnsBed&) = delete;

  int hosts() const { return options_.hosts; }
  // Host N (1-based)'s address, namespace and host name.
  std::string Address(int host) const;
  std::string Namespace(int host) const;
  static std::string HostName(int host);
  // What the shaping left out on this kernel ("no netem qdisc ...").
  const std::vector<std::string>& warnings() const { return warnings_; }

  // argv that runs `argv` on host N; its pid is the program's own (every
  // step execs), so Spawn's pid can be waited on and killed.
  std::vector<std::string> On(int host, const std::vector<std::string>& argv) const;
  // braidrun's flags for host N's agent of a c10d job of hosts() nodes whose
  // store is on host 1's `port` (a fresh namespace: any port is free).
  std::vector<std::string> AgentFlags(int host, int nproc_per_node, int port, const std::string& run_id) const;
  // Takes host N's link down: no FIN, no RST; only deadlines can notice.
  absl::Status Cut(int host) const;

 private:
  NetnsBed(Options options, std::string name) : options_(std::move(options)), name_(std::move(name)) {}

  Options options_;
  std::string name_;
  std::vector<std::string> warnings_;
};

}  // namespace braid

#endif  // BRAID_TESTS_NETNS_NETNS_BED_H_
