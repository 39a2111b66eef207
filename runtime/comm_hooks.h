// Communication hooks: how the reducer (reducer.h) reduces one bucket, as
// DDP's register_comm_hook. The default averages with one all-reduce; the
// compression hooks send f16 / bf16.
#ifndef BRAID_RUNTIME_COMM_HOOKS_H_
#define BRAID_RUNTIME_COMM_HOOKS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace braid {

// One bucket as a communication hook sees it.
struct GradBucket {
  int index = 0;             // position in the launch order (same on every rank)
  Tensor buffer;             // flat, contiguous, one dtype: this rank's gradients, then the average
  std::vector<int> parameters;  // the parameter indices packed in `buffer`, in order
  int world_size = 1;
  // A bucket on a communicator that runs on streams (nccl; tests' local
  // device links): the compute stream its copies, hook kernels and
  // collectives are ordered on. Null for a host bucket.
  Stream* stream = nullptr;
  // The iteration's last bucket: backward has nothing left to overlap with
  // it, so its collectives may run on the launching thread.
  bool last = false;

  // The options a hook's collectives on this bucket pass.
  CallOptions call_options() const { return {.stream = stream, .caller_thread = last}; }
};

// How a bucket is reduced. The default averages with one all-reduce; the
// compression hooks send f16 / bf16 instead of f32 / f64. Users may write
// their own: Launch issues collectives (with bucket.call_options(); never
// waiting on peers itself) and returns the Work that ends them; after it
// completes, Finish must leave the average in bucket.buffer.
class CommHook {
 public:
  virtual ~CommHook() = default;
  // For messages and the construction check (ranks must agree on it).
  virtual std::string name() const = 0;
  // Called with the reducer's lock held, on the thread whose MarkReady (or
  // Finalize) completed the bucket, in bucket order, once per bucket per
  // synchronized iteration.
  virtual absl::StatusOr<WorkHandle> Launch(Communicator& comm, GradBucket& bucket) = 0;
  // Called after Launch's Work ended OK: on the reducer's completion
  // thread, or on the thread that launched a last bucket already reduced.
  virtual absl::Status Finish(GradBucket& bucket) { return absl::OkStatus(); }
};

// All-reduce with ReduceOp::kAvg (the default).
std::shared_ptr<CommHook> AllReduceHook();
// f32/f64 buckets are divided by the world size, rounded to f16 (or bf16),
// summed, and widened back; other dtypes use the plain all-reduce. Halves
// the bytes on the wire at the cost of precision (f16: ~3 decimal digits,
// and values beyond 65504 overflow; bf16: f32's range, ~2-3 digits).
std::shared_ptr<CommHook> Fp16CompressHook();
std::shared_ptr<CommHook> Bf16CompressHook();

}  // namespace braid

#endif  // BRAID_RUNTIME_COMM_HOOKS_H_
