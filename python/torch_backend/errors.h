// Errors at the boundary between braid and torch. torch's error channel is
// C++ exceptions (std::runtime_error becomes Python's RuntimeError); braid's
// status codes become them here, with braid's messages unchanged.
#ifndef BRAID_PYTHON_TORCH_BACKEND_ERRORS_H_
#define BRAID_PYTHON_TORCH_BACKEND_ERRORS_H_

#include <c10/util/Exception.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace braid_torch {

[[noreturn]] inline void Fail(const std::string& message) { throw std::runtime_error(message); }

// The message of an exception from torch (c10::Error's without its C++ backtrace).
inline std::string MessageOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) return error->what_without_backtrace();
  return e.what();
}

}  // namespace braid_torch

#endif  // BRAID_PYTHON_TORCH_BACKEND_ERRORS_H_
