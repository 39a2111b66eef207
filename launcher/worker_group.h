// WorkerGroup: one node's worker processes, started, watched and stopped.
//
// Each worker is fork+exec'd into its own process group (so stopping it stops
// whatever it started) with PR_SET_PDEATHSIG, so no worker outlives a killed
// agent. Its stdout and stderr come back through pipes: each line goes to the
// console as "[rank N]: line" (unless redirected or filtered) and to its log
// file when asked, and the last lines are kept for the failure report.
//
// A group grows while it runs (Add): --restart-policy=replace starts a new
// process in a failed worker's slot without stopping the others. A worker
// that exited stays in the group (its output and exit are kept); running()
// counts only those still running.
//
// Single-threaded: the agent's thread calls Poll in a loop. Signals reach the
// agent through a signalfd (SIGCHLD and the signals it forwards,
// --signals-to-handle) that the caller creates after blocking those signals
// in every thread.
#ifndef BRAID_LAUNCHER_WORKER_GROUP_H_
#define BRAID_LAUNCHER_WORKER_GROUP_H_

#include <sys/types.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/fd.h"

namespace braid {

struct WorkerSpec {
  int local_rank = 0;
  int global_rank = 0;
  std::string label;  // console prefix "[label]: "; default "rank N"
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "KEY=VALUE", the whole environment
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  std::string stdout_log;  // path, or empty for none
  std::string stderr_log;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE, read for the report
};

// Sets KEY=VALUE in `env` ("KEY=VALUE" entries): replaces an existing entry
// when `override`, else leaves it; appends when there is none.
void SetEnvVar(std::vector<std::string>& env, absl::string_view key, absl::string_view value, bool override = true);

struct WorkerExit {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;
  int wait_status = 0;
  absl::Time time;
  bool stopped_by_agent = false;  // it died of a signal the agent sent
  std::string tail;               // last output lines, or the error file

  bool succeeded() const;
  // "exit code 3", "signal SIGKILL (9)".
  std::string Describe() const;
};

// A worker still running.
struct RunningWorker {
  int global_rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
};

// What Poll saw.
struct WorkerEvents {
  std::vector<WorkerExit> exited;
  int signal = 0;  // a forwarded signal (--signals-to-handle) sent to the agent, or 0
};

class WorkerGroup {
 public:
  // The signal fd for SIGCHLD and `forwarded`; blocks them in the calling
  // thread (call it before starting any thread).
  static absl::StatusOr<UniqueFd> BlockSignals(const std::vector<int>& forwarded);

  // Starts every worker; on a failed start, stops those already started.
  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(std::vector<WorkerSpec> specs, int signal_fd);
  ~WorkerGroup();  // kills (SIGKILL) and reaps any worker still running

  // Starts one more worker into the group (running or not); the others are
  // not touched. Returns its pid. On an error nothing was started.
  absl::StatusOr<pid_t> Add(WorkerSpec spec);

  // Forwards output and reaps exits until something happens or `deadline`.
  absl::StatusOr<WorkerEvents> Poll(Deadline deadline);
  // Sends `signal` to every running worker's process group, waits `grace`,
  // then SIGKILLs the rest and reaps them. Returns the exits it reaped.
  std::vector<WorkerExit> Stop(int signal, absl::Duration grace);

  // SIGKILLs the process group of the running worker `global_rank` whose pid
  // is `pid` (a worker that exited and was replaced is never hit); its exit
  // comes from Poll, with stopped_by_agent set. Whether it was running.
  bool Kill(int global_rank, pid_t pid);

  int running() const;
  // Every worker still running, in start order.
  std::vector<RunningWorker> Running() const;

 private:
  struct Worker;
  struct Stream;
  explicit WorkerGroup(int signal_fd);
  void Drain(Stream& stream);
  void ReapInto(std::vector<WorkerExit>& exits);

  int signal_fd_;
  std::vector<std::unique_ptr<Worker>> workers_;
  int pending_signal_ = 0;
};

}  // namespace braid

#endif  // BRAID_LAUNCHER_WORKER_GROUP_H_
