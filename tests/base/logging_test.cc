// Tests of base/logging.h: the threshold, lazy evaluation, the line format on
// stderr, and BRAID_CHECK aborting (in a forked child, stderr captured).
#include "base/logging.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

struct ChildResult {
  int wait_status = 0;
  std::string stderr_text;
};

// Runs `body` in a forked child whose stderr goes to a pipe; the child exits
// 0 after `body` unless `body` kills it.
template <typename Body>
ChildResult RunInChild(Body body) {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Catch2 catches SIGABRT to report it as this test's failure; here the
    // abort is the expected outcome.
    ::signal(SIGABRT, SIG_DFL);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    body();
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  ChildResult result;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) result.stderr_text.append(buffer, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  REQUIRE(::waitpid(pid, &result.wait_status, 0) == pid);
  return result;
}

TEST_CASE("BRAID_LOG below the threshold evaluates nothing", "[base][logging]") {
  const LogLevel saved = MinLogLevel();
  SetMinLogLevel(LogLevel::kError);
  CHECK(MinLogLevel() == LogLevel::kError);
  int evaluated = 0;
  BRAID_LOG(INFO) << "never built: " << ++evaluated;
  BRAID_LOG(WARNING) << "never built: " << ++evaluated;
  CHECK(evaluated == 0);
  BRAID_CHECK(evaluated == 0) << "message not built either: " << ++evaluated;
  CHECK(evaluated == 0);
  SetMinLogLevel(saved);
}

TEST_CASE("BRAID_LOG writes one rank-prefixed line to stderr", "[base][logging]") {
  const ChildResult child = RunInChild([] {
    SetMinLogLevel(LogLevel::kInfo);
    SetLogRank(3);
    BRAID_LOG(INFO) << "tcp: connected to " << 1;
    BRAID_LOG(DEBUG) << "hidden";
    SetLogRank(-1);
    BRAID_LOG(ERROR) << "no rank here";
  });
  INFO(child.stderr_text);
  CHECK(WIFEXITED(child.wait_status));
  CHECK(absl::StartsWith(child.stderr_text, "[rank 3] I "));
  CHECK(absl::StrContains(child.stderr_text, "logging_test.cc:"));
  CHECK(absl::StrContains(child.stderr_text, "] tcp: connected to 1\n"));
  CHECK_FALSE(absl::StrContains(child.stderr_text, "hidden"));
  CHECK(absl::StrContains(child.stderr_text, "\nE "));
  CHECK(absl::StrContains(child.stderr_text, "no rank here\n"));
}

TEST_CASE("BRAID_CHECK failure logs the condition and aborts", "[base][logging]") {
  const ChildResult child = RunInChild([] {
    const int one = 1;
    BRAID_CHECK(one == 2) << "because " << "reasons";
  });
  INFO(child.stderr_text);
  REQUIRE(WIFSIGNALED(child.wait_status));
  CHECK(WTERMSIG(child.wait_status) == SIGABRT);
  CHECK(absl::StrContains(child.stderr_text, "check failed: one == 2 because reasons"));
}

TEST_CASE("BRAID_CHECK_OK aborts with the status", "[base][logging]") {
  const ChildResult child = RunInChild([] { BRAID_CHECK_OK(absl::UnavailableError("peer 2 gone")); });
  INFO(child.stderr_text);
  REQUIRE(WIFSIGNALED(child.wait_status));
  CHECK(WTERMSIG(child.wait_status) == SIGABRT);
  CHECK(absl::StrContains(child.stderr_text, "UNAVAILABLE: peer 2 gone"));
}

}  // namespace
}  // namespace braid
