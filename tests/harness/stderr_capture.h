// StderrCapture: a test reads what the code under test logged. Redirects
// this process's stderr (fd 2, where BRAID_LOG writes, from every thread) into
// a temporary file while alive; Finish() restores it and returns the text.
// Catch2 test bodies only (it REQUIREs).
#ifndef BRAID_TESTS_HARNESS_STDERR_CAPTURE_H_
#define BRAID_TESTS_HARNESS_STDERR_CAPTURE_H_

#include <string>

#include "base/fd.h"

namespace braid {

class StderrCapture {
 public:
  StderrCapture();
  ~StderrCapture() { Restore(); }
  // Restores stderr and returns what was written meanwhile.
  std::string Finish();

 private:
  void Restore();
  UniqueFd file_;
  UniqueFd saved_;
};

}  // namespace braid

#endif  // BRAID_TESTS_HARNESS_STDERR_CAPTURE_H_
