#include "collectives/flight_recorder.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/deadline.h"
#include "base/env.h"
#include "base/fd.h"
#include "base/launch_env.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/status.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kEntriesKnob, "BRAID_FLIGHT_ENTRIES", "256", "How many recent collectives each rank remembers.");
BRAID_ENV_KNOB(kDirKnob, launch_env::kFlightDir, "",
               "Where flight-recorder dumps go (default /tmp/braid_flight/<TORCHELASTIC_RUN_ID or job>).");
BRAID_ENV_KNOB(kRunIdKnob, launch_env::kRunId, "", "The launcher's run id (names the default dump folder).");

std::string Json(absl::string_view text) { return absl::StrCat("\"", absl::CEscape(text), "\""); }

std::string Micros(absl::Time t) {
  return t == absl::Time() ? "null" : absl::StrCat(absl::ToUnixMicros(t));
}

// SIGUSR1: the handler only writes a byte to a pipe; a thread reads it and
// dumps every live recorder. The thread runs only while recorders exist, so a
// process without communicators stays single-threaded (fork-safe); a forked
// child gets a fresh pipe (the parent's object, not its thread, came along).
class SignalDumper {
 public:
  static SignalDumper& Get() {
    static SignalDumper* dumper = new SignalDumper();  // never destroyed
    return *dumper;
  }

  void Add(const FlightRecorder* recorder) {
    MutexLock lock(&mu_);
    if (owner_pid_ != getpid()) Install();
    live_.insert(recorder);
    if (thread_ == nullptr && signal_read_ >= 0) {
      stop_fd_ = eventfd(0, EFD_CLOEXEC);
      const int signal_fd = signal_read_, stop_fd = stop_fd_;
      thread_ = new std::thread([this, signal_fd, stop_fd] { Loop(signal_fd, stop_fd); });
    }
  }

  void Remove(const FlightRecorder* recorder) {
    std::thread* finished = nullptr;
    int stop_fd = -1;
    {
      MutexLock lock(&mu_);
      live_.erase(recorder);
      if (!live_.empty() || thread_ == nullptr || owner_pid_ != getpid()) return;
      finished = thread_;
      thread_ = nullptr;
      stop_fd = stop_fd_;
      const uint64_t one = 1;
      (void)!write(stop_fd, &one, sizeof(one));
    }
    finished->join();  // not under mu_: the thread may be waiting for it
    delete finished;
    close(stop_fd);
  }

