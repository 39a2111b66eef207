// The transport registry (collectives/transport/registry.h): what auto
// picks, names in any case, mpi only under mpirun (under a real mpirun:
// tests/collectives/transport/mpi), nccl only in CUDA builds, unknown names;
// and that every entry the suites use builds through it.
#include "collectives/transport/registry.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "tensor/device.h"
#include "tests/harness/scoped_env.h"

namespace braid {
namespace {

// One rank on this host.
class SoloBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline) override {
    return std::vector<std::string>{std::string(mine)};
  }
};

// What the registry reads from the environment, cleared for each test.
struct ScopedEnv : ::braid::testing::ScopedEnv {
  ScopedEnv() : ::braid::testing::ScopedEnv({"BRAID_TRANSPORT", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}) {}
};

TEST_CASE("ChooseTransport: auto, names in any case, mpi only under mpirun, unknown names", "[transport]") {
  ScopedEnv env;
  SoloBootstrap bootstrap;
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  auto choose = [&](const char* requested) { return ChooseTransport(requested, bootstrap, deadline); };
  CHECK(choose("auto").value_or("") == "shm");
  CHECK(choose("TCP").value_or("") == "tcp");
  CHECK(choose("shm").value_or("") == "shm");

  const absl::StatusOr<std::string> mpi = choose("mpi");
  CHECK(mpi.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(mpi.status().message(), "mpirun"));
  // nccl: asked for, it is the choice in --config=cuda builds; without CUDA, kUnimplemented.
  CHECK(choose("nccl").status().code() ==
        (CudaCompiledIn() ? absl::StatusCode::kOk : absl::StatusCode::kUnimplemented));
  const absl::StatusOr<std::string> bogus = choose("infiniband");
  CHECK(bogus.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(bogus.status().message(), "auto, mpi, shm, tcp"));

  SECTION("an empty request is BRAID_TRANSPORT's, auto by default") {
    CHECK(choose("").value_or("") == "shm");
    CHECK(IsAutoTransport(""));
    env.Set("BRAID_TRANSPORT", "tcp");
    CHECK(choose("").value_or("") == "tcp");
    CHECK_FALSE(IsAutoTransport(""));
    CHECK(choose("shm").value_or("") == "shm");  // the caller's choice wins
  }
  SECTION("under mpirun, auto is mpi and an explicit choice still wins") {
    env.Set("OMPI_COMM_WORLD_SIZE", "1");
    env.Set("OMPI_COMM_WORLD_RANK", "0");
    CHECK(choose("auto").value_or("") == "mpi");
    CHECK(choose("MPI").value_or("") == "mpi");
    CHECK(choose("shm").value_or("") == "shm");
  }
}

TEST_CASE("TransportRegistry: auto's order, and a group of one on every transport the host has", "[transport]") {
  ScopedEnv env;
  std::vector<std::string> names;
  for (const TransportEntry& entry : TransportRegistry()) names.push_back(entry.name);
  CHECK(names == std::vector<std::string>{"mpi", "shm", "tcp", "nccl"});
  CHECK(FindTransport("SHM") == FindTransport("shm"));
  CHECK(FindTransport("gloo") == nullptr);
  SoloBootstrap bootstrap;
  TransportSettings settings;
  settings.route = {"127.0.0.1", 29400};  // tcp advertises the address on the route toward it
  for (const char* name : {"shm", "tcp"}) {
    CAPTURE(name);
    absl::StatusOr<std::unique_ptr<Transport>> transport =
        CreateTransport(name, bootstrap, DeadlineIn(absl::Seconds(10)), settings);
    REQUIRE(transport.ok());
    CHECK(std::string((*transport)->name()) == name);
    CHECK((*transport)->size() == 1);
  }
}

}  // namespace
}  // namespace braid
