// What braidrun's end-to-end tests share: the command line of a job of
// probe_workers, and the worker-contract variables that must come from
// braidrun, never from the test's own environment.
#ifndef BRAID_TESTS_LAUNCHER_LAUNCHER_TEST_UTIL_H_
#define BRAID_TESTS_LAUNCHER_LAUNCHER_TEST_UTIL_H_

#include <string>
#include <vector>

namespace braid {

// Unset in every job a test starts (Spawn's `unset`).
extern const std::vector<std::string> kWorkerContract;

// braidrun FLAGS... probe_worker PROBE_ARGS... (runfiles paths).
std::vector<std::string> Braidrun(std::vector<std::string> flags, std::vector<std::string> probe_args);

}  // namespace braid

#endif  // BRAID_TESTS_LAUNCHER_LAUNCHER_TEST_UTIL_H_