 private:
  void Install() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    owner_pid_ = getpid();
    thread_ = nullptr;  // a parent's thread (leaked here) did not come along with the fork
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      signal_read_ = -1;
      return;
    }
    signal_read_ = fds[0];
    write_fd_ = fds[1];
    struct sigaction action {};
    action.sa_handler = [](int) {
      const char byte = 1;
      (void)!write(write_fd_, &byte, 1);
    };
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &action, nullptr);
  }

  void Loop(int signal_fd, int stop_fd) {
    while (true) {
      pollfd fds[2] = {{signal_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (poll(fds, 2, -1) <= 0) continue;
      if (fds[1].revents != 0) return;
      char drain[64];
      while (read(signal_fd, drain, sizeof(drain)) > 0) {
      }
      MutexLock lock(&mu_);
      for (const FlightRecorder* recorder : live_) {
        absl::StatusOr<std::string> path = recorder->Dump("SIGUSR1");
        if (path.ok()) {
          BRAID_LOG(WARNING) << "flight recorder: dumped to " << *path << " (SIGUSR1)";
        } else {
          BRAID_LOG(ERROR) << "flight recorder: " << path.status();
        }
      }
    }
  }

  static inline volatile sig_atomic_t write_fd_ = -1;
  absl::Mutex mu_;
  pid_t owner_pid_ ABSL_GUARDED_BY(mu_) = -1;
  int signal_read_ ABSL_GUARDED_BY(mu_) = -1;
  int stop_fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::thread* thread_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::set<const FlightRecorder*> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

const char* FlightStateName(FlightRecorder::State state) {
  switch (state) {
    case FlightRecorder::State::kQueued: return "queued";
    case FlightRecorder::State::kRunning: return "running";
    case FlightRecorder::State::kCompleted: return "completed";
    case FlightRecorder::State::kFailed: return "failed";
  }
  return "?";
}

FlightRecorder::FlightRecorder(int rank, int size, std::string transport, size_t capacity, std::string group,
                               LightMutex* guard)
    : rank_(rank),
      size_(size),
      transport_(std::move(transport)),
      group_(std::move(group)),
      lock_(guard != nullptr ? guard : &own_lock_) {
  if (capacity == 0) {
    absl::StatusOr<int64_t> entries = kEntriesKnob.Int();
    capacity = entries.ok() && *entries > 0 ? static_cast<size_t>(*entries) : 256;
  }
  {
    LightMutexLock lock(lock_);
    ring_.resize(capacity);
  }
  // Not under lock_: the dumper's thread takes its lock, then ours.
  SignalDumper::Get().Add(this);
}

FlightRecorder::~FlightRecorder() { SignalDumper::Get().Remove(this); }

void FlightRecorder::Queued(const CollectiveArgs& args, size_t bytes, const char* algorithm, bool running,
                            absl::Time now) {
  LightMutexLock lock(lock_);
  QueuedHeld(args, bytes, algorithm, running, now);
}

void FlightRecorder::QueuedHeld(const CollectiveArgs& args, size_t bytes, const char* algorithm, bool running,
                                absl::Time now) {
  Entry& e = ring_[next_];
  e.seq = args.seq;
  e.kind = args.kind;
  e.dtype = args.dtype;
  e.op = args.op;
  e.root = args.root;
  e.count = args.count;
  e.bytes = bytes;
  e.algorithm = algorithm;
  e.queued = now;
  // Every field is set: a recycled entry keeps nothing of the old one.
  e.state = running ? State::kRunning : State::kQueued;
  e.started = running ? e.queued : absl::Time();
  e.ended = absl::Time();
  e.error.clear();
  if (++next_ == ring_.size()) next_ = 0;
  filled_ = std::min(filled_ + 1, ring_.size());
}

FlightRecorder::Entry* FlightRecorder::Find(uint64_t seq) {
  // Newest first: the one asked for is almost always the latest or next to it.
  size_t at = next_;
  for (size_t i = 1; i <= filled_; ++i) {
    at = at == 0 ? ring_.size() - 1 : at - 1;
    Entry& e = ring_[at];
    if (e.seq == seq && (e.state == State::kQueued || e.state == State::kRunning)) return &e;
  }
  return nullptr;
}

void FlightRecorder::Running(uint64_t seq) {
  LightMutexLock lock(lock_);
  RunningHeld(seq);
}

void FlightRecorder::RunningHeld(uint64_t seq) {
  if (Entry* e = Find(seq)) {
    e->state = State::kRunning;
    e->started = CoarseNow();
  }
}

void FlightRecorder::Finished(uint64_t seq, const absl::Status& status) {
  LightMutexLock lock(lock_);
  FinishedHeld(seq, status);
}

void FlightRecorder::FinishedHeld(uint64_t seq, const absl::Status& status) {
  if (Entry* e = Find(seq)) {
    e->state = status.ok() ? State::kCompleted : State::kFailed;
    e->ended = CoarseNow();
    if (!status.ok()) e->error = status.ToString();
  }
}

std::string FlightRecorder::NoteCopy() const {
  LightMutexLock lock(lock_);
  return note_;
}

void FlightRecorder::Note(std::string line) {
  LightMutexLock lock(lock_);
  note_ = std::move(line);
}

std::vector<FlightRecorder::Entry> FlightRecorder::Snapshot() const {
  LightMutexLock lock(lock_);
  std::vector<Entry> entries;
  for (size_t i = filled_; i >= 1; --i) entries.push_back(ring_[(next_ + ring_.size() - i) % ring_.size()]);
  return entries;
}

std::string FlightRecorder::ToJson(const std::string& why) const {
  std::string json = absl::StrCat("{\"rank\": ", rank_, ", \"size\": ", size_, ", \"transport\": ", Json(transport_),
                                  ", \"group\": ", Json(group_), ", \"why\": ", Json(why), ", \"note\": ", Json(NoteCopy()),
                                  ", \"time_us\": ", absl::ToUnixMicros(absl::Now()),
                                  ", \"pid\": ", getpid(), ", \"entries\": [");
  bool first = true;
  for (const Entry& e : Snapshot()) {
    absl::StrAppend(&json, first ? "\n" : ",\n", "  {\"seq\": ", e.seq, ", \"op\": ", Json(CollectiveKindName(e.kind)),
                    ", \"dtype\": ", Json(DTypeName(e.dtype)), ", \"reduce_op\": ", Json(ReduceOpName(e.op)),
                    ", \"root\": ", e.root, ", \"count\": ", e.count, ", \"bytes\": ", e.bytes,
                    ", \"algorithm\": ", Json(e.algorithm), ", \"state\": ", Json(FlightStateName(e.state)), ", \"queued_us\": ", Micros(e.queued),
                    ", \"started_us\": ", Micros(e.started), ", \"ended_us\": ", Micros(e.ended),
                    ", \"error\": ", Json(e.error), "}");
    first = false;
  }
  absl::StrAppend(&json, "\n]}\n");
  return json;
}

std::string FlightRecorder::DumpDir() {
  if (!kDirKnob.String().empty()) return kDirKnob.String();
  const std::string run = kRunIdKnob.String();
  return absl::StrCat("/tmp/braid_flight/", run.empty() ? "job" : run);
}

absl::StatusOr<std::string> FlightRecorder::Dump(const std::string& why) const {
  const std::string dir = DumpDir();
  std::string partial;
  for (absl::string_view part : absl::StrSplit(dir, '/')) {
    absl::StrAppend(&partial, part, "/");
    if (!part.empty() && mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("flight recorder: mkdir ", partial));
    }
  }
  std::string file = group_;
  for (char& c : file) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_') c = '_';
  }
  const std::string path =
      absl::StrCat(dir, "/rank", rank_, group_ == "world" ? "" : absl::StrCat(".", file), ".json");
  const std::string temp = absl::StrCat(path, ".tmp", getpid());
  const std::string json = ToJson(why);
  {
    UniqueFd fd(open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("flight recorder: open ", temp));
    if (write(fd.get(), json.data(), json.size()) != static_cast<ssize_t>(json.size())) {
      return ErrnoStatus(errno, absl::StrCat("flight recorder: write ", temp));
    }
  }
  if (rename(temp.c_str(), path.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("flight recorder: rename ", path));
  return path;
}

}  // namespace braid
