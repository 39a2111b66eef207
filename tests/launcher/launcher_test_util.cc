#include "tests/launcher/launcher_test_util.h"

#include "tests/harness/subprocess.h"

namespace braid {

const std::vector<std::string> kWorkerContract = {
    "RANK",          "WORLD_SIZE",      "LOCAL_RANK",           "MASTER_ADDR",          "MASTER_PORT",
    "BRAID_STORE_ADDR", "BRAID_STORE_PREFIX", "BRAID_JOB_SECRET", "BRAID_JOB_SECRET_FILE", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE"};

std::vector<std::string> Braidrun(std::vector<std::string> flags, std::vector<std::string> probe_args) {
  std::vector<std::string> argv = {Runfile("launcher/braidrun")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(Runfile("tests/launcher/probe_worker"));
  argv.insert(argv.end(), probe_args.begin(), probe_args.end());
  return argv;
}

}  // namespace braid
