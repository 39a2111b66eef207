// The transport registry: every transport braid has, in the order `auto`
// considers them (mpi under mpirun, shm when every rank shares this host,
// tcp; nccl only when asked for), each with when it fits, whether it can be
// had in this build and process, and how to build it; and the bootstrap an
// engine brings (MPI's, under mpirun). The one place that builds transports
// and engine bootstraps: the process group and the test suites go through it.
// Each transport's own knobs are declared in its own file
// (ShmTransportOptionsFromEnv, TcpTransportOptionsFromEnv, SpinFromEnv).
#ifndef BRAID_COLLECTIVES_TRANSPORT_REGISTRY_H_
#define BRAID_COLLECTIVES_TRANSPORT_REGISTRY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "base/auth.h"
#include "base/deadline.h"
#include "base/socket.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/tcp_transport.h"
#include "collectives/transport/transport.h"

namespace braid {

// What the transports need from the worker, and the tests' overrides.
struct TransportSettings {
  JobSecret secret;       // tcp: every connection's handshake
  int ranks_on_host = 0;  // tcp: LOCAL_WORLD_SIZE (0: unknown)
  // tcp: without BRAID_TCP_ADDR, ranks reach this one at its address on the
  // route toward here (the store's address).
  HostPort route{"127.0.0.1", 0};
  int cuda_device = 0;  // nccl: the GPU (LOCAL_RANK)
  // When set, used as they are instead of the environment's knobs.
  absl::optional<ShmTransportOptions> shm;
  absl::optional<TcpTransportOptions> tcp;
};

struct TransportEntry {
  const char* name;
  // Under auto: whether it fits this group (shm asks every rank: collective
  // over `bootstrap`). Null: auto never picks it (an nccl communicator takes
  // only CUDA tensors; ProcessGroup::CommFor adds one for them).
  absl::StatusOr<bool> (*fits)(Bootstrap& bootstrap, Deadline deadline);
  // OK when it can be had here; otherwise why not (mpi outside mpirun:
  // kFailedPrecondition; nccl without --config=cuda: kUnimplemented).
  absl::Status (*usable)();
  // Collective over `bootstrap`: every rank calls it.
  absl::StatusOr<std::unique_ptr<Transport>> (*create)(Bootstrap& bootstrap, Deadline deadline,
                                                       const TransportSettings& settings);
};

// Every entry, in auto's order.
absl::Span<const TransportEntry> TransportRegistry();

// The entry named `name` (any case), or nullptr.
const TransportEntry* FindTransport(absl::string_view name);

// The transport a group uses for `requested` (any case; empty: BRAID_TRANSPORT,
// default auto): auto is the first entry that fits (collective: every rank
// calls it); a name must be usable here. An unknown name is
// kInvalidArgument listing the names.
absl::StatusOr<std::string> ChooseTransport(absl::string_view requested, Bootstrap& bootstrap, Deadline deadline);

// Whether `requested` (as ChooseTransport takes it) leaves the choice to auto.
bool IsAutoTransport(absl::string_view requested);
// The transport asked for: `requested`, else BRAID_TRANSPORT; lower case.
std::string RequestedTransport(absl::string_view requested);

// The group of mpirun's processes as a Bootstrap (MPI_COMM_WORLD): how ranks
// meet under mpirun without a launcher's store. kUnimplemented in a build
// without Open MPI (--define=braid_mpi=0, the GPU bundle).
absl::StatusOr<std::unique_ptr<Bootstrap>> CreateMpiBootstrap(Deadline deadline);

// ChooseTransport, then that entry's create.
absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(absl::string_view requested, Bootstrap& bootstrap,
                                                           Deadline deadline, const TransportSettings& settings);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_REGISTRY_H_
