// braid over Open MPI under a real mpirun (1-4 ranks, --oversubscribe; as
// root with OMPI_ALLOW_RUN_AS_ROOT): the conformance suite over the mpi
// transport with ring, tree, rhd and native collectives against the same
// references as every other transport; mismatched collectives and a rank
// that never joins turn into clear errors; ProcessGroup under mpirun (MPI
// bootstrap, transport choice); braid_bench -a ring,tree,native with 0 wrong
// values at 2, 3 and 4 ranks; and BRAID_TRANSPORT=mpi outside mpirun.
// BRAID_TEST_MATRIX=full runs the conformance suite at 1-6 ranks.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "catch2/catch.hpp"
#include "tests/harness/mpi_env.h"
#include "tests/harness/subprocess.h"

namespace braid {
namespace {

const absl::Duration kTimeout = absl::Seconds(150);

// The contract must come from mpirun, never from the test's environment.
const std::vector<std::string> kUnset = {
    "RANK",         "WORLD_SIZE",         "LOCAL_RANK",           "LOCAL_WORLD_SIZE",     "GROUP_RANK",
    "MASTER_ADDR",  "MASTER_PORT",        "BRAID_STORE_ADDR",     "BRAID_STORE_PREFIX",   "BRAID_TRANSPORT",
    "BRAID_ALGO",   "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "BRAID_JOB_SECRET"};

bool FullMatrix() {
  const char* value = std::getenv("BRAID_TEST_MATRIX");
  return value != nullptr && std::string(value) == "full";
}

std::map<std::string, std::string> MpiEnv(std::map<std::string, std::string> extra = {}) {
  std::map<std::string, std::string> env = MpiJobEnv();
  // The full matrix runs 64 MiB all-reduces at up to 6 oversubscribed ranks.
  env["BRAID_TIMEOUT_SEC"] = FullMatrix() ? "600" : "100";
  for (auto& [key, value] : extra) env[key] = value;
  return env;
}

ProcessExit Mpirun(int n, std::vector<std::string> program, const std::string& tag,
                   std::map<std::string, std::string> extra = {}) {
  std::vector<std::string> argv = {"/usr/bin/mpirun", "--oversubscribe", "-np", absl::StrCat(n)};
  argv.insert(argv.end(), program.begin(), program.end());
  // The full matrix's conformance runs take minutes (mpi_worker's deadline).
  return RunProcess(argv, MpiEnv(std::move(extra)), tag, FullMatrix() ? absl::Minutes(31) : kTimeout, kUnset);
}

// Rank r's verdict line from mpi_worker ("rank 2: mismatch: INVALID_ARGUMENT: ...").
std::string Verdict(const std::string& out, int rank, const std::string& mode) {
  const std::string prefix = absl::StrCat("rank ", rank, ": ", mode, ": ");
  const size_t at = out.find(prefix);
  if (at == std::string::npos) return "";
  const size_t end = out.find('\n', at);
  return out.substr(at + prefix.size(), end == std::string::npos ? std::string::npos : end - at - prefix.size());
}

size_t CountOf(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

TEST_CASE("MPI: the conformance suite over the mpi transport, ring/tree/rhd/native, 1-4 ranks", "[mpi]") {
  const std::vector<int> sizes = FullMatrix() ? std::vector<int>{1, 2, 3, 4, 5, 6} : std::vector<int>{1, 2, 3, 4};
  for (int n : sizes) {
    const ProcessExit exit =
        Mpirun(n, {Runfile("tests/collectives/transport/mpi/mpi_worker"), "conformance"}, absl::StrCat("conformance_", n));
    INFO(n << " ranks: " << Dump(exit));
    CHECK(exit.code == 0);
    for (int r = 0; r < n; ++r) CHECK(Verdict(exit.out, r, "conformance") == "OK");
  }
}

TEST_CASE("MPI: subgroups by MPI_Comm_split and the hierarchical path over MPI-split levels pass the suite",
          "[mpi][subgroups]") {
  for (int n : {3, 4}) {
    const ProcessExit exit =
        Mpirun(n, {Runfile("tests/collectives/transport/mpi/mpi_worker"), "split"}, absl::StrCat("split_", n));
    INFO(n << " ranks: " << Dump(exit));
    CHECK(exit.code == 0);
    for (int r = 0; r < n; ++r) CHECK(Verdict(exit.out, r, "split") == "OK");
  }
}

TEST_CASE("MPI: ranks that disagree on the count all get a clear error (braid's ring and native)", "[mpi]") {
  for (const char* algorithm : {"ring", "native"}) {
    const ProcessExit exit =
        Mpirun(3, {Runfile("tests/collectives/transport/mpi/mpi_worker"), "mismatch", algorithm}, absl::StrCat("mismatch_", algorithm));
    INFO(algorithm << ": " << Dump(exit));
    CHECK(exit.code == 0);
    for (int r = 0; r < 3; ++r) {
      const std::string verdict = Verdict(exit.out, r, "mismatch");
      INFO("rank " << r << ": " << verdict);
      CHECK(absl::StrContains(verdict, "mismatched collective"));
      CHECK(absl::StrContains(verdict, "allreduce seq 1"));
      CHECK_FALSE(absl::StrContains(verdict, "took too long"));
    }
  }
}

TEST_CASE("MPI: a rank that never joins is kDeadlineExceeded naming the peer, the op and its seq", "[mpi]") {
  for (const char* algorithm : {"ring", "native"}) {
    const ProcessExit exit =
        Mpirun(2, {Runfile("tests/collectives/transport/mpi/mpi_worker"), "deadline", algorithm}, absl::StrCat("deadline_", algorithm));
    INFO(algorithm << ": " << Dump(exit));
    CHECK(exit.code == 0);
    const std::string verdict = Verdict(exit.out, 0, "deadline");
    CHECK(absl::StrContains(verdict, "DEADLINE_EXCEEDED"));
    CHECK(absl::StrContains(verdict, "allreduce seq 1"));
    if (std::string(algorithm) == "ring") {
      CHECK(absl::StrContains(verdict, "peer 1"));
    } else {
      CHECK(absl::StrContains(verdict, "mpi native allreduce seq 1"));
    }
    CHECK(Verdict(exit.out, 1, "deadline") == "OK");
  }
}

TEST_CASE("MPI: InitFromEnv under mpirun bootstraps over MPI and picks mpi unless BRAID_TRANSPORT says otherwise",
          "[mpi]") {
  for (const char* transport : {"", "shm", "tcp", "mpi"}) {
    std::map<std::string, std::string> extra;
    if (*transport != '\0') extra["BRAID_TRANSPORT"] = transport;
    const ProcessExit exit =
        Mpirun(3, {Runfile("tests/collectives/transport/mpi/mpi_worker"), "group"}, absl::StrCat("group_", transport), extra);
    INFO("BRAID_TRANSPORT=" << transport << ": " << Dump(exit));
    CHECK(exit.code == 0);
    const std::string expected = *transport == '\0' ? "mpi" : transport;
    for (int r = 0; r < 3; ++r) {
      CHECK(Verdict(exit.out, r, "group") == "OK");
      CHECK(absl::StrContains(exit.out, absl::StrCat("rank ", r, ": group transport ", expected, "\n")));
    }
  }
}

TEST_CASE("MPI: braid_bench -a ring,tree,native under mpirun: 0 wrong values at 2, 3 and 4 ranks", "[mpi][bench]") {
  for (int n : {2, 3, 4}) {
    const ProcessExit exit = Mpirun(n,
                                    {Runfile("bench/braid_bench"), "-c", "1", "-a", "ring,tree,native", "-b", "8",
                                     "-e", "256K", "-f", "8", "-n", "2", "-w", "1"},
                                    absl::StrCat("bench_", n));
    INFO(n << " ranks: " << Dump(exit));
    CHECK(exit.code == 0);
    CHECK(absl::StrContains(exit.out, absl::StrCat("transport mpi (asked auto), buffers on cpu, world size ", n)));
    for (const char* section : {"# Algorithm: ring", "# Algorithm: tree", "# Algorithm: native"}) {
      CHECK(absl::StrContains(exit.out, section));
    }
    CHECK(CountOf(exit.out, "# Out of bounds values : 0 OK") == 3);
    CHECK(CountOf(exit.out, "FAILED") == 0);
  }
}

TEST_CASE("MPI: BRAID_TRANSPORT=mpi outside mpirun is a clear error", "[mpi]") {
  const ProcessExit exit = RunProcess({Runfile("bench/braid_bench"), "-t", "mpi", "-e", "64", "-n", "1"},
                                      {{"RANK", "0"}, {"WORLD_SIZE", "1"}}, "outside", absl::Seconds(60), kUnset);
  INFO(Dump(exit));
  CHECK(exit.code == 1);
  CHECK(absl::StrContains(exit.err, "FAILED_PRECONDITION"));
  CHECK(absl::StrContains(exit.err, "mpirun"));
}

}  // namespace
}  // namespace braid
