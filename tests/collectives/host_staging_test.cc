// CUDA tensors on the host transports (shm, tcp): the communicator stages them
// through pinned host memory in --config=cuda builds (communicator.h).
//
// What runs where:
// - a plain build: a CUDA tensor on a host transport is kUnimplemented naming
//   --config=cuda, and consumes no sequence number (runs here);
// - a --config=cuda build without a GPU (the development and CI machines):
//   the call is accepted and fails in its first CUDA call with a status naming
//   the rank, the collective and that CUDA call, which aborts the communicator
//   (runs here);
// - a GPU: the conformance suite with CUDA tensors, ranks as threads sharing
//   GPU 0 (NCCL could not do that), and mixed CPU/CUDA calls. Without a GPU
//   these say so with WARN and return: nothing of the staging path itself is
//   verified then.
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "tensor/device.h"
#include "tensor/tensor.h"
#include "tests/collectives/conformance.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/collectives/transport_factories.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/statuses.h"

namespace braid::testing {
namespace {

// Runs `fn` on n thread ranks, each with a communicator over `named`.
std::vector<absl::Status> OnCommunicators(int n, const NamedTransport& named,
                                          std::function<absl::Status(Communicator&, RankContext&)> fn) {
  RunRanksOptions options;
  options.timeout = absl::Seconds(240);
  return RunRanks(
      n, RankMode::kThreads,
      [&named, fn](RankContext& ctx) -> absl::Status {
        HarnessBootstrap bootstrap(ctx);
        BRAID_ASSIGN_OR_RETURN(auto transport, named.create(bootstrap, ctx.deadline()));
        CommunicatorOptions comm_options = named.communicator;
        comm_options.segment_bytes = 1024;  // many pipeline steps at test sizes
        comm_options.timeout = absl::Seconds(60);
        BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), comm_options));
        return fn(*comm, ctx);
      },
      options);
}

TEST_CASE("host staging: without a GPU, a CUDA tensor on a host transport is a clear error", "[collectives][cuda]") {
  if (CudaDeviceCount() > 0) {
    WARN("a GPU is present: the no-GPU error paths are not what runs here (the GPU cases below are)");
    return;
  }
  for (const NamedTransport& named : AllTransports()) {
    INFO("transport " << named.name);
    CHECK_ALL_OK(OnCommunicators(2, named, [&named](Communicator& comm, RankContext& ctx) -> absl::Status {
      // Never dereferenced on the host: a plain build refuses it, a CUDA build
      // fails in CUDA before touching it.
      static float fake[16];
      const Tensor device_view = Tensor::View(fake, {16}, DType::kF32, Device::Cuda(0));
      const std::string rank = absl::StrCat("rank ", ctx.rank());
      absl::StatusOr<WorkHandle> work = comm.AllReduce(device_view, ReduceOp::kSum);
      if (!CudaCompiledIn()) {
        if (work.ok() || work.status().code() != absl::StatusCode::kUnimplemented ||
            !absl::StrContains(work.status().message(), "--config=cuda") ||
            !absl::StrContains(work.status().message(), comm.transport_name()) ||
            !absl::StrContains(work.status().message(), rank)) {
          return absl::InternalError(absl::StrCat("plain build: expected kUnimplemented naming ", rank, ", ",
                                                  comm.transport_name(), " and --config=cuda, got ",
                                                  work.ok() ? "OK" : work.status().ToString()));
        }
        // The refused call took no sequence number: the next collective is seq 1 and works.
        BRAID_ASSIGN_OR_RETURN(Tensor host, Tensor::Zeros({4}, DType::kI32));
        BRAID_ASSIGN_OR_RETURN(WorkHandle next, comm.AllReduce(host, ReduceOp::kSum));
        BRAID_RETURN_IF_ERROR(next->Wait(ctx.deadline()));
        if (next->seq() != 1) return absl::InternalError(absl::StrCat("the next collective is seq ", next->seq()));
        return absl::OkStatus();
      }
      // --config=cuda without a GPU: accepted, then the staging's first CUDA call fails.
      if (!work.ok()) return absl::InternalError(absl::StrCat("CUDA build: the call was refused: ", work.status().ToString()));
      const absl::Status failed = (*work)->Wait(ctx.deadline());
      const std::string message(failed.message());
      const bool names_cuda_call = absl::StrContains(message, "cudaGetDevice") ||
                                   absl::StrContains(message, "cudaSetDevice") ||
                                   absl::StrContains(message, "cudaHostAlloc") || absl::StrContains(message, "cudaMemcpy");
      if (failed.ok() || !absl::StrContains(message, rank) || !absl::StrContains(message, "allreduce seq 1") ||
          !absl::StrContains(message, "staging cuda:0") || !names_cuda_call) {
        return absl::InternalError(absl::StrCat("CUDA build without a GPU: expected a failure naming ", rank,
                                                ", allreduce seq 1, the staging and the CUDA call; got ",
                                                failed.ToString()));
      }
      // A failed collective aborts the communicator, as any failure does.
      absl::StatusOr<WorkHandle> later = comm.Barrier();
      if (later.ok() || later.status().code() != absl::StatusCode::kFailedPrecondition) {
        return absl::InternalError(absl::StrCat("after the failure, a barrier returned ",
                                                later.ok() ? "OK" : later.status().ToString()));
      }
      return absl::OkStatus();
    }));
  }
}

