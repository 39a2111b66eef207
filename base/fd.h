// RAII file descriptors and waits on them: a non-blocking descriptor, poll(2)
// with the time left until a deadline, and sending or receiving every byte
// by one, so nothing here can block forever. Sockets are in base/socket.h.
#ifndef BRAID_BASE_FD_H_
#define BRAID_BASE_FD_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/deadline.h"

namespace braid {

// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Sets O_NONBLOCK.
absl::Status SetNonBlocking(int fd);

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT); kDeadlineExceeded
// ("<what>: deadline exceeded") at the deadline.
absl::Status PollOne(int fd, short events, Deadline deadline, const char* what);

// Sends every byte of `data` on a non-blocking socket or pipe, waiting with
// poll until `deadline`. kUnavailable if the peer closed; kDeadlineExceeded.
absl::Status SendAll(int fd, absl::Span<const std::byte> data, Deadline deadline);

// Receives exactly data.size() bytes. A clean EOF before the first byte or in
// the middle is kUnavailable ("peer closed the connection").
absl::Status RecvAll(int fd, absl::Span<std::byte> data, Deadline deadline);

// Receives at least `at_least` bytes and at most data.size(); returns how
// many. For an answer, which cannot be there yet: it waits before it reads
// (a read that fails first would cost a system call). Errors as RecvAll's.
absl::StatusOr<size_t> RecvAnswer(int fd, absl::Span<std::byte> data, size_t at_least, Deadline deadline);

}  // namespace braid

#endif  // BRAID_BASE_FD_H_
