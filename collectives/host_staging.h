// HostStaging: runs a host collective on CUDA tensors by staging them
// through pinned host memory, for the host transports (tcp, shm, mpi) in a
// --config=cuda build.
//
// The thread running the collective copies each CUDA input to a pinned host
// buffer (cudaMemcpy, with the tensor's GPU current and the thread's own
// current device restored after), runs the collective on host memory, and
// copies the result back into the CUDA output before returning. The buffer
// is allocated on first use, grown when a larger call comes, and kept for
// the owner's life (never per call). A CUDA input must be ready when the
// call is issued (its kernels finished, or queued on a stream that
// synchronizes with the legacy default stream, which the copies use). A
// CUDA error fails the collective naming the rank, the transport and the
// CUDA call.
//
// Threads: one collective at a time (the communicator's running task).
#ifndef BRAID_COLLECTIVES_HOST_STAGING_H_
#define BRAID_COLLECTIVES_HOST_STAGING_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "tensor/tensor.h"

namespace braid {

class HostStaging {
 public:
  // `rank` and `transport` name the errors.
  HostStaging(int rank, std::string transport) : rank_(rank), transport_(std::move(transport)) {}

  // Whether a collective on `in` and `out` (either may be undefined) needs staging.
  static bool Needed(const Tensor& in, const Tensor& out);

  // Runs `run` on host copies of the CUDA ones among `in` and `out` (the
  // others as they are), copying in before and out after.
  using RunOnHost = absl::FunctionRef<absl::Status(const Tensor& in, const Tensor& out)>;
  absl::Status Run(const Tensor& in, const Tensor& out, RunOnHost run);

 private:
  const int rank_;
  const std::string transport_;
  // Pinned host memory; grown, never shrunk.
  Tensor staging_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_HOST_STAGING_H_
