#include "runtime/process_group.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/auth.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/socket.h"
#include "base/status.h"
#include "collectives/transport/registry.h"
#include "runtime/store_bootstrap.h"

namespace braid {
namespace {

constexpr char kDoneKey[] = "bootstrap/done";
// Counts the ranks done with the CUDA communicator's bootstrap keys (CommFor).
constexpr char kDeviceDoneKey[] = "bootstrap/cuda_done";

// Why rank 0's store port may be taken, for the error.
const char* StorePortHint(const WorkerEnv& env) {
  return env.agent_holds_master_port
             ? " (MASTER_PORT + 1, as torchrun's agent holds MASTER_PORT; is another job using it?)"
             : " (MASTER_PORT; is another job or a PyTorch store using it?)";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Create(const WorkerEnv& env, ProcessGroupOptions options) {
  std::unique_ptr<ProcessGroup> group(new ProcessGroup());
  group->env_ = env;
  SetLogRank(env.rank);
  BRAID_RETURN_IF_ERROR(Annotate(group->SetUp(std::move(options)), absl::StrCat("rank ", env.rank, ": process group")));
  return group;
}

absl::Status ProcessGroup::HostStore(const JobSecret& secret, absl::string_view hint) {
  StoreServerOptions server_options;
  server_options.secret = secret;
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start("", env_.StorePort(), server_options);
  if (!server.ok()) {
    return Annotate(server.status(), absl::StrCat("hosting the store on port ", env_.StorePort(), hint));
  }
  server_ = std::move(*server);
  return absl::OkStatus();
}

absl::Status ProcessGroup::SetUp(ProcessGroupOptions options) {
  BRAID_ASSIGN_OR_RETURN(timeout_, ResolveTimeout(options.timeout));
  const Deadline deadline = DeadlineIn(timeout_);

  // The store: the launcher's, or one rank 0 hosts; with the job's secret
  // (BRAID_JOB_SECRET, which braidrun sets), only the job's processes get in.
  BRAID_ASSIGN_OR_RETURN(const JobSecret secret, JobSecret::FromEnv());
  HostPort store_address;
  // Under mpirun without a launcher's store, MPI bootstraps the group (no
  // MASTER_ADDR/MASTER_PORT needed); rank 0 still hosts a store, on
  // MASTER_PORT if set, else any port, for the callers' own keys, and tells
  // the others where it is over MPI.
  std::unique_ptr<Bootstrap> mpi_bootstrap;
  std::shared_ptr<Store> base = options.store;
  if (base != nullptr) {
    store_address = HostPort{env_.master_addr.empty() ? "127.0.0.1" : env_.master_addr, env_.master_port};
  } else if (env_.under_mpirun && env_.store_addr.empty()) {
    BRAID_ASSIGN_OR_RETURN(mpi_bootstrap, CreateMpiBootstrap(deadline));
    if (mpi_bootstrap->rank() != env_.rank || mpi_bootstrap->size() != env_.world_size) {
      return absl::InvalidArgumentError(absl::StrCat("mpirun's environment says rank ", env_.rank, " of ",
                                                     env_.world_size, ", MPI says rank ", mpi_bootstrap->rank(),
                                                     " of ", mpi_bootstrap->size()));
    }
    std::string mine = HostName();
    if (env_.rank == 0) {
      BRAID_RETURN_IF_ERROR(HostStore(secret, ""));
      absl::StrAppend(&mine, " ", server_->port());
    }
    BRAID_ASSIGN_OR_RETURN(std::vector<std::string> published, mpi_bootstrap->AllGather(mine, deadline));
    const std::vector<std::string> host_port = absl::StrSplit(published[0], ' ');
    int port = 0;
    if (host_port.size() != 2 || !absl::SimpleAtoi(host_port[1], &port)) {
      return absl::InternalError(absl::StrCat("rank 0 published \"", published[0], "\" as its store"));
    }
    // On rank 0's host: loopback; elsewhere its host name.
    store_address = HostPort{host_port[0] == HostName() ? "127.0.0.1" : host_port[0], static_cast<uint16_t>(port)};
  } else if (!env_.store_addr.empty()) {
    BRAID_ASSIGN_OR_RETURN(store_address, ParseHostPort(env_.store_addr, 0));
  } else {
    store_address = HostPort{env_.master_addr.empty() ? "127.0.0.1" : env_.master_addr, env_.StorePort()};
    if (env_.rank == 0) {
      BRAID_RETURN_IF_ERROR(HostStore(secret, StorePortHint(env_)));
      store_address.port = server_->port();
    }
  }
  if (base == nullptr) {
    absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::Connect(store_address, deadline, secret);
    if (!client.ok()) {
      return Annotate(client.status(), absl::StrCat("connecting to the store at ", ToString(store_address)));
    }
    base = std::move(*client);
  }
  store_ = env_.store_prefix.empty() ? base : std::make_shared<PrefixStore>(env_.store_prefix, base);
  StoreBootstrap store_bootstrap(*store_, env_.rank, env_.world_size, options.called_off);
  Bootstrap& bootstrap = mpi_bootstrap ? static_cast<Bootstrap&>(*mpi_bootstrap) : store_bootstrap;

  TransportSettings settings;
  settings.secret = secret;
  settings.ranks_on_host = env_.local_world_size;
  settings.route = store_address;
  settings.cuda_device = env_.local_rank;  // one GPU per local rank, as torchrun's LOCAL_RANK convention
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Transport> link,
                         CreateTransport(options.transport, bootstrap, deadline, settings));
  options.communicator.timeout = timeout_;
  auto_transport_ = IsAutoTransport(options.transport);
  // Subgroups (and hierarchical collectives' levels) over the same
  // transports: shared memory for ranks of one host when the choice was
  // auto's, else the group's own. mpi and nccl split natively instead.
  options.communicator.subgroup_transport = [settings, forced = auto_transport_ ? std::string() : std::string(link->name())](
                                                Bootstrap& bootstrap, Deadline deadline, bool same_host) {
    const std::string name = !forced.empty() ? forced : same_host ? "shm" : "tcp";
    return FindTransport(name)->create(bootstrap, deadline, settings);
  };
  comm_options_ = options.communicator;
  BRAID_ASSIGN_OR_RETURN(comm_, Communicator::Create(std::move(link), options.communicator));
  // Everyone has read every bootstrap key: rank 0 may take the store down.
  BRAID_RETURN_IF_ERROR(store_->Add(kDoneKey, 1).status());
  BRAID_LOG(INFO) << "process group up: " << env_.world_size << " ranks over " << comm_->transport_name();
  return absl::OkStatus();
}

absl::StatusOr<Communicator*> ProcessGroup::CommFor(Device device) {
  if (device.is_cpu() || !auto_transport_ || !CudaCompiledIn()) return comm_.get();
  MutexLock lock(&device_mu_);
  if (!device_decided_) {
    BRAID_RETURN_IF_ERROR(Annotate(CreateDeviceComm(device),
                                   absl::StrCat("rank ", env_.rank, ": setting up the communicator for ",
                                                ToString(device), " tensors")));
    device_decided_ = true;
  }
  if (!device_comm_) return comm_.get();  // host staging
  if (device != device_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", env_.rank, ": a ", ToString(device), " tensor, but this rank's NCCL communicator is on ",
        ToString(device_), " (created by its first CUDA collective): use one GPU per process, as torch's NCCL "
        "backend does"));
  }
  return device_comm_.get();
}

