// A small rank-prefixed logger and BRAID_CHECK.
//
//   BRAID_LOG(INFO) << "tcp: connected to " << peer;
//   -> "[rank 3] tcp: connected to 1"   (on stderr)
//
// The level comes from BRAID_LOG_LEVEL (debug, info, warning, error; default
// warning). The rank prefix is set once per process with SetLogRank (the
// runtime does it at init). Lines are written with one write(2) each so ranks
// sharing a terminal do not interleave mid-line. Not for hot loops.
//
// BRAID_CHECK(cond) << "why" is for programmer errors only (broken invariants):
// it logs and aborts. A peer, the network or user input returns a Status.
#ifndef BRAID_BASE_LOGGING_H_
#define BRAID_BASE_LOGGING_H_

#include <sstream>

#include "absl/status/status.h"

namespace braid {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Thread-safe. rank < 0 removes the prefix.
void SetLogRank(int rank);
// Current threshold, read from BRAID_LOG_LEVEL on first use.
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);

namespace internal {

// One log line; emitted (and for kFatal, abort()ed) on destruction.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream` type-check.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace braid

#define BRAID_LOG_LEVEL_DEBUG ::braid::LogLevel::kDebug
#define BRAID_LOG_LEVEL_INFO ::braid::LogLevel::kInfo
#define BRAID_LOG_LEVEL_WARNING ::braid::LogLevel::kWarning
#define BRAID_LOG_LEVEL_ERROR ::braid::LogLevel::kError
#define BRAID_LOG_LEVEL_FATAL ::braid::LogLevel::kFatal

#define BRAID_LOG(level)                                             \
  (BRAID_LOG_LEVEL_##level < ::braid::MinLogLevel())                 \
      ? (void)0                                                      \
      : ::braid::internal::Voidify() &                               \
            ::braid::internal::LogMessage(BRAID_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#define BRAID_CHECK(cond)                                                             \
  (cond) ? (void)0                                                                    \
         : ::braid::internal::Voidify() &                                             \
               ::braid::internal::LogMessage(::braid::LogLevel::kFatal, __FILE__, __LINE__) \
                       .stream()                                                      \
                   << "check failed: " #cond " "

#define BRAID_CHECK_OK(expr)                                                          \
  do {                                                                                \
    const ::absl::Status braid_check_status_ = (expr);                                \
    BRAID_CHECK(braid_check_status_.ok()) << braid_check_status_;                     \
  } while (false)

#endif  // BRAID_BASE_LOGGING_H_
