// NcclTransport: NVIDIA NCCL as a braid transport, built only with
// --config=cuda. Every buffer it is handed is CUDA device memory on the
// transport's device (Tensor on Device::Cuda(device())), never host memory.
//
// What it is: a DeviceLink (device_link.h, nccl_native.cc): ncclSend and
// ncclRecv inside ncclGroupStart/End, and NCCL's own collectives
// (ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast,
// ncclReduce; barrier = a one-element ncclAllReduce; all-to-all = grouped
// ncclSend/ncclRecv) as the link's Native, all queued on the stream the
// communicator gives (collectives/device/device_collectives.h), so braid's
// own ring, tree and rhd run over it with braid's CUDA reduction kernels,
// and NCCL's collectives are the "native" choice. Its PostSend/PostRecv
// (host frames over ncclSend/ncclRecv, below) remain for callers of the
// bare Transport interface; the communicator no longer uses them.
//
// Set-up: rank 0 creates the ncclUniqueId and the bootstrap's AllGather
// hands it to every rank; the communicator is created with
// ncclCommInitRankConfig in non-blocking mode (config.blocking = 0), so that
// initialisation and every later wait poll (ncclCommGetAsyncError,
// cudaEventQuery) with a backoff that yields, then sleeps (never a bare spin),
// and give up at their deadline.
//
// Failures and time: an NCCL error (ncclCommGetAsyncError, e.g. a remote
// peer gone: kUnavailable) or a deadline (kDeadlineExceeded) calls
// ncclCommAbort at once, which stops this rank's in-flight NCCL kernels: the
// transport is then aborted and every later call is kFailedPrecondition.
// Unlike tcp/shm/mpi, NCCL has no channel to tell the peers why: they see
// their own deadline or NCCL's remote error. Errors name the rank, the NCCL
// call, the collective and its sequence number.
//
// Point to point: PostSend/PostRecv only queue; Wait launches everything
// queued as ONE ncclGroupStart/End (so two ranks that both send first cannot
// deadlock), each message as its 40-byte FrameHeader then its payload. The
// received headers are checked (CheckFrame) once the group completes, so a
// mismatch is reported after the payload landed; a payload size mismatch is
// an NCCL error or the deadline. Completion is per launch: Wait returns when
// every op launched together with the waited ones is done.
//
// avg: by default ncclSum then one CudaDivide by the group size, which is the
// NativeCollectives contract (bit-identical to braid's sum-then-divide on
// every transport). NcclTransportOptions::nccl_avg (BRAID_NCCL_AVG=1) uses
// ncclAvg instead: one pass less, but for floats NCCL multiplies each input by
// 1/n before summing, which can differ in the last bit when n is not a power
// of two.
//
// THREADS: one at a time, like every Transport (the communicator's progress
// thread or its inline caller); every entry point first makes the
// transport's device current on the calling thread.
//
// Verified here: it compiles and links under --config=cuda. Everything it
// does at run time needs a GPU and is checked by tests/collectives/transport/nccl on a GPU machine
// (tools/gpu_check.sh); see README "GPU / NCCL" for what has run where.
#ifndef BRAID_COLLECTIVES_TRANSPORT_NCCL_NCCL_TRANSPORT_H_
#define BRAID_COLLECTIVES_TRANSPORT_NCCL_NCCL_TRANSPORT_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/device_link.h"
#include "collectives/transport/op_table.h"
#include "collectives/transport/transport.h"

namespace braid {

struct NcclTransportOptions {
  // avg as ncclAvg instead of ncclSum + one division; unset: BRAID_NCCL_AVG (default 0).
  absl::optional<bool> nccl_avg;
};

class NcclTransport final : public Transport {
 public:
  // Collective over every rank of `bootstrap`: creates the NCCL communicator
  // on CUDA device `device` (each rank its own GPU: NCCL refuses two ranks on
  // one). Blocks until it is up or `deadline` (kDeadlineExceeded, after
  // ncclCommAbort). kFailedPrecondition when there is no such device.
  static absl::StatusOr<std::unique_ptr<NcclTransport>> Create(Bootstrap& bootstrap, int device, Deadline deadline,
                                                               NcclTransportOptions options = {});
  // Flushes and destroys the NCCL communicator (ncclCommFinalize, at most
  // 10 s), or aborts it when it failed, was aborted or does not finish.
  ~NcclTransport() override;