bool ProcessGroup::has_device_comm() {
  MutexLock lock(&device_mu_);
  return device_comm_ != nullptr;
}

absl::Status ProcessGroup::CreateDeviceComm(Device device) {
#ifdef BRAID_WITH_CUDA
  const Deadline deadline = DeadlineIn(timeout_);
  // Fresh keys: the set-up bootstrap's rounds live at the root of the store.
  PrefixStore keys("cuda_bootstrap/", store_);
  StoreBootstrap bootstrap(keys, env_.rank, env_.world_size);
  device_bootstrapped_ = true;
  auto done = [this]() { return store_->Add(kDeviceDoneKey, 1).status(); };
  auto fall_back = [&](const std::string& why) {
    BRAID_LOG(WARNING) << "CUDA tensors go through host memory over " << comm_->transport_name()
                       << ", not NCCL: " << why;
    return done();
  };
  // Each rank's GPU, by PCI bus id and host: NCCL refuses two ranks on one
  // GPU, so that case falls back before NCCL is even asked.
  absl::StatusOr<std::string> bus_id = CudaDeviceBusId(device.index);
  const std::string mine =
      bus_id.ok() ? absl::StrCat("ok ", HostName(), " ", *bus_id) : absl::StrCat("no ", bus_id.status().message());
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> gpus, bootstrap.AllGather(mine, deadline));
  for (size_t r = 0; r < gpus.size(); ++r) {
    if (!absl::StartsWith(gpus[r], "ok ")) return fall_back(absl::StrCat("rank ", r, ": ", gpus[r].substr(3)));
    for (size_t q = 0; q < r; ++q) {
      if (gpus[q] == gpus[r]) {
        return fall_back(absl::StrCat("ranks ", q, " and ", r, " share GPU ", gpus[r].substr(3),
                                      " (NCCL needs one GPU per rank)"));
      }
    }
  }
  TransportSettings settings;
  settings.cuda_device = device.index;
  absl::StatusOr<std::unique_ptr<Transport>> nccl = FindTransport("nccl")->create(bootstrap, deadline, settings);
  // Every rank learns whether every rank got NCCL: all use it, or none.
  BRAID_ASSIGN_OR_RETURN(
      std::vector<std::string> results,
      bootstrap.AllGather(nccl.ok() ? std::string("ok") : absl::StrCat("no ", nccl.status().message()), deadline));
  for (size_t r = 0; r < results.size(); ++r) {
    if (results[r] != "ok") return fall_back(absl::StrCat("NCCL init failed on rank ", r, ": ", results[r].substr(3)));
  }
  BRAID_ASSIGN_OR_RETURN(device_comm_, Communicator::Create(*std::move(nccl), comm_options_));
  device_ = device;
  BRAID_LOG(INFO) << "CUDA tensors go to NCCL on " << ToString(device);
  return done();
#else
  return absl::OkStatus();  // unreachable: CommFor hands out comm_ without CUDA
#endif
}

ProcessGroup::~ProcessGroup() {
  // Only a group that came up has ranks that may still read the store.
  const bool came_up = comm_ != nullptr;
  bool device_bootstrapped = false;
  {
    MutexLock lock(&device_mu_);
    device_comm_.reset();
    device_bootstrapped = device_bootstrapped_;
  }
  comm_.reset();
  if (server_ && store_ && came_up) {
    const Deadline deadline = DeadlineIn(absl::Seconds(10));
    for (const char* key : {kDoneKey, kDeviceDoneKey}) {
      if (key == kDeviceDoneKey && !device_bootstrapped) break;
      while (!Expired(deadline)) {
        absl::StatusOr<std::string> done = store_->Get(key, deadline);
        if (!done.ok() || *done == std::to_string(env_.world_size)) break;
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
  }
  store_.reset();
  server_.reset();
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> InitFromEnv(ProcessGroupOptions options) {
  BRAID_ASSIGN_OR_RETURN(WorkerEnv env, ReadWorkerEnv());
  return ProcessGroup::Create(env, std::move(options));
}

}  // namespace braid
