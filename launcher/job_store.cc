#include "launcher/job_store.h"

#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/launch_env.h"
#include "base/status.h"

namespace braid {

absl::StatusOr<JobSecret> SetUpSecret(const LaunchOptions& o, std::string* warning) {
  warning->clear();
  BRAID_ASSIGN_OR_RETURN(JobSecret secret, JobSecret::FromEnv());
  if (secret.enabled()) return secret;
  if (o.max_nodes > 1) {
    *warning = "warning: no job secret (BRAID_JOB_SECRET or BRAID_JOB_SECRET_FILE on every node): the store and the "
               "workers' connections admit anyone who can reach them";
    return secret;
  }
  BRAID_ASSIGN_OR_RETURN(std::string generated, JobSecret::Generate());
  setenv(launch_env::kJobSecret, generated.c_str(), 1);  // still single-threaded here
  return JobSecret(generated);
}

namespace {

// The store holds a descriptor per worker of the job: this process may open
// as many as its hard limit allows (the soft limit, often 1024, is raised).
int StoreConnectionLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  constexpr rlim_t kReserve = 256;  // the agent's own: workers' pipes, logs, its client
  const rlim_t usable = limit.rlim_cur > 2 * kReserve ? limit.rlim_cur - kReserve : limit.rlim_cur / 2;
  return static_cast<int>(std::min<rlim_t>(usable, 1 << 20));
}

}  // namespace

absl::StatusOr<JobStore> OpenStore(const LaunchOptions& o, const JobSecret& secret, Deadline deadline,
                                   const std::function<bool()>& interrupted) {
  JobStore job;
  std::string endpoint = o.rdzv_endpoint;
  bool may_host = true;
  if (o.standalone || (o.max_nodes == 1 && endpoint.empty())) {
    endpoint = "127.0.0.1:0";  // one node: a private store on a free port
  } else if (o.rdzv_backend == "static") {
    if (endpoint.empty()) {
      // MASTER_PORT stays free for a PyTorch script's own store.
      const int master_port = o.master_port > 0 ? o.master_port : kDefaultMasterPort;
      endpoint = absl::StrCat(o.master_addr.empty() ? "127.0.0.1" : o.master_addr, ":", master_port + 1);
    }
    may_host = o.node_rank == 0;
  }
  BRAID_ASSIGN_OR_RETURN(job.address, ParseHostPort(endpoint, kDefaultRdzvPort));
  if (o.is_host >= 0) may_host = o.is_host == 1;
  if (o.is_host < 0 && !o.local_addr.empty() && o.rdzv_backend == "c10d") may_host = o.local_addr == job.address.host;

  // Static rendezvous: node 0 alone hosts the store, so its port taken by
  // anything else is the job's end, said now rather than at the deadline.
  const bool must_host = o.rdzv_backend == "static" && !o.standalone && o.max_nodes > 1 && may_host && o.is_host < 0;
  absl::Status host_error = absl::OkStatus();
  if (may_host) {
    StoreServerOptions server_options;
    server_options.secret = secret;
    server_options.max_connections = StoreConnectionLimit();
    absl::StatusOr<std::unique_ptr<StoreServer>> server =
        StoreServer::Start(job.address.host, job.address.port, server_options);
    if (server.ok()) {
      job.server = std::move(*server);
      job.address.port = job.server->port();
    } else if (must_host) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node 0 hosts the rendezvous store (static rendezvous) on ", ToString(job.address),
          ", and cannot: ", server.status().message(), ". Free that port, or choose another --master-port ",
          "(the store takes --master-port + 1) or --rdzv-endpoint on every node"));
    } else {
      host_error = server.status();  // another agent on this host may have it
    }
  }
  // In slices, so that a signal to the agent is not held until the deadline.
  absl::StatusOr<std::unique_ptr<TcpStore>> client = InSlices(
      deadline, absl::Seconds(2), [&](Deadline until) { return TcpStore::Connect(job.address, until, secret); },
      [&] {
        return interrupted() ? absl::CancelledError("interrupted by a signal while reaching the rendezvous store")
                             : absl::OkStatus();
      });
  if (absl::IsCancelled(client.status())) return client.status();
  if (!client.ok()) {
    std::string why = absl::StrCat("cannot reach the rendezvous store at ", ToString(job.address), ": ",
                                   client.status().message());
    if (!host_error.ok()) absl::StrAppend(&why, " (hosting it here failed too: ", host_error.message(), ")");
    return absl::UnavailableError(why);
  }
  job.client = std::move(*client);
  return job;
}

}  // namespace braid
