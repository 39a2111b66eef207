// What braidrun's end-to-end tests share: the command line of a job of
// probe_workers, and the worker-contract variables that must come from
// braidrun, never from the test's own environment.
#ifndef BRAID_TESTS_LAUNCHER_LAUNCHER_TEST_UTIL_H_
#define BRAID_TESTS_LAUNCHER_LAUNCHER_TEST_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace braid {

// Unset in every job a test starts (Spawn's `unset`).
extern const std::vector<std::string> kWorkerContract;

// braidrun FLAGS... probe_worker PROBE_ARGS... (runfiles paths).
std::vector<std::string> Braidrun(std::vector<std::string> flags, std::vector<std::string> probe_args);

// Waits (20 s at most) until TestTempDir()/<tag>.out has a line
// "[rank R]: NAME=value" (probe_worker --env prints them); returns value, or
// "" at the deadline.
std::string WaitForVariable(const std::string& tag, const std::string& name, int rank = 0);

// Waits (bounded) for the agents of one job, CHECKs that each exited 0, and
// returns their stdout together. Main thread only (Catch2 assertions).
std::string WaitForJob(const std::vector<pid_t>& pids, const std::vector<std::string>& tags, absl::Duration timeout);

// CHECKs a job of two nodes with two probe_workers each (--env --allreduce):
// every rank all-reduced in a world of 4, on the right node, told `master_port`.
void CheckTwoByTwoJob(const std::string& out, uint16_t master_port);

}  // namespace braid

#endif  // BRAID_TESTS_LAUNCHER_LAUNCHER_TEST_UTIL_H_
