#include "launcher/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/logging.h"
#include "base/status.h"

namespace braid {
namespace {

constexpr size_t kTailLines = 20;
constexpr size_t kMaxErrorFileBytes = 4096;

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    absl::StrAppend(&partial, part, "/");
    if (part.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("mkdir ", partial));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenLog(const std::string& path) {
  if (path.empty()) return UniqueFd();
  BRAID_RETURN_IF_ERROR(MakeDirs(path.substr(0, path.rfind('/'))));
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("opening log file ", path));
  return fd;
}

// The executable execve will run: argv[0] itself when it has a '/', else the
// first match on the worker's PATH. Resolved before fork so the child only
// makes async-signal-safe calls.
absl::StatusOr<std::string> ResolveProgram(const WorkerSpec& spec) {
  const std::string& program = spec.argv.at(0);
  if (absl::StrContains(program, '/')) {
    if (access(program.c_str(), X_OK) != 0) {
      return ErrnoStatus(errno, absl::StrCat("program '", program, "' cannot be executed"));
    }
    return program;
  }
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& kv : spec.env) {
    if (absl::StartsWith(kv, "PATH=")) path = kv.substr(5);
  }
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return absl::NotFoundError(absl::StrCat("program '", program, "' is not on PATH (", path, ")"));
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed console must not stop the agent
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::string ReadErrorFile(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  if (!in) return "";
  std::string text(kMaxErrorFileBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace

struct WorkerGroup::Stream {
  UniqueFd fd;
  int console_fd = -1;  // 1, 2, or -1 for none
  UniqueFd log;
  std::string partial;  // a line not yet ended
};

struct WorkerGroup::Worker {
  WorkerSpec spec;
  pid_t pid = -1;
  bool running = false;
  bool signalled_by_agent = false;
  Stream out, err;
  std::deque<std::string> tail;
  std::string prefix;  // "[rank N]: "
};

void SetEnvVar(std::vector<std::string>& env, absl::string_view key, absl::string_view value, bool override) {
  const std::string prefix = absl::StrCat(key, "=");
  for (std::string& kv : env) {
    if (absl::StartsWith(kv, prefix)) {
      if (override) kv = absl::StrCat(prefix, value);
      return;
    }
  }
  env.push_back(absl::StrCat(prefix, value));
}

bool WorkerExit::succeeded() const { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }

std::string WorkerExit::Describe() const {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = sigabbrev_np(sig);
    return absl::StrCat("signal SIG", name != nullptr ? name : "?", " (", sig, ")");
  }
  return absl::StrCat("wait status ", wait_status);
}

absl::StatusOr<UniqueFd> WorkerGroup::BlockSignals(const std::vector<int>& forwarded) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : forwarded) sigaddset(&set, sig);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return absl::InternalError("pthread_sigmask failed");
  UniqueFd fd(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd.valid()) return ErrnoStatus(errno, "signalfd");
  // A worker's console may be a closed pipe; that must not kill the agent.
  signal(SIGPIPE, SIG_IGN);
  return fd;
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(std::vector<WorkerSpec> specs, int signal_fd) {
  std::unique_ptr<WorkerGroup> group(new WorkerGroup(signal_fd));
  for (WorkerSpec& spec : specs) BRAID_RETURN_IF_ERROR(group->Add(std::move(spec)).status());
  return group;
}

absl::StatusOr<pid_t> WorkerGroup::Add(WorkerSpec spec) {
  const pid_t agent = getpid();
  auto worker = std::make_unique<Worker>();
  worker->prefix = spec.label.empty() ? absl::StrCat("[rank ", spec.global_rank, "]: ") : absl::StrCat("[", spec.label, "]: ");
  BRAID_ASSIGN_OR_RETURN(std::string executable, ResolveProgram(spec));
  BRAID_ASSIGN_OR_RETURN(worker->out.log, OpenLog(spec.stdout_log));
  BRAID_ASSIGN_OR_RETURN(worker->err.log, OpenLog(spec.stderr_log));
  worker->out.console_fd = spec.stdout_to_console ? STDOUT_FILENO : -1;
  worker->err.console_fd = spec.stderr_to_console ? STDERR_FILENO : -1;
  if (!spec.error_file.empty()) {
    BRAID_RETURN_IF_ERROR(MakeDirs(spec.error_file.substr(0, spec.error_file.rfind('/'))));
    unlink(spec.error_file.c_str());  // a stale file from an earlier attempt is not this one's error
  }

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  BRAID_RETURN_IF_ERROR(SetNonBlocking(out_read.get()));
  BRAID_RETURN_IF_ERROR(SetNonBlocking(err_read.get()));

  std::vector<char*> argv, envp;
  for (std::string& s : spec.argv) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (std::string& s : spec.env) envp.push_back(s.data());
  envp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return ErrnoStatus(errno, "fork");
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != agent) _exit(126);  // the agent died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(out_write.get(), STDOUT_FILENO);
    dup2(err_write.get(), STDERR_FILENO);
    execve(executable.c_str(), argv.data(), envp.data());
    const char* why = strerror(errno);
    WriteAll(STDERR_FILENO, "braidrun: exec ");
    WriteAll(STDERR_FILENO, executable);
    WriteAll(STDERR_FILENO, " failed: ");
    WriteAll(STDERR_FILENO, why);
    WriteAll(STDERR_FILENO, "\n");
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so killpg works before the child runs
  worker->pid = pid;
  worker->running = true;
  worker->out.fd = std::move(out_read);
  worker->err.fd = std::move(err_read);
  worker->spec = std::move(spec);
  workers_.push_back(std::move(worker));
  return pid;
}

