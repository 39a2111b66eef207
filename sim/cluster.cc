#include "sim/cluster.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace braid::sim {
namespace {

absl::Status LineError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("cluster line ", line, ": ", what));
}

absl::StatusOr<double> Positive(int line, absl::string_view key, absl::string_view value) {
  double number = 0;
  if (!absl::SimpleAtod(value, &number) || !(number >= 0)) {
    return LineError(line, absl::StrCat(key, " = ", value, ": not a number >= 0"));
  }
  return number;
}

absl::StatusOr<int> Count(int line, absl::string_view key, absl::string_view value) {
  int number = 0;
  if (!absl::SimpleAtoi(value, &number) || number < 1) {
    return LineError(line, absl::StrCat(key, " = ", value, ": not a whole number >= 1"));
  }
  return number;
}

absl::StatusOr<std::string> Quoted(int line, absl::string_view key, absl::string_view value) {
  if (value.size() < 2 || value.front() != '"' || value.back() != '"') {
    return LineError(line, absl::StrCat(key, " = ", value, ": not a quoted string"));
  }
  return std::string(value.substr(1, value.size() - 2));
}

absl::Status Set(Cluster& c, int line, absl::string_view key, absl::string_view value) {
  auto seconds = [&](double& field) -> absl::Status {
    absl::StatusOr<double> us = Positive(line, key, value);
    if (us.ok()) field = *us * 1e-6;
    return us.status();
  };
  auto bandwidth = [&](double& field) -> absl::Status {
    absl::StatusOr<double> gb = Positive(line, key, value);
    if (gb.ok() && *gb == 0) return LineError(line, absl::StrCat(key, " must be above 0"));
    if (gb.ok()) field = *gb * 1e9;
    return gb.status();
  };
  auto count = [&](int& field) -> absl::Status {
    absl::StatusOr<int> n = Count(line, key, value);
    if (n.ok()) field = *n;
    return n.status();
  };
  if (key == "ranks_per_host") return count(c.ranks_per_host);
  if (key == "nics_per_host") return count(c.nics_per_host);
  if (key == "hosts_per_leaf") return count(c.hosts_per_leaf);
  if (key == "intra_latency_us") return seconds(c.intra_latency_s);
  if (key == "nic_latency_us") return seconds(c.nic_latency_s);
  if (key == "switch_latency_us") return seconds(c.switch_latency_s);
  if (key == "message_overhead_us") return seconds(c.message_overhead_s);
  if (key == "intra_gbytes_per_s") return bandwidth(c.intra_bandwidth);
  if (key == "nic_gbytes_per_s") return bandwidth(c.nic_bandwidth);
  if (key == "nic_peak_gbytes_per_s") return bandwidth(c.nic_peak_bandwidth);
  if (key == "nic_burst_kbytes") {
    absl::StatusOr<double> kb = Positive(line, key, value);
    if (kb.ok()) c.nic_burst_bytes = *kb * 1024;
    return kb.status();
  }
  if (key == "reduce_gbytes_per_s") return bandwidth(c.reduce_bandwidth);
  if (key == "copy_gbytes_per_s") return bandwidth(c.copy_bandwidth);
  if (key == "oversubscription") {
    absl::StatusOr<double> ratio = Positive(line, key, value);
    if (ratio.ok() && *ratio < 1) return LineError(line, "oversubscription below 1");
    if (ratio.ok()) c.oversubscription = *ratio;
    return ratio.status();
  }
  if (key == "transport") {
    absl::StatusOr<std::string> name = Quoted(line, key, value);
    if (name.ok()) c.transport = *name;
    return name.status();
  }
  if (key == "switch") {
    absl::StatusOr<std::string> name = Quoted(line, key, value);
    if (!name.ok()) return name.status();
    for (Cluster::Switch s : {Cluster::Switch::kFlat, Cluster::Switch::kFatTree, Cluster::Switch::kRails}) {
      if (*name == SwitchName(s)) {
        c.fabric = s;
        return absl::OkStatus();
      }
    }
    return LineError(line, absl::StrCat("switch \"", *name, "\": not flat, fat-tree or rails"));
  }
  return LineError(line, absl::StrCat("unknown key ", key));
}

}  // namespace

