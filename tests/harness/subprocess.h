// Subprocess: real programs started by tests (braid_bench, braidrun, workers)
// with a chosen environment, their stdout and stderr in files, and a deadline
// on every wait: a process still running at the deadline is SIGKILLed and
// reported as killed, never waited on forever.
//
//   pid_t pid = Spawn({Runfile("launcher/braidrun"), "--standalone", ...}, {{"FOO", "1"}}, "job");
//   std::vector<ProcessExit> exits = WaitAll({pid}, {"job"}, DeadlineIn(absl::Seconds(60)));
//   CHECK(exits[0].code == 0);
#ifndef BRAID_TESTS_HARNESS_SUBPROCESS_H_
#define BRAID_TESTS_HARNESS_SUBPROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/deadline.h"

namespace braid {

struct ProcessExit {
  int code = -1;  // exit status, or -signal
  std::string out;
  std::string err;
};

// $TEST_TMPDIR (or /tmp).
std::string TestTempDir();
// Where Bazel put a data dependency ("launcher/braidrun"): the test runs in
// its runfiles tree.
std::string Runfile(const std::string& workspace_path);
std::string ReadFile(const std::string& path);
// A port nothing listens on now (bound to port 0 and released).
uint16_t UnusedPort();
// A port P free together with P + 1 (braidrun's static store takes MASTER_PORT + 1), or 0.
uint16_t UnusedPortPair();

// Starts argv[0] (a path) with this process's environment minus `unset`, plus
// `set`; stdout and stderr go to TestTempDir()/<tag>.out and .err. Returns
// the pid, or -1 when it could not start.
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& set,
            const std::string& tag, const std::vector<std::string>& unset = {});

// Waits for every pid until `deadline`; SIGKILLs the rest then (their code is
// -SIGKILL). Reads each one's output files back.
std::vector<ProcessExit> WaitAll(const std::vector<pid_t>& pids, const std::vector<std::string>& tags,
                                 Deadline deadline);

// "exit N", then stdout and stderr: what a failed check prints (INFO).
std::string Dump(const ProcessExit& exit);

// Spawn + WaitAll for one process.
ProcessExit RunProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& set,
                       const std::string& tag, absl::Duration timeout, const std::vector<std::string>& unset = {});

}  // namespace braid

#endif  // BRAID_TESTS_HARNESS_SUBPROCESS_H_