WorkerGroup::WorkerGroup(int signal_fd) : signal_fd_(signal_fd) {}

WorkerGroup::~WorkerGroup() {
  if (running() > 0) Stop(SIGKILL, absl::ZeroDuration());
}

int WorkerGroup::running() const {
  int count = 0;
  for (const auto& worker : workers_) count += worker->running ? 1 : 0;
  return count;
}

std::vector<RunningWorker> WorkerGroup::Running() const {
  std::vector<RunningWorker> running;
  for (const auto& worker : workers_) {
    if (worker->running) running.push_back({worker->spec.global_rank, worker->spec.local_rank, worker->pid});
  }
  return running;
}

bool WorkerGroup::Kill(int global_rank, pid_t pid) {
  for (auto& worker : workers_) {
    if (!worker->running || worker->pid != pid || worker->spec.global_rank != global_rank) continue;
    worker->signalled_by_agent = true;
    killpg(worker->pid, SIGKILL);
    return true;
  }
  return false;
}

void WorkerGroup::Drain(Stream& stream) {
  Worker* owner = nullptr;
  for (auto& worker : workers_) {
    if (&worker->out == &stream || &worker->err == &stream) owner = worker.get();
  }
  char buffer[65536];
  while (stream.fd.valid()) {
    const ssize_t n = read(stream.fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: nothing more now
    if (n == 0) {       // EOF: flush the unterminated last line
      if (!stream.partial.empty()) {
        if (stream.console_fd >= 0) WriteAll(stream.console_fd, absl::StrCat(owner->prefix, stream.partial, "\n"));
        owner->tail.push_back(std::move(stream.partial));
        if (owner->tail.size() > kTailLines) owner->tail.pop_front();
        stream.partial.clear();
      }
      stream.fd.Reset();
      return;
    }
    const absl::string_view chunk(buffer, static_cast<size_t>(n));
    if (stream.log.valid()) WriteAll(stream.log.get(), chunk);
    stream.partial.append(chunk.data(), chunk.size());
    size_t start = 0;
    for (size_t nl = stream.partial.find('\n'); nl != std::string::npos; nl = stream.partial.find('\n', start)) {
      const absl::string_view line(stream.partial.data() + start, nl - start);
      if (stream.console_fd >= 0) WriteAll(stream.console_fd, absl::StrCat(owner->prefix, line, "\n"));
      owner->tail.emplace_back(line);
      if (owner->tail.size() > kTailLines) owner->tail.pop_front();
      start = nl + 1;
    }
    stream.partial.erase(0, start);
  }
}

void WorkerGroup::ReapInto(std::vector<WorkerExit>& exits) {
  for (auto& worker : workers_) {
    if (!worker->running) continue;
    int status = 0;
    const pid_t pid = waitpid(worker->pid, &status, WNOHANG);
    if (pid != worker->pid) continue;
    worker->running = false;
    // The output it wrote before dying belongs in its report.
    Drain(worker->out);
    Drain(worker->err);
    WorkerExit exit;
    exit.local_rank = worker->spec.local_rank;
    exit.global_rank = worker->spec.global_rank;
    exit.pid = worker->pid;
    exit.wait_status = status;
    exit.time = absl::Now();
    exit.stopped_by_agent = worker->signalled_by_agent && WIFSIGNALED(status);
    std::string error_file = ReadErrorFile(worker->spec.error_file);
    if (!error_file.empty()) {
      exit.tail = absl::StrCat("error file ", worker->spec.error_file, ":\n", error_file);
    } else {
      for (const std::string& line : worker->tail) absl::StrAppend(&exit.tail, line, "\n");
    }
    exits.push_back(std::move(exit));
  }
}

absl::StatusOr<WorkerEvents> WorkerGroup::Poll(Deadline deadline) {
  WorkerEvents events;
  events.signal = pending_signal_;
  pending_signal_ = 0;
  // Exits that happened before this call (SIGCHLD already consumed) count too.
  ReapInto(events.exited);
  while (events.exited.empty() && events.signal == 0) {
    std::vector<pollfd> fds = {{signal_fd_, POLLIN, 0}};
    std::vector<Stream*> streams = {nullptr};
    for (auto& worker : workers_) {
      for (Stream* stream : {&worker->out, &worker->err}) {
        if (!stream->fd.valid()) continue;
        fds.push_back({stream->fd.get(), POLLIN, 0});
        streams.push_back(stream);
      }
    }
    const int ready = poll(fds.data(), fds.size(), PollTimeoutMs(deadline));
    if (ready < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
    if (ready <= 0) {
      if (Expired(deadline)) break;
      continue;
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) Drain(*streams[i]);
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        if (info.ssi_signo != SIGCHLD) events.signal = static_cast<int>(info.ssi_signo);
      }
      ReapInto(events.exited);
    }
  }
  return events;
}

