#include "base/fd.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace braid {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) Reset(other.Release());
  return *this;
}

int UniqueFd::Release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

absl::Status SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return ErrnoStatus(errno, "fcntl(O_NONBLOCK)");
  }
  return absl::OkStatus();
}

absl::Status PollOne(int fd, short events, Deadline deadline, const char* what) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int n = ::poll(&entry, 1, PollTimeoutMs(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) {
      if (Expired(deadline)) return absl::DeadlineExceededError(absl::StrCat(what, ": deadline exceeded"));
      continue;
    }
    if (errno != EINTR) return ErrnoStatus(errno, absl::StrCat(what, ": poll"));
  }
}

namespace {

// write(2) to a pipe whose reader is gone raises SIGPIPE, and there is no
// MSG_NOSIGNAL for pipes: a process that keeps SIGPIPE's default action would
// die instead of seeing EPIPE. Block SIGPIPE in this thread around the call and
// consume the one the call raised (thread-directed, so it is ours), unless one
// was already pending before.
ssize_t WriteWithoutSigpipe(int fd, const void* data, size_t size) {
  sigset_t sigpipe;
  sigemptyset(&sigpipe);
  sigaddset(&sigpipe, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &sigpipe, &old_mask);
  const ssize_t n = ::write(fd, data, size);
  const int write_errno = errno;
  if (n < 0 && write_errno == EPIPE && !was_pending) {
    const timespec no_wait{0, 0};
    while (::sigtimedwait(&sigpipe, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = write_errno;
  return n;
}

}  // namespace

absl::Status SendAll(int fd, absl::Span<const std::byte> data, Deadline deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      BRAID_RETURN_IF_ERROR(PollOne(fd, POLLOUT, deadline, "send"));
      continue;
    }
    if (n < 0 && errno == ENOTSOCK) {  // a pipe
      const ssize_t w = WriteWithoutSigpipe(fd, data.data() + done, data.size() - done);
      if (w > 0) {
        done += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
        BRAID_RETURN_IF_ERROR(PollOne(fd, POLLOUT, deadline, "write"));
        continue;
      }
    }
    if (errno == EPIPE || errno == ECONNRESET) {
      return absl::UnavailableError("send: peer closed the connection");
    }
    return ErrnoStatus(errno, "send");
  }
  return absl::OkStatus();
}

namespace {

// Reads until `at_least` bytes of `data` are filled (at most all of it),
// polling first when `wait_first`.
absl::StatusOr<size_t> RecvLoop(int fd, absl::Span<std::byte> data, size_t at_least, bool wait_first,
                                Deadline deadline) {
  if (wait_first) BRAID_RETURN_IF_ERROR(PollOne(fd, POLLIN, deadline, "recv"));
  size_t done = 0;
  while (done < at_least) {
    const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat("recv: peer closed the connection after ", done,
                                                 " of ", at_least, " bytes"));
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      BRAID_RETURN_IF_ERROR(PollOne(fd, POLLIN, deadline, "recv"));
      continue;
    }
    if (errno == ECONNRESET) return absl::UnavailableError("recv: connection reset by peer");
    return ErrnoStatus(errno, "recv");
  }
  return done;
}

}  // namespace

absl::Status RecvAll(int fd, absl::Span<std::byte> data, Deadline deadline) {
  return RecvLoop(fd, data, data.size(), /*wait_first=*/false, deadline).status();
}

absl::StatusOr<size_t> RecvAnswer(int fd, absl::Span<std::byte> data, size_t at_least, Deadline deadline) {
  return RecvLoop(fd, data, std::min(at_least, data.size()), /*wait_first=*/true, deadline);
}

}  // namespace braid
