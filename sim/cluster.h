// The cluster braid_sim runs braid's Plans over: hosts of ranks, each link
// an alpha-beta link (a latency, a bandwidth), links shared by the messages
// that cross them. Read from a small TOML file (sim/clusters/ has examples):
//
//   ranks_per_host = 8            # the cluster grows by whole hosts
//   transport = "tcp"             # the selector's table rows across hosts
//   intra_latency_us = 2          # within a host: each rank's own port
//   intra_gbytes_per_s = 20       #   (shared memory, NVLink), each way
//   nics_per_host = 1             # local rank l sends through NIC l % nics
//   nic_latency_us = 5
//   nic_gbytes_per_s = 12.5       # each NIC, each way
//   nic_burst_kbytes = 0          # a shaped link (tc's tbf): this many
//   nic_peak_gbytes_per_s = 0     #   bytes pass at the peak rate when the
//                                 #   link has been idle (0: no bucket)
//   switch = "fat-tree"           # "flat" (one non-blocking switch),
//                                 # "fat-tree" (leaves of hosts_per_leaf
//                                 # hosts under a spine), "rails" (NIC i of
//                                 # every host on rail switch i; across
//                                 # rails through the spine)
//   hosts_per_leaf = 32
//   oversubscription = 2          # a leaf's (rail's) uplink: what its NICs
//                                 #   could send, divided by this
//   switch_latency_us = 0.5       # each switch crossed
//   reduce_gbytes_per_s = 10      # a rank's reduction (output bytes)
//   copy_gbytes_per_s = 10        # a rank's local copy
//   message_overhead_us = 1       # each message's fixed cost at the sender
//
// Every key is optional (the defaults above). Comments run from '#' to the
// end of the line; a key braid_sim does not know is an error, naming it.
#ifndef BRAID_SIM_CLUSTER_H_
#define BRAID_SIM_CLUSTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace braid::sim {

struct Cluster {
  enum class Switch : uint8_t { kFlat, kFatTree, kRails };

  int ranks_per_host = 8;
  std::string transport = "tcp";
  double intra_latency_s = 2e-6;
  double intra_bandwidth = 20e9;  // bytes per second
  int nics_per_host = 1;
  double nic_latency_s = 5e-6;
  double nic_bandwidth = 12.5e9;
  double nic_burst_bytes = 0;
  double nic_peak_bandwidth = 0;
  Switch fabric = Switch::kFatTree;
  int hosts_per_leaf = 32;
  double oversubscription = 1;
  double switch_latency_s = 0.5e-6;
  double reduce_bandwidth = 10e9;
  double copy_bandwidth = 10e9;
  double message_overhead_s = 1e-6;
};

absl::StatusOr<Cluster> ParseCluster(absl::string_view text);
absl::StatusOr<Cluster> ReadCluster(const std::string& path);
const char* SwitchName(Cluster::Switch fabric);

// The links of a cluster of `ranks` ranks (whole hosts of ranks_per_host;
// the last host may hold fewer), and the route of a message between two.
class Network {
 public:
  static constexpr int kMaxHops = 4;
  struct Route {
    int32_t links[kMaxHops];
    int hops = 0;
    double latency_s = 0;
  };

  Network(const Cluster& cluster, int ranks);

  int ranks() const { return ranks_; }
  int hosts() const { return hosts_; }
  int host_of(int rank) const { return rank / cluster_.ranks_per_host; }
  size_t links() const { return bandwidth_.size(); }
  double link_bandwidth(int link) const { return bandwidth_[link]; }
  // A NIC's token bucket (cluster.h's nic_burst_kbytes), 0 for other links.
  double link_burst(int link) const { return link >= nic_base_ && link < up_base_ ? cluster_.nic_burst_bytes : 0; }
  Route RouteOf(int from, int to) const;

 private:
  int NicOf(int rank) const;  // the global index of `rank`'s NIC
  // Link ids: [0, 2 ranks) each rank's intra-host port out and in; then
  // each NIC out and in; then each leaf's (rail's) uplink up and down.
  int IntraOut(int rank) const { return 2 * rank; }
  int IntraIn(int rank) const { return 2 * rank + 1; }
  int NicOut(int nic) const { return nic_base_ + 2 * nic; }
  int NicIn(int nic) const { return nic_base_ + 2 * nic + 1; }
  int Up(int group) const { return up_base_ + 2 * group; }
  int Down(int group) const { return up_base_ + 2 * group + 1; }

  const Cluster cluster_;
  const int ranks_;
  const int hosts_;
  int nic_base_ = 0;
  int up_base_ = 0;
  std::vector<double> bandwidth_;
};

}  // namespace braid::sim

#endif  // BRAID_SIM_CLUSTER_H_
