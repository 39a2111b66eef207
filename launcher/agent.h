// The per-node agent behind braidrun: finds (or hosts) the job's store, joins
// the rendezvous, starts this node's workers with the environment contract,
// watches them and the other nodes, restarts the group after a failure (or,
// with --restart-policy=replace, replaces only the failed worker while the
// others keep running: launcher/replace_policy.h), and reports the first
// failure when restarts run out.
//
// Exit codes: 0 when every local worker succeeded; 1 when the job failed (the
// report is on stderr); 128+signal when braidrun itself was stopped by a
// signal of --signals-to-handle, which it forwarded to every worker first
// (SIGKILL for those still running --shutdown-timeout later).
#ifndef BRAID_LAUNCHER_AGENT_H_
#define BRAID_LAUNCHER_AGENT_H_

#include "launcher/options.h"

namespace braid {

// Runs the job as `options` say; returns braidrun's exit code. Call from the
// main thread before any other thread starts (it blocks signals for all).
int RunAgent(const LaunchOptions& options);

}  // namespace braid

#endif  // BRAID_LAUNCHER_AGENT_H_
