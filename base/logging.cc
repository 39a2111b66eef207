#include "base/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/env.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kLogLevelKnob, "BRAID_LOG_LEVEL", "warning",
               "Log threshold: debug, info, warning or error.");

std::atomic<int> g_rank{-1};
std::atomic<int> g_min_level{-1};

LogLevel ParseLevel(std::string text) {
  text = absl::AsciiStrToLower(text);
  if (text == "debug" || text == "trace") return LogLevel::kDebug;
  if (text == "info") return LogLevel::kInfo;
  if (text == "error") return LogLevel::kError;
  return LogLevel::kWarning;
}

const char* LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
    case LogLevel::kFatal: return "F";
  }
  return "?";
}

}  // namespace

void SetLogRank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

LogLevel MinLogLevel() {
  int level = g_min_level.load(std::memory_order_relaxed);
  if (level < 0) {
    level = static_cast<int>(ParseLevel(kLogLevelKnob.String()));
    g_min_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void SetMinLogLevel(LogLevel level) {
  g_min_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const int rank = g_rank.load(std::memory_order_relaxed);
  if (rank >= 0) stream_ << "[rank " << rank << "] ";
  const char* base = file;
  for (const char* p = file; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  stream_ << LevelLetter(level) << " " << absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone())
          << " " << base << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  // One write per line: lines from ranks sharing stderr stay whole.
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace internal
}  // namespace braid
