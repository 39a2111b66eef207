#include "tests/launcher/launcher_test_util.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/deadline.h"
#include "catch2/catch.hpp"
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

std::string WaitForVariable(const std::string& tag, const std::string& name, int rank) {
  const std::string prefix = absl::StrCat("[rank ", rank, "]: ", name, "=");
  const Deadline deadline = DeadlineIn(absl::Seconds(20));
  while (!Expired(deadline)) {
    for (absl::string_view line : absl::StrSplit(ReadFile(absl::StrCat(TestTempDir(), "/", tag, ".out")), '\n')) {
      if (absl::ConsumePrefix(&line, prefix)) return std::string(line);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return "";
}

std::string WaitForJob(const std::vector<pid_t>& pids, const std::vector<std::string>& tags, absl::Duration timeout) {
  std::string all_out;
  for (const ProcessExit& exit : WaitAll(pids, tags, DeadlineIn(timeout))) {
    INFO(Dump(exit));
    CHECK(exit.code == 0);
    all_out += exit.out;
  }
  return all_out;
}

void CheckTwoByTwoJob(const std::string& out, uint16_t master_port) {
  INFO(out);
  for (int r = 0; r < 4; ++r) {
    CHECK(absl::StrContains(out, absl::StrCat("[rank ", r, "]: all-reduce ok: rank ", r, " of 4 ")));
    CHECK(absl::StrContains(out, absl::StrCat("[rank ", r, "]: GROUP_RANK=", r / 2, "\n")));
    CHECK(absl::StrContains(out, absl::StrCat("[rank ", r, "]: MASTER_PORT=", master_port, "\n")));
  }
}

}  // namespace braid
