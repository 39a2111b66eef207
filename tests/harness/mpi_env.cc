#include "tests/harness/mpi_env.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "tests/harness/subprocess.h"

namespace braid {
namespace {

std::string WithOption(const char* variable, const std::string& option) {
  const char* inherited = std::getenv(variable);
  return inherited != nullptr && *inherited != '\0' ? absl::StrCat(inherited, ":", option) : option;
}

// Open MPI is not built with -fsanitize=thread: ThreadSanitizer (tsan
// config) sees only its pthread calls and reports its own internal lock
// orders and hand-offs (btl_tcp's add_procs/proc_remove, its progress
// thread). Reports whose stacks are inside Open MPI are suppressed; braid's
// own code stays checked.
std::string TsanSuppressions() {
  const std::string path = absl::StrCat(TestTempDir(), "/mpi_tsan.supp");
  FILE* file = std::fopen(path.c_str(), "w");
  if (file != nullptr) {
    for (const char* kind : {"race", "deadlock", "mutex", "signal", "thread"}) {
      for (const char* module : {"libmpi.so", "libopen-pal.so", "libopen-rte.so", "libpmix.so", "mca_", "libevent",
                                 "libhwloc"}) {
        std::fprintf(file, "%s:%s\n", kind, module);
      }
    }
    std::fclose(file);
  }
  return path;
}

}  // namespace

std::map<std::string, std::string> MpiJobEnv() {
  return {
      {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
      {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
      {"TMPDIR", "/tmp"},
      // Open MPI's components are shared objects it dlcloses in MPI_Finalize,
      // so LeakSanitizer sees their allocations at exit from "<unknown
      // module>" and no suppression can name them: leak checking is off
      // inside MPI jobs (AddressSanitizer's other checks stay on).
      {"ASAN_OPTIONS", WithOption("ASAN_OPTIONS", "detect_leaks=0")},
      {"TSAN_OPTIONS", WithOption("TSAN_OPTIONS", absl::StrCat("suppressions=", TsanSuppressions()))},
  };
}

}  // namespace braid