bool HaveGpu() {
  if (!CudaCompiledIn()) {
    WARN("built without --config=cuda: host staging of CUDA tensors not run");
    return false;
  }
  if (CudaDeviceCount() == 0) {
    WARN("no usable GPU (cudaGetDeviceCount failed or found none): host staging SKIPPED, nothing verified");
    return false;
  }
  return true;
}

TEST_CASE("host staging: the conformance suite on CUDA tensors, 1-3 ranks sharing GPU 0", "[collectives][cuda]") {
  if (!HaveGpu()) return;
  for (const NamedTransport& named : AllTransports()) {
    for (int n : {1, 2, 3}) {
      INFO("transport " << named.name << ", " << n << " ranks on cuda:0");
      CHECK_ALL_OK(OnCommunicators(n, named, [](Communicator& comm, RankContext& ctx) -> absl::Status {
        ConformanceOptions options;
        options.device = Device::Cuda(0);
        return RunConformance(comm, ctx.deadline(), options);
      }));
    }
  }
}

TEST_CASE("host staging: mixed CPU and CUDA tensors in one call", "[collectives][cuda]") {
  if (!HaveGpu()) return;
  for (const NamedTransport& named : AllTransports()) {
    INFO("transport " << named.name);
    CHECK_ALL_OK(OnCommunicators(2, named, [](Communicator& comm, RankContext& ctx) -> absl::Status {
      const int64_t count = 3000;
      BRAID_ASSIGN_OR_RETURN(Tensor host_in, Tensor::Empty({count}, DType::kI64));
      Fill<int64_t>(host_in, ctx.rank(), ReduceOp::kSum);
      BRAID_ASSIGN_OR_RETURN(Tensor cuda_in, host_in.Clone(Device::Cuda(0)));
      BRAID_ASSIGN_OR_RETURN(Tensor host_out, Tensor::Zeros({count}, DType::kI64));
      BRAID_ASSIGN_OR_RETURN(Tensor cuda_out, Tensor::Zeros({count}, DType::kI64, Device::Cuda(0)));
      // CUDA in, CPU out; then CPU in, CUDA out.
      BRAID_ASSIGN_OR_RETURN(WorkHandle a, comm.AllReduce(cuda_in, host_out, ReduceOp::kSum));
      BRAID_RETURN_IF_ERROR(a->Wait(ctx.deadline()));
      BRAID_ASSIGN_OR_RETURN(WorkHandle b, comm.AllReduce(host_in, cuda_out, ReduceOp::kSum));
      BRAID_RETURN_IF_ERROR(b->Wait(ctx.deadline()));
      BRAID_ASSIGN_OR_RETURN(Tensor back, cuda_out.Clone(Device::Cpu()));
      for (int64_t i = 0; i < count; ++i) {
        const int64_t want = Reference<int64_t>(comm.size(), static_cast<size_t>(i), ReduceOp::kSum);
        BRAID_RETURN_IF_ERROR(ExpectEqual(host_out.data<int64_t>() + i, want, static_cast<size_t>(i), "cuda -> cpu"));
        BRAID_RETURN_IF_ERROR(ExpectEqual(back.data<int64_t>() + i, want, static_cast<size_t>(i), "cpu -> cuda"));
      }
      return absl::OkStatus();
    }));
  }
}

}  // namespace
}  // namespace braid::testing
