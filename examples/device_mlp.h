// The MLP of mlp.h on a device (train_mlp --device=cuda): parameters,
// gradients, activations and the data set live in one DeviceRuntime's
// memory, and every step is queued on one compute stream, as torch queues a
// model's kernels on its current stream. The host only queues: it never
// waits for the device inside a step (the reducer orders its collectives
// against the same stream with events).
//
// The kernels come in two forms behind one interface (MlpKernels):
//  - cuda (mlp_kernels.cu): a tiled SGEMM and small row/column kernels.
//    Not cuBLAS: the toolkit here ships no static cuBLAS, and the GPU bundle
//    may need nothing beyond the driver, NCCL and glibc;
//  - host (the host runtime, in CI): each op a HostFunc running mlp.h's CPU
//    pieces, so a device trainer on host streams computes what the CPU
//    trainer does, bit for bit, through the same queued, event-ordered code.
#ifndef BRAID_EXAMPLES_DEVICE_MLP_H_
#define BRAID_EXAMPLES_DEVICE_MLP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status.h"
#include "examples/mlp.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace braid::examples {

// What DeviceMlp queues; pointers are the runtime's memory. See mlp.h for
// each op's meaning (the host form runs exactly those functions).
class MlpKernels {
 public:
  // The host form for the host runtime, the CUDA form for a CUDA runtime
  // (kFailedPrecondition in a build without --config=cuda).
  static absl::StatusOr<std::unique_ptr<MlpKernels>> For(DeviceRuntime& runtime);
  virtual ~MlpKernels() = default;

  virtual absl::Status GatherRows(Stream& s, const float* x, const int* y, const int* rows, int n, float* out_x,
                                  int* out_y) = 0;
  virtual absl::Status Gemm(Stream& s, bool trans_a, bool trans_b, int m, int n, int k, const float* a, const float* b,
                            float beta, float* c) = 0;
  virtual absl::Status BiasRows(Stream& s, float* z, const float* b, int rows, int cols) = 0;
  virtual absl::Status Relu(Stream& s, float* z, size_t count) = 0;
  virtual absl::Status ReluBackward(Stream& s, float* da, const float* a, size_t count) = 0;
  // As SoftmaxCrossEntropy, each row's loss into row_losses.
  virtual absl::Status SoftmaxCrossEntropy(Stream& s, const float* logits, const int* labels, int rows, float* dz,
                                           float* row_losses) = 0;
  virtual absl::Status ColumnSums(Stream& s, const float* dz, int rows, int cols, float* db) = 0;
  // y -= lr * x (SGD).
  virtual absl::Status SgdUpdate(Stream& s, float lr, const float* x, float* y, size_t count) = 0;
};

class DeviceMlp {
 public:
  // The model `start` (its parameters) and the data set, uploaded to
  // `runtime`'s memory on `stream` (which must outlive the DeviceMlp); steps
  // take at most `max_batch` rows. Blocks until the upload is done.
  static absl::StatusOr<std::unique_ptr<DeviceMlp>> Create(DeviceRuntime& runtime, Stream& stream, Mlp& start,
                                                           const Dataset& data, int max_batch);
  // Waits (bounded) for the stream, then frees the device memory.
  ~DeviceMlp();

  // Queues the epoch's rows (its batches in order, each of the same size)
  // and the per-row loss slots. Waits for the stream first: the previous
  // epoch's index upload and losses must be done with.
  absl::Status BeginEpoch(const std::vector<std::vector<int>>& batches);
  // Queues forward and backward over batch `b` of the epoch; gradient i
  // goes to grads[i] (runtime memory) and ready(i) is called once its
  // kernel is queued, last layer first.
  template <typename Ready>
  absl::Status Step(size_t b, const std::vector<float*>& grads, Ready&& ready);
  // Queues params[i] -= lr * grads[i].
  absl::Status Sgd(const std::vector<float*>& grads, float lr);
  // The epoch's mean row loss (waits for the stream).
  absl::StatusOr<double> EpochLoss();
  // Copies the parameters into `model` (waits for the stream).
  absl::Status Download(Mlp& model);
  // The parameters as tensors of the runtime's device (for
  // Reducer::BroadcastParameters, which orders itself on the device).
  std::vector<Tensor> ParamTensors() const;

  Stream& stream() const { return stream_; }

 private:
  DeviceMlp(DeviceRuntime& runtime, Stream& stream, std::vector<int> sizes)
      : runtime_(runtime), stream_(stream), sizes_(std::move(sizes)) {}
  absl::StatusOr<float*> Floats(size_t count);
  absl::StatusOr<int*> Ints(size_t count);
  absl::Status Forward(size_t b);
  absl::Status Sync();

  DeviceRuntime& runtime_;
  Stream& stream_;
  std::unique_ptr<MlpKernels> kernels_;
  std::vector<int> sizes_;
  std::vector<Shape> shapes_;
  std::vector<float*> params_;
  std::vector<float*> acts_;  // acts_[0]: the batch's inputs; acts_[l + 1]: layer l's output
  std::vector<float*> dz_;    // two buffers of max_batch x widest layer, used in turn
  float* x_ = nullptr;        // the data set
  int* y_ = nullptr;
  int* labels_ = nullptr;     // the batch's labels
  int* rows_ = nullptr;       // the epoch's rows, batch after batch
  float* losses_ = nullptr;   // the epoch's row losses
  std::vector<int> host_rows_;  // the source of rows_'s upload (kept until the next BeginEpoch)
  int max_batch_ = 0;
  int batch_ = 0;
  size_t batches_ = 0;
  size_t max_rows_ = 0;
  std::vector<void*> owned_;
};

template <typename Ready>
absl::Status DeviceMlp::Step(size_t b, const std::vector<float*>& grads, Ready&& ready) {
  if (b >= batches_) return absl::OutOfRangeError("DeviceMlp::Step: no such batch in this epoch");
  BRAID_RETURN_IF_ERROR(Forward(b));
  const int n = batch_;
  const int L = static_cast<int>(sizes_.size()) - 1;
  BRAID_RETURN_IF_ERROR(kernels_->SoftmaxCrossEntropy(stream_, acts_[static_cast<size_t>(L)], labels_, n, dz_[0],
                                                      losses_ + b * static_cast<size_t>(n)));
  size_t current = 0;
  for (int l = L - 1; l >= 0; --l) {
    const int in = sizes_[static_cast<size_t>(l)];
    const int out = sizes_[static_cast<size_t>(l) + 1];
    float* dz = dz_[current];
    BRAID_RETURN_IF_ERROR(kernels_->ColumnSums(stream_, dz, n, out, grads[2 * static_cast<size_t>(l) + 1]));
    ready(2 * l + 1);
    BRAID_RETURN_IF_ERROR(kernels_->Gemm(stream_, true, false, out, in, n, dz, acts_[static_cast<size_t>(l)], 0.0f,
                                         grads[2 * static_cast<size_t>(l)]));
    ready(2 * l);
    if (l == 0) break;
    float* da = dz_[1 - current];
    BRAID_RETURN_IF_ERROR(
        kernels_->Gemm(stream_, false, false, n, in, out, dz, params_[2 * static_cast<size_t>(l)], 0.0f, da));
    BRAID_RETURN_IF_ERROR(
        kernels_->ReluBackward(stream_, da, acts_[static_cast<size_t>(l)], static_cast<size_t>(n) * in));
    current = 1 - current;
  }
  return absl::OkStatus();
}

}  // namespace braid::examples

#endif  // BRAID_EXAMPLES_DEVICE_MLP_H_
