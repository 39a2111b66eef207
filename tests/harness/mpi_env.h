// The environment a test gives a real mpirun job: root allowed, a short
// TMPDIR (Open MPI's session directory holds unix sockets), and sanitizer
// options for a library that is not instrumented (see mpi_env.cc).
#ifndef BRAID_TESTS_HARNESS_MPI_ENV_H_
#define BRAID_TESTS_HARNESS_MPI_ENV_H_

#include <map>
#include <string>

namespace braid {

std::map<std::string, std::string> MpiJobEnv();

}  // namespace braid

#endif  // BRAID_TESTS_HARNESS_MPI_ENV_H_