  const char* name() const override { return "nccl"; }
  // ncclCommSplit (non-blocking, polled against `deadline`); the subgroup's
  // transport runs on the same GPU with its own stream and scratch.
  absl::StatusOr<std::unique_ptr<Transport>> Split(int color, int key, Deadline deadline) override;
  int device() const { return device_; }

  // Payloads are device memory on device().
  absl::StatusOr<OpId> PostSend(int peer, FrameHeader header, absl::Span<const std::byte> payload) override;
  absl::StatusOr<OpId> PostRecv(int peer, FrameHeader expected, absl::Span<std::byte> payload) override;
  absl::Status Wait(absl::Span<const OpId> ops, Deadline deadline) override;
  // ncclCommAbort; fails what is pending. The peers are not told (NCCL cannot).
  void Abort(const absl::Status& cause) override;
  bool device_memory_only() const override { return true; }
  // ncclSend/ncclRecv and NCCL's collectives on the caller's streams
  // (nccl_native.cc): what the communicator runs everything through.
  DeviceLink* device_link() override;

 private:
  // Device and pinned host memory for one launch of point-to-point ops'
  // headers, and the event that marks the launch done.
  struct Launch;
  struct Op : OpRecord {
    std::shared_ptr<Launch> launch;  // null until Wait launched it
    size_t slot = 0;                 // its header's slot in the launch
  };

  NcclTransport(int rank, int size, int device, NcclTransportOptions options, bool nccl_avg);
  absl::Status Init(const ncclUniqueId& id, Deadline deadline);
  // The stream, event and scratch every communicator of this transport needs.
  absl::Status Prepare();
  absl::Status MakeCurrent() const;
  absl::Status CheckUsable() const;
  // Turns an NCCL call's result into a Status; ncclInProgress (non-blocking
  // mode: still being enqueued) is waited out against `deadline`. Aborts the
  // communicator on error or deadline.
  absl::Status Issued(ncclResult_t result, const std::string& what, Deadline deadline);
  // Records an event on the stream and polls it (and NCCL's async error)
  // until done, an error, or `deadline`.
  absl::Status Sync(const std::string& what, Deadline deadline);
  absl::Status PollEvent(cudaEvent_t event, const std::string& what, Deadline deadline);
  absl::Status Fail(absl::Status status);
  void AbortComm();
  absl::Status LaunchPending(Deadline deadline);
  void CompleteLaunch(const std::shared_ptr<Launch>& launch, absl::Status status);

  class Link;
  // NCCL's collective `args.kind` queued on `stream` (the link's Native).
  absl::Status NativeOnStream(const CollectiveArgs& args, const void* input, void* output, cudaStream_t stream,
                              Stream& braid_stream);
  std::string NativeWhat(const CollectiveArgs& args) const;
  absl::StatusOr<ncclDataType_t> NativeType(const CollectiveArgs& args) const;
  ncclRedOp_t NativeOp(const CollectiveArgs& args) const;

  const int device_;
  const NcclTransportOptions options_;
  const bool nccl_avg_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
  // Small device and pinned host buffers of scratch_bytes_: the barrier's
  // element, the agreement check's headers.
  const size_t scratch_bytes_;
  void* device_scratch_ = nullptr;
  void* host_scratch_ = nullptr;
  absl::Status aborted_;  // non-OK once aborted or failed
  DeviceRuntime* runtime_ = nullptr;  // the device's (Prepare)
  std::unique_ptr<DeviceLink> link_;  // a Link (nccl_native.cc)
  // Stable: a launch's records are read while later ops are posted.
  OpTable<Op, /*kStableAddresses=*/true> ops_;
  std::vector<OpId> unlaunched_;
};

// "ncclFloat32", ... for messages; kUnimplemented never happens for braid's
// dtypes (all eight map).
absl::StatusOr<ncclDataType_t> NcclDataType(DType dtype);
// The Status code of an NCCL result (a remote error: kUnavailable).
absl::StatusCode CodeOf(ncclResult_t result);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_NCCL_NCCL_TRANSPORT_H_
