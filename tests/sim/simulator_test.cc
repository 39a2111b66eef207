// braid_sim's model against the closed forms it must reproduce, and every
// Plan it can run finishing on every rank (tests/sim/braid_sim_test.sh runs
// the command line).
#include <cmath>

#include "catch2/catch.hpp"
#include "sim/cluster.h"
#include "sim/simulator.h"

namespace braid::sim {
namespace {

// One rank per host on one switch, no per-message cost, reductions free:
// the alpha-beta model's own assumptions.
Cluster AlphaBeta(double latency_s, double bandwidth) {
  Cluster c;
  c.ranks_per_host = 1;
  c.fabric = Cluster::Switch::kFlat;
  c.nic_latency_s = latency_s;
  c.switch_latency_s = 0;
  c.nic_bandwidth = bandwidth;
  c.message_overhead_s = 0;
  c.reduce_bandwidth = 1e18;
  c.copy_bandwidth = 1e18;
  return c;
}

SimRequest AllReduce(size_t bytes, Algorithm algorithm) {
  SimRequest r;
  r.count = bytes / 4;
  r.algorithm = algorithm;
  return r;
}

TEST_CASE("the cluster file: keys, units, defaults and errors naming the line") {
  absl::StatusOr<Cluster> c = ParseCluster(
      "# a rail-optimized cluster\nranks_per_host = 8\nnics_per_host = 8 # one per GPU\n"
      "nic_gbytes_per_s = 50\nnic_latency_us = 3\nswitch = \"rails\"\ntransport = \"nccl\"\n");
  REQUIRE(c.ok());
  CHECK(c->ranks_per_host == 8);
  CHECK(c->nics_per_host == 8);
  CHECK(c->nic_bandwidth == 50e9);
  CHECK(c->nic_latency_s == Approx(3e-6));
  CHECK(c->fabric == Cluster::Switch::kRails);
  CHECK(c->transport == "nccl");
  CHECK(c->intra_bandwidth == Cluster{}.intra_bandwidth);

  absl::StatusOr<Cluster> unknown = ParseCluster("ranks_per_host = 2\nnic_speed = 10\n");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() == "cluster line 2: unknown key nic_speed");
  CHECK_FALSE(ParseCluster("switch = \"torus\"").ok());
  CHECK_FALSE(ParseCluster("nic_gbytes_per_s = 0").ok());
  CHECK_FALSE(ParseCluster("ranks_per_host = 2\nnics_per_host = 4").ok());
  CHECK_FALSE(ParseCluster("oversubscription = 0.5").ok());
  CHECK_FALSE(ParseCluster("nic_burst_kbytes = 256").ok());  // a bucket needs a peak rate above the rate
  CHECK(ParseCluster("nic_burst_kbytes = 256\nnic_peak_gbytes_per_s = 100").ok());
  CHECK_FALSE(ParseCluster("ranks_per_host").ok());
}

TEST_CASE("routes: within a host, under one leaf, across the spine, across rails") {
  Cluster c;
  c.ranks_per_host = 4;
  c.hosts_per_leaf = 2;
  c.oversubscription = 2;
  const Network fat(c, 16);  // 4 hosts, 2 leaves
  CHECK(fat.RouteOf(0, 3).hops == 2);
  CHECK(fat.link_bandwidth(fat.RouteOf(0, 3).links[0]) == c.intra_bandwidth);
  CHECK(fat.RouteOf(0, 3).latency_s == c.intra_latency_s);
  CHECK(fat.RouteOf(0, 4).hops == 2);  // host 0 to host 1: one leaf
  CHECK(fat.RouteOf(0, 4).latency_s == Approx(c.nic_latency_s + c.switch_latency_s));
  const Network::Route across = fat.RouteOf(0, 8);  // host 0 to host 2: over the spine
  CHECK(across.hops == 4);
  CHECK(across.latency_s == Approx(c.nic_latency_s + 3 * c.switch_latency_s));
  CHECK(fat.link_bandwidth(across.links[1]) == Approx(2 * c.nic_bandwidth / 2));

  c.fabric = Cluster::Switch::kRails;
  c.nics_per_host = 4;
  const Network rails(c, 16);
  CHECK(rails.RouteOf(1, 5).hops == 2);  // local rank 1 of hosts 0 and 1: rail 1
  CHECK(rails.RouteOf(1, 6).hops == 4);  // rail 1 to rail 2: the spine
  CHECK(rails.RouteOf(1, 5).links[0] != rails.RouteOf(2, 6).links[0]);  // a NIC each
}

TEST_CASE("two ranks on one host: the ring's two steps, exactly") {
  Cluster c;
  const absl::StatusOr<SimResult> r = Simulate(c, 2, AllReduce(8, Algorithm::kRing));
  REQUIRE(r.ok());
  // Each step: the sender's overhead, 4 bytes on the port, the latency;
  // the reduce-scatter step then reduces 4 bytes.
  const double step = c.message_overhead_s + 4 / c.intra_bandwidth + c.intra_latency_s;
  CHECK(r->seconds == Approx(2 * step + 4 / c.reduce_bandwidth).epsilon(1e-9));
  CHECK(r->messages == 4);
  CHECK(r->bytes_sent == 16);
}

// NCCL's alpha-beta setting: 1024 ranks, 5 us and 12.5 GB/s a link.
constexpr double kNcclAlpha = 5e-6;
constexpr double kNcclBeta = 12.5e9;
constexpr int kNcclRanks = 1024;
absl::StatusOr<SimResult> OnNcclModel(size_t bytes, Algorithm algorithm) {
  return Simulate(AlphaBeta(kNcclAlpha, kNcclBeta), kNcclRanks, AllReduce(bytes, algorithm));
}

TEST_CASE("the ring at 1024 ranks is the alpha-beta model NCCL tunes with") {
  const double alpha = kNcclAlpha;
  const double beta = kNcclBeta;
  const int n = kNcclRanks;
  const size_t bytes = size_t{256} << 20;  // a 256 KiB chunk per rank: one segment, one lane
  const absl::StatusOr<SimResult> r = OnNcclModel(bytes, Algorithm::kRing);
  REQUIRE(r.ok());
  const double model = 2 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / beta;
  CHECK(r->seconds == Approx(model).epsilon(0.001));
  CHECK(r->messages == uint64_t{2} * n * (n - 1));
}

TEST_CASE("the double binary tree at 1024 ranks is NCCL's tree model: log latency, the ring's bandwidth") {
  const size_t bytes = size_t{256} << 20;
  const absl::StatusOr<SimResult> twin = OnNcclModel(bytes, Algorithm::kDoubleTree);
  REQUIRE(twin.ok());
  // NCCL's alpha-beta form for its double binary tree: the trees' depth in
  // latencies up and down, and about twice the vector each way through
  // every rank's NIC (inner in one tree, a leaf in the other). The pipeline
  // fills and drains one segment a level.
  const double model = 2 * std::log2(kNcclRanks) * kNcclAlpha + 2.0 * bytes / kNcclBeta;
  CHECK(twin->seconds >= model * 0.999);
  CHECK(twin->seconds <= model * 1.05);
  // One tree: an inner rank moves three vectors each way, not two.
  const absl::StatusOr<SimResult> one = OnNcclModel(bytes, Algorithm::kTree);
  REQUIRE(one.ok());
  CHECK(one->seconds >= 1.4 * twin->seconds);
  // At 8 bytes: latencies of the depth, against the ring's 2 (n - 1).
  const absl::StatusOr<SimResult> small = OnNcclModel(8, Algorithm::kDoubleTree);
  REQUIRE(small.ok());
  CHECK(small->seconds <= 2 * (std::log2(kNcclRanks) + 1) * kNcclAlpha * 1.01);
}

TEST_CASE("a shaped link's token bucket: a burst at the peak rate, then the rate") {
  const double alpha = 10e-6;
  const double rate = 1e9;
  Cluster c = AlphaBeta(alpha, rate);
  c.nic_burst_bytes = 512 << 10;
  c.nic_peak_bandwidth = 10 * rate;
  // Two ranks, 512 KiB: each sends 256 KiB twice, the bucket covering both.
  const absl::StatusOr<SimResult> fits = Simulate(c, 2, AllReduce(512 << 10, Algorithm::kRing));
  REQUIRE(fits.ok());
  CHECK(fits->seconds == Approx(2 * (alpha + (256 << 10) / (10 * rate))).epsilon(1e-6));
  // 2 MiB: the first 512 KiB at the peak, the rest at the rate.
  const absl::StatusOr<SimResult> over = Simulate(c, 2, AllReduce(2 << 20, Algorithm::kRing));
  const absl::StatusOr<SimResult> plain = Simulate(AlphaBeta(alpha, rate), 2, AllReduce(2 << 20, Algorithm::kRing));
  REQUIRE(over.ok());
  REQUIRE(plain.ok());
  CHECK(over->seconds < plain->seconds);
  CHECK(over->seconds > plain->seconds - (512 << 10) / rate);
}

TEST_CASE("recursive halving-doubling: log2 n steps each way, halving the bytes") {
  const double alpha = 2e-6;
  const double beta = 10e9;
  const int n = 64;
  const size_t bytes = size_t{64} << 20;
  const absl::StatusOr<SimResult> r = Simulate(AlphaBeta(alpha, beta), n, AllReduce(bytes, Algorithm::kRhd));
  REQUIRE(r.ok());
  // Segments pipeline within a step but a step ends before the next: at
  // least the model's 2 log2(n) alpha + 2 (n-1)/n bytes/beta.
  const double model = 2 * 6 * alpha + 2.0 * (n - 1) / n * bytes / beta;
  CHECK(r->seconds >= model * 0.999);
  CHECK(r->seconds <= model * 1.10);
}

TEST_CASE("a NIC shared by a host's ranks carries their traffic one after another") {
  Cluster c;
  c.ranks_per_host = 4;
  c.fabric = Cluster::Switch::kFlat;
  SimRequest request = AllReduce(size_t{64} << 20, Algorithm::kHierarchical);
  c.nics_per_host = 1;
  const absl::StatusOr<SimResult> one = Simulate(c, 8, request);
  c.nics_per_host = 4;
  const absl::StatusOr<SimResult> four = Simulate(c, 8, request);
  REQUIRE(one.ok());
  REQUIRE(four.ok());
  // The inter-host step moves 4 slices of 16 MiB through one NIC, or one
  // through each of four: the difference is three slices' ring traffic.
  const double slice_traffic = 2 * 0.5 * (16 << 20) / c.nic_bandwidth;
  CHECK(one->seconds - four->seconds == Approx(3 * slice_traffic).epsilon(0.1));
  CHECK(one->messages == four->messages);
}

TEST_CASE("every algorithm's plans finish on every rank, for each collective it has") {
  Cluster c;
  c.ranks_per_host = 4;
  c.hosts_per_leaf = 2;
  struct Case {
    CollectiveKind kind;
    Algorithm algorithm;
  };
  const Case cases[] = {
      {CollectiveKind::kAllReduce, Algorithm::kRing},         {CollectiveKind::kAllReduce, Algorithm::kTree},
      {CollectiveKind::kAllReduce, Algorithm::kRhd},          {CollectiveKind::kAllReduce, Algorithm::kOneShot},
      {CollectiveKind::kAllReduce, Algorithm::kHierarchical}, {CollectiveKind::kReduceScatter, Algorithm::kRing},
      {CollectiveKind::kAllGather, Algorithm::kRing},         {CollectiveKind::kReduceScatter, Algorithm::kHierarchical},
      {CollectiveKind::kAllGather, Algorithm::kHierarchical}, {CollectiveKind::kBroadcast, Algorithm::kChain},
      {CollectiveKind::kBroadcast, Algorithm::kHierarchical}, {CollectiveKind::kReduce, Algorithm::kChain},
      {CollectiveKind::kAllToAll, Algorithm::kPairwise},      {CollectiveKind::kBarrier, Algorithm::kDissemination},
      {CollectiveKind::kAllReduce, Algorithm::kAuto},         {CollectiveKind::kAllReduce, Algorithm::kDoubleTree},
  };
  for (int ranks : {2, 7, 12, 32}) {
    for (const Case& k : cases) {
      for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
        SimRequest request;
        request.kind = k.kind;
        request.algorithm = k.algorithm;
        request.count = count;
        request.root = ranks - 1;
        const bool uneven = ranks % c.ranks_per_host != 0;
        const bool needs_even = k.kind == CollectiveKind::kReduceScatter || k.kind == CollectiveKind::kAllGather;
        if (k.algorithm == Algorithm::kHierarchical && uneven && needs_even) continue;
        INFO(CollectiveKindName(k.kind) << " " << AlgorithmName(k.algorithm) << " at " << ranks << " ranks, count "
                                        << count);
        const absl::StatusOr<SimResult> r = Simulate(c, ranks, request);
        INFO(r.status().ToString());
        REQUIRE(r.ok());
        CHECK(r->seconds > 0);
        CHECK(r->messages > 0);
      }
    }
  }
}

TEST_CASE("what is not simulated is refused, naming it") {
  Cluster c;
  SimRequest request = AllReduce(1 << 20, Algorithm::kWindow);
  const absl::StatusOr<SimResult> r = Simulate(c, 4, request);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_FALSE(Simulate(c, 0, AllReduce(8, Algorithm::kRing)).ok());
}

}  // namespace
}  // namespace braid::sim
