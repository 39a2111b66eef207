#include "tests/harness/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/socket.h"

extern char** environ;

namespace braid {

std::string TestTempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string Runfile(const std::string& workspace_path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) return absl::StrCat(srcdir, "/", workspace, "/", workspace_path);
  return workspace_path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

uint16_t UnusedPort() {
  absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", 0);
  return listener.ok() ? listener->port() : 0;
}

uint16_t UnusedPortPair() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    absl::StatusOr<TcpListener> first = TcpListener::Listen("127.0.0.1", 0);
    if (!first.ok() || first->port() == 65535) continue;
    if (TcpListener::Listen("127.0.0.1", static_cast<uint16_t>(first->port() + 1)).ok()) return first->port();
  }
  return 0;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& set,
            const std::string& tag, const std::vector<std::string>& unset) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (set.count(name) == 0 && std::find(unset.begin(), unset.end(), name) == unset.end()) {
      env_strings.push_back(entry);
    }
  }
  for (const auto& [name, value] : set) env_strings.push_back(absl::StrCat(name, "=", value));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = argv;
  std::vector<char*> args;
  for (std::string& s : argv_strings) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string out = absl::StrCat(TestTempDir(), "/", tag, ".out");
  const std::string err = absl::StrCat(TestTempDir(), "/", tag, ".err");
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

std::vector<ProcessExit> WaitAll(const std::vector<pid_t>& pids, const std::vector<std::string>& tags,
                                 Deadline deadline) {
  std::vector<ProcessExit> exits(pids.size());
  std::vector<bool> done(pids.size(), false);
  size_t left = pids.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (pids[i] < 0 || ::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        exits[i].code = pids[i] < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        done[i] = true;
        --left;
      }
    }
    if (left == 0) break;
    if (Expired(deadline)) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (!done[i]) {
          ::kill(pids[i], SIGKILL);
          ::waitpid(pids[i], nullptr, 0);
          exits[i].code = -SIGKILL;
        }
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    exits[i].out = ReadFile(absl::StrCat(TestTempDir(), "/", tags[i], ".out"));
    exits[i].err = ReadFile(absl::StrCat(TestTempDir(), "/", tags[i], ".err"));
  }
  return exits;
}

std::string Dump(const ProcessExit& exit) {
  return absl::StrCat("exit ", exit.code, "\n--- stdout\n", exit.out, "--- stderr\n", exit.err);
}

ProcessExit RunProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& set,
                       const std::string& tag, absl::Duration timeout, const std::vector<std::string>& unset) {
  return WaitAll({Spawn(argv, set, tag, unset)}, {tag}, DeadlineIn(timeout))[0];
}

}  // namespace braid
