#include "tests/harness/stderr_capture.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "catch2/catch.hpp"

namespace braid {

StderrCapture::StderrCapture() {
  std::fflush(stderr);
  char path[] = "/tmp/braid_stderr_XXXXXX";
  file_ = UniqueFd(::mkstemp(path));
  REQUIRE(file_.valid());
  ::unlink(path);
  saved_ = UniqueFd(::dup(STDERR_FILENO));
  REQUIRE(::dup2(file_.get(), STDERR_FILENO) == STDERR_FILENO);
}

std::string StderrCapture::Finish() {
  Restore();
  std::string text;
  char buffer[4096];
  ssize_t n;
  off_t offset = 0;
  while ((n = ::pread(file_.get(), buffer, sizeof(buffer), offset)) > 0) {
    text.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
  return text;
}

void StderrCapture::Restore() {
  if (!saved_.valid()) return;
  std::fflush(stderr);
  ::dup2(saved_.get(), STDERR_FILENO);
  saved_.Reset();
}

}  // namespace braid