std::vector<WorkerExit> WorkerGroup::Stop(int signal, absl::Duration grace) {
  std::vector<WorkerExit> exits;
  for (auto& worker : workers_) {
    if (!worker->running) continue;
    worker->signalled_by_agent = true;
    killpg(worker->pid, signal);
  }
  const Deadline grace_deadline = DeadlineIn(grace);
  while (running() > 0 && !Expired(grace_deadline)) {
    absl::StatusOr<WorkerEvents> events = Poll(grace_deadline);
    if (!events.ok()) break;
    if (events->signal != 0) pending_signal_ = events->signal;
    for (WorkerExit& exit : events->exited) exits.push_back(std::move(exit));
  }
  if (running() > 0) {
    for (auto& worker : workers_) {
      if (worker->running) killpg(worker->pid, SIGKILL);
    }
    // SIGKILL cannot be caught: the rest die promptly; still, never wait forever.
    const Deadline kill_deadline = DeadlineIn(absl::Seconds(10));
    while (running() > 0 && !Expired(kill_deadline)) {
      ReapInto(exits);
      if (running() > 0) usleep(1000);
    }
    if (running() > 0) BRAID_LOG(ERROR) << "braidrun: " << running() << " worker(s) did not die after SIGKILL";
  }
  // Output still buffered in the pipes (or held open by grandchildren) ends here.
  for (auto& worker : workers_) {
    Drain(worker->out);
    Drain(worker->err);
    worker->out.fd.Reset();
    worker->err.fd.Reset();
  }
  return exits;
}

}  // namespace braid
