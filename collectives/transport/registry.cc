#include "collectives/transport/registry.h"

#include <unistd.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/status.h"
#ifdef BRAID_WITH_MPI
#include "collectives/transport/mpi/mpi_runtime.h"
#include "collectives/transport/mpi/mpi_transport.h"
#endif
#ifdef BRAID_WITH_CUDA
#include "collectives/transport/nccl/nccl_transport.h"
#endif

namespace braid {
namespace {

BRAID_ENV_KNOB(kTransportKnob, "BRAID_TRANSPORT", "auto",
               "Transport: auto (mpi under mpirun, else shm when every rank shares this host, else tcp), mpi, shm, "
               "tcp, or nccl (CUDA tensors on GPU LOCAL_RANK; --config=cuda builds only). Under auto, CUDA tensors "
               "go to NCCL through ProcessGroup::CommFor when every rank has its own GPU, else host-staged.");

template <typename T>
absl::StatusOr<std::unique_ptr<Transport>> Upcast(absl::StatusOr<std::unique_ptr<T>> made) {
  if (!made.ok()) return made.status();
  return std::unique_ptr<Transport>(std::move(*made));
}

absl::Status AlwaysUsable() { return absl::OkStatus(); }
absl::StatusOr<bool> AlwaysFits(Bootstrap&, Deadline) { return true; }

// mpi ------------------------------------------------------------------------
#ifdef BRAID_WITH_MPI
absl::StatusOr<bool> MpiFits(Bootstrap&, Deadline) { return UnderMpirun(); }
absl::Status MpiUsable() {
  if (UnderMpirun()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "BRAID_TRANSPORT=mpi needs a job started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE is not set): run "
      "`mpirun -np N program`, or choose auto, shm or tcp");
}
absl::StatusOr<std::unique_ptr<Transport>> MakeMpi(Bootstrap& bootstrap, Deadline deadline, const TransportSettings&) {
  return Upcast(MpiTransport::Create(bootstrap, deadline));
}
#else
// The GPU bundle (--define=braid_mpi=0) has no Open MPI to link.
absl::StatusOr<bool> MpiFits(Bootstrap&, Deadline) { return false; }
absl::Status MpiUsable() {
  return absl::UnimplementedError(
      "BRAID_TRANSPORT=mpi: this binary was built without Open MPI (--define=braid_mpi=0, the GPU bundle): use auto, "
      "shm or tcp");
}
absl::StatusOr<std::unique_ptr<Transport>> MakeMpi(Bootstrap&, Deadline, const TransportSettings&) {
  return MpiUsable();
}
#endif

// shm ------------------------------------------------------------------------
// Collective: every rank learns every host name.
absl::StatusOr<bool> ShmFits(Bootstrap& bootstrap, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> hosts, bootstrap.AllGather(HostName(), deadline));
  for (const std::string& host : hosts) {
    if (host != hosts[0]) return false;
  }
  return true;
}
absl::StatusOr<std::unique_ptr<Transport>> MakeShm(Bootstrap& bootstrap, Deadline deadline,
                                                   const TransportSettings& settings) {
  ShmTransportOptions options;
  if (settings.shm.has_value()) {
    options = *settings.shm;
  } else {
    BRAID_ASSIGN_OR_RETURN(options, ShmTransportOptionsFromEnv());
  }
  return Upcast(ShmTransport::Create(bootstrap, deadline, options));
}

// tcp ------------------------------------------------------------------------
absl::StatusOr<std::unique_ptr<Transport>> MakeTcp(Bootstrap& bootstrap, Deadline deadline,
                                                   const TransportSettings& settings) {
  TcpTransportOptions options;
  if (settings.tcp.has_value()) {
    options = *settings.tcp;
  } else {
    BRAID_ASSIGN_OR_RETURN(options, TcpTransportOptionsFromEnv(settings.route));
    options.secret = settings.secret;
    options.ranks_on_host = settings.ranks_on_host;
  }
  return Upcast(TcpTransport::Create(bootstrap, deadline, options));
}

// nccl -----------------------------------------------------------------------
absl::Status NcclUsable() {
#ifdef BRAID_WITH_CUDA
  return absl::OkStatus();
#else
  return absl::UnimplementedError(
      "BRAID_TRANSPORT=nccl: this binary was built without --config=cuda, so it has no NCCL transport (use auto, "
      "mpi, shm or tcp, or rebuild with --config=cuda)");
#endif
}
absl::StatusOr<std::unique_ptr<Transport>> MakeNccl(Bootstrap& bootstrap, Deadline deadline,
                                                    const TransportSettings& settings) {
#ifdef BRAID_WITH_CUDA
  return Upcast(NcclTransport::Create(bootstrap, settings.cuda_device, deadline));
#else
  return NcclUsable();
#endif
}

constexpr TransportEntry kRegistry[] = {
    {"mpi", MpiFits, MpiUsable, MakeMpi},
    {"shm", ShmFits, AlwaysUsable, MakeShm},
    {"tcp", AlwaysFits, AlwaysUsable, MakeTcp},
    {"nccl", nullptr, NcclUsable, MakeNccl},
};

}  // namespace

absl::Span<const TransportEntry> TransportRegistry() { return kRegistry; }

absl::StatusOr<std::unique_ptr<Bootstrap>> CreateMpiBootstrap(Deadline deadline) {
#ifdef BRAID_WITH_MPI
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<MpiBootstrap> bootstrap, MpiBootstrap::Create(deadline));
  return std::unique_ptr<Bootstrap>(std::move(bootstrap));
#else
  (void)deadline;
  return absl::UnimplementedError(
      "started by mpirun, but this binary was built without Open MPI (--define=braid_mpi=0, the GPU bundle): "
      "start it with braidrun, or set MASTER_ADDR and MASTER_PORT");
#endif
}

const TransportEntry* FindTransport(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const TransportEntry& entry : kRegistry) {
    if (lower == entry.name) return &entry;
  }
  return nullptr;
}

std::string RequestedTransport(absl::string_view requested) {
  return absl::AsciiStrToLower(requested.empty() ? kTransportKnob.String() : std::string(requested));
}

bool IsAutoTransport(absl::string_view requested) { return RequestedTransport(requested) == "auto"; }

absl::StatusOr<std::string> ChooseTransport(absl::string_view requested, Bootstrap& bootstrap, Deadline deadline) {
  const std::string name = requested.empty() ? kTransportKnob.String() : std::string(requested);
  if (!IsAutoTransport(name)) {
    const TransportEntry* entry = FindTransport(name);
    if (entry == nullptr) {
      std::string names = "auto";
      for (const TransportEntry& e : kRegistry) absl::StrAppend(&names, ", ", e.name);
      return absl::InvalidArgumentError(
          absl::StrCat("BRAID_TRANSPORT=\"", name, "\" is not one of ", names, " (nccl in --config=cuda builds)"));
    }
    BRAID_RETURN_IF_ERROR(entry->usable());
    return std::string(entry->name);
  }
  for (const TransportEntry& entry : kRegistry) {
    if (entry.fits == nullptr) continue;
    BRAID_ASSIGN_OR_RETURN(const bool fits, entry.fits(bootstrap, deadline));
    if (fits) return std::string(entry.name);
  }
  return absl::InternalError("no transport fits (tcp always should)");
}

absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(absl::string_view requested, Bootstrap& bootstrap,
                                                           Deadline deadline, const TransportSettings& settings) {
  BRAID_ASSIGN_OR_RETURN(const std::string name, ChooseTransport(requested, bootstrap, deadline));
  return FindTransport(name)->create(bootstrap, deadline, settings);
}

}  // namespace braid