const char* SwitchName(Cluster::Switch fabric) {
  switch (fabric) {
    case Cluster::Switch::kFlat: return "flat";
    case Cluster::Switch::kFatTree: return "fat-tree";
    case Cluster::Switch::kRails: return "rails";
  }
  return "?";
}

absl::StatusOr<Cluster> ParseCluster(absl::string_view text) {
  Cluster cluster;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) return LineError(number, absl::StrCat("\"", line, "\" is not key = value"));
    const absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, equals));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(equals + 1));
    if (absl::Status status = Set(cluster, number, key, value); !status.ok()) return status;
  }
  if (cluster.nic_burst_bytes > 0 && cluster.nic_peak_bandwidth <= cluster.nic_bandwidth) {
    return absl::InvalidArgumentError("cluster: nic_burst_kbytes needs nic_peak_gbytes_per_s above nic_gbytes_per_s");
  }
  if (cluster.nics_per_host > cluster.ranks_per_host) {
    return absl::InvalidArgumentError(absl::StrCat("cluster: nics_per_host ", cluster.nics_per_host,
                                                   " is more than ranks_per_host ", cluster.ranks_per_host));
  }
  return cluster;
}

absl::StatusOr<Cluster> ReadCluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the cluster file ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<Cluster> cluster = ParseCluster(text.str());
  if (!cluster.ok()) return absl::Status(cluster.status().code(), absl::StrCat(path, ": ", cluster.status().message()));
  return cluster;
}

Network::Network(const Cluster& cluster, int ranks)
    : cluster_(cluster), ranks_(ranks), hosts_((ranks + cluster.ranks_per_host - 1) / cluster.ranks_per_host) {
  const int nics = hosts_ * cluster_.nics_per_host;
  nic_base_ = 2 * ranks_;
  up_base_ = nic_base_ + 2 * nics;
  int groups = 0;
  double uplink = 0;
  if (cluster_.fabric == Cluster::Switch::kFatTree) {
    groups = (hosts_ + cluster_.hosts_per_leaf - 1) / cluster_.hosts_per_leaf;
    uplink = cluster_.hosts_per_leaf * cluster_.nics_per_host * cluster_.nic_bandwidth / cluster_.oversubscription;
  } else if (cluster_.fabric == Cluster::Switch::kRails) {
    groups = cluster_.nics_per_host;
    uplink = hosts_ * cluster_.nic_bandwidth / cluster_.oversubscription;
  }
  bandwidth_.assign(up_base_ + 2 * groups, 0);
  std::fill(bandwidth_.begin(), bandwidth_.begin() + nic_base_, cluster_.intra_bandwidth);
  std::fill(bandwidth_.begin() + nic_base_, bandwidth_.begin() + up_base_, cluster_.nic_bandwidth);
  std::fill(bandwidth_.begin() + up_base_, bandwidth_.end(), uplink);
}

int Network::NicOf(int rank) const {
  return host_of(rank) * cluster_.nics_per_host + (rank % cluster_.ranks_per_host) % cluster_.nics_per_host;
}

Network::Route Network::RouteOf(int from, int to) const {
  Route route;
  auto add = [&](int link) { route.links[route.hops++] = link; };
  if (host_of(from) == host_of(to)) {
    add(IntraOut(from));
    add(IntraIn(to));
    route.latency_s = cluster_.intra_latency_s;
    return route;
  }
  const int from_nic = NicOf(from);
  const int to_nic = NicOf(to);
  add(NicOut(from_nic));
  int from_group = 0;
  int to_group = 0;
  if (cluster_.fabric == Cluster::Switch::kFatTree) {
    from_group = host_of(from) / cluster_.hosts_per_leaf;
    to_group = host_of(to) / cluster_.hosts_per_leaf;
  } else if (cluster_.fabric == Cluster::Switch::kRails) {
    from_group = from_nic % cluster_.nics_per_host;
    to_group = to_nic % cluster_.nics_per_host;
  }
  int switches = 1;
  if (from_group != to_group) {
    add(Up(from_group));
    add(Down(to_group));
    switches = 3;
  }
  add(NicIn(to_nic));
  route.latency_s = cluster_.nic_latency_s + switches * cluster_.switch_latency_s;
  return route;
}

}  // namespace braid::sim
