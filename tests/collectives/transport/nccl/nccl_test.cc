// The NCCL transport (collectives/transport/nccl) through the Communicator,
// on CUDA device memory, against exact host references computed with
// braid's own host kernels. Ranks are threads of this process, one GPU each
// (NCCL refuses two ranks on one GPU): world size 1 always, 2 when the
// machine has two GPUs.
//
// Built only with --config=cuda. Without a GPU (the development and CI
// machines) every GPU case says so with WARN and returns: passing here means
// "compiled, linked, skipped", never "verified". tools/gpu_check.sh runs this
// binary on a GPU machine.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "collectives/transport/nccl/nccl_transport.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/statuses.h"

namespace braid {
namespace {

using testing::HarnessBootstrap;
using testing::RankContext;
using testing::RankMode;
using testing::RunRanks;

int GpuCount() {
  if (!CudaCompiledIn()) {
    WARN("built without --config=cuda: NCCL tests not run");
    return 0;
  }
  const int count = CudaDeviceCount();
  if (count == 0) WARN("no usable GPU (cudaGetDeviceCount failed or found none): NCCL tests SKIPPED, nothing verified");
  return count;
}

// Rank r's input: small integers (1..10), so every dtype and op, prod of two
// ranks included, is exact and the reference is bit-exact.
Tensor HostInput(DType dtype, int64_t count, int rank, int salt) {
  Tensor t = *Tensor::Empty({count}, dtype);
  DispatchDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < count; ++i) {
      const float v = static_cast<float>(rank + 1 + (i * 7 + salt) % 9);
      if constexpr (std::is_same_v<T, Half>)
        p[i] = FloatToHalf(v);
      else if constexpr (std::is_same_v<T, BFloat16>)
        p[i] = FloatToBFloat16(v);
      else
        p[i] = static_cast<T>(v);
    }
  });
  return t;
}

// op over ranks 0..n-1's HostInput, in rank order; avg divides once.
Tensor Reference(DType dtype, int64_t count, int n, int salt, ReduceOp op) {
  Tensor acc = HostInput(dtype, count, 0, salt);
  const ReduceOp fold = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  for (int r = 1; r < n; ++r) BRAID_CHECK(ReduceInto(acc, HostInput(dtype, count, r, salt), fold).ok());
  if (op == ReduceOp::kAvg) BRAID_CHECK(DivideBy(acc, n).ok());
  return acc;
}

absl::StatusOr<Tensor> ToDevice(const Tensor& host, int device) { return host.Clone(Device::Cuda(device)); }

// A device tensor filled with 0xA5 bytes, so a missing write shows.
absl::StatusOr<Tensor> Poisoned(DType dtype, int64_t count, int device) {
  Tensor host = *Tensor::Empty({count}, dtype);
  std::memset(host.data(), 0xA5, host.nbytes());
  return host.Clone(Device::Cuda(device));
}

absl::Status ExpectEqual(const Tensor& device_result, const Tensor& expected, const std::string& what) {
  BRAID_ASSIGN_OR_RETURN(Tensor got, device_result.Clone(Device::Cpu()));
  if (got.nbytes() != expected.nbytes() || std::memcmp(got.data(), expected.data(), got.nbytes()) != 0) {
    return absl::InternalError(absl::StrCat(what, ": result differs from the host reference"));
  }
  return absl::OkStatus();
}

absl::Status Run(const absl::StatusOr<WorkHandle>& work, const std::string& what) {
  if (!work.ok()) return Annotate(work.status(), what);
  return Annotate((*work)->Wait(), what);
}

using RankFn = std::function<absl::Status(Communicator& comm, int rank, int n)>;

// Runs `fn` on n thread ranks, rank r on GPU r, each with an nccl communicator.
std::vector<absl::Status> RunNccl(int n, RankFn fn, absl::Duration timeout = absl::Seconds(10)) {
  testing::RunRanksOptions options;
  options.timeout = absl::Seconds(120);
  return RunRanks(
      n, RankMode::kThreads,
      [fn, timeout](RankContext& ctx) -> absl::Status {
        HarnessBootstrap bootstrap(ctx);
        BRAID_ASSIGN_OR_RETURN(auto transport, NcclTransport::Create(bootstrap, ctx.rank(), ctx.deadline()));
        CommunicatorOptions options;
        options.timeout = timeout;
        BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), options));
        if (std::string(comm->transport_name()) != "nccl" || !comm->has_native()) {
          return absl::InternalError("the communicator does not see an nccl transport with native collectives");
        }
        return fn(*comm, ctx.rank(), ctx.size());
      },
      options);
}

std::vector<int> WorldSizes(int gpus) {
  std::vector<int> sizes = {1};
  if (gpus >= 2)
    sizes.push_back(2);
  else
    WARN("one GPU: NCCL tests at world size 1 only (multi-rank NCCL needs a GPU per rank)");
  return sizes;
}

TEST_CASE("nccl: all-reduce, every dtype and op, in and out of place, exact", "[nccl][cuda]") {
  const int gpus = GpuCount();
  if (gpus == 0) return;
  for (int n : WorldSizes(gpus)) {
    CHECK_ALL_OK(RunNccl(n, [](Communicator& comm, int rank, int n) -> absl::Status {
      int salt = 0;
      for (DType dtype : kAllDTypes) {
        for (ReduceOp op : kAllReduceOps) {
          for (int64_t count : {int64_t{1}, int64_t{4097}}) {
            ++salt;
            const std::string what = absl::StrCat("allreduce ", DTypeName(dtype), " ", ReduceOpName(op), " count ",
                                                  count, " at ", n, " ranks");
            const Tensor expected = Reference(dtype, count, n, salt, op);
            BRAID_ASSIGN_OR_RETURN(Tensor in, ToDevice(HostInput(dtype, count, rank, salt), rank));
            BRAID_ASSIGN_OR_RETURN(Tensor out, Poisoned(dtype, count, rank));
            BRAID_RETURN_IF_ERROR(Run(comm.AllReduce(in, out, op), what));
            BRAID_RETURN_IF_ERROR(ExpectEqual(out, expected, what));
            BRAID_RETURN_IF_ERROR(Run(comm.AllReduce(in, op), what + " in place"));
            BRAID_RETURN_IF_ERROR(ExpectEqual(in, expected, what + " in place"));
          }
        }
      }
      return absl::OkStatus();
    }));
  }
}

TEST_CASE("nccl: reduce-scatter, all-gather, broadcast, reduce, all-to-all, barrier, exact", "[nccl][cuda]") {
  const int gpus = GpuCount();
  if (gpus == 0) return;
  for (int n : WorldSizes(gpus)) {
    CHECK_ALL_OK(RunNccl(n, [](Communicator& comm, int rank, int n) -> absl::Status {
      const int64_t block = 1000;
      for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
          const std::string what = absl::StrCat("reducescatter ", DTypeName(dtype), " ", ReduceOpName(op));
          const Tensor full = Reference(dtype, block * n, n, 3, op);
          const Tensor expected = *(*full.Slice(0, rank * block, (rank + 1) * block)).Clone();
          BRAID_ASSIGN_OR_RETURN(Tensor in, ToDevice(HostInput(dtype, block * n, rank, 3), rank));
          BRAID_ASSIGN_OR_RETURN(Tensor out, Poisoned(dtype, block, rank));
          BRAID_RETURN_IF_ERROR(Run(comm.ReduceScatter(in, out, op), what));
          BRAID_RETURN_IF_ERROR(ExpectEqual(out, expected, what));
        }
      }
      {
        // all-gather: block r is rank r's input.
        Tensor expected = *Tensor::Empty({block * n}, DType::kF32);
        for (int r = 0; r < n; ++r) {
          BRAID_RETURN_IF_ERROR(
              (*expected.Slice(0, r * block, (r + 1) * block)).CopyFrom(HostInput(DType::kF32, block, r, 5)));
        }
        BRAID_ASSIGN_OR_RETURN(Tensor in, ToDevice(HostInput(DType::kF32, block, rank, 5), rank));
        BRAID_ASSIGN_OR_RETURN(Tensor out, Poisoned(DType::kF32, block * n, rank));
        BRAID_RETURN_IF_ERROR(Run(comm.AllGather(in, out), "allgather"));
        BRAID_RETURN_IF_ERROR(ExpectEqual(out, expected, "allgather"));
      }
      for (int root : {0, n - 1}) {
        const std::string what = absl::StrCat("broadcast from root ", root);
        BRAID_ASSIGN_OR_RETURN(Tensor buffer, rank == root ? ToDevice(HostInput(DType::kF64, block, root, 7), rank)
                                                           : Poisoned(DType::kF64, block, rank));
        BRAID_RETURN_IF_ERROR(Run(comm.Broadcast(buffer, root), what));
        BRAID_RETURN_IF_ERROR(ExpectEqual(buffer, HostInput(DType::kF64, block, root, 7), what));
      }
      {
        const int root = n - 1;
        const Tensor expected = Reference(DType::kI64, block, n, 9, ReduceOp::kSum);
        BRAID_ASSIGN_OR_RETURN(Tensor in, ToDevice(HostInput(DType::kI64, block, rank, 9), rank));
        BRAID_ASSIGN_OR_RETURN(Tensor out, Poisoned(DType::kI64, block, rank));
        BRAID_RETURN_IF_ERROR(Run(comm.Reduce(in, out, ReduceOp::kSum, root), "reduce"));
        if (rank == root) BRAID_RETURN_IF_ERROR(ExpectEqual(out, expected, "reduce at the root"));
      }
      {
        // all-to-all: block p of rank r's output is block r of rank p's input.
        Tensor expected = *Tensor::Empty({block * n}, DType::kU8);
        for (int p = 0; p < n; ++p) {
          const Tensor theirs = HostInput(DType::kU8, block * n, p, 11);
          BRAID_RETURN_IF_ERROR((*expected.Slice(0, p * block, (p + 1) * block))
                                    .CopyFrom(*theirs.Slice(0, rank * block, (rank + 1) * block)));
        }
        BRAID_ASSIGN_OR_RETURN(Tensor in, ToDevice(HostInput(DType::kU8, block * n, rank, 11), rank));
        BRAID_ASSIGN_OR_RETURN(Tensor out, Poisoned(DType::kU8, block * n, rank));
        BRAID_RETURN_IF_ERROR(Run(comm.AllToAll(in, out), "alltoall"));
        BRAID_RETURN_IF_ERROR(ExpectEqual(out, expected, "alltoall"));
      }
      return Run(comm.Barrier(), "barrier");
    }));
  }
}

TEST_CASE("nccl: send and receive between two GPUs", "[nccl][cuda]") {
  const int gpus = GpuCount();
  if (gpus == 0) return;
  if (gpus < 2) {
    WARN("one GPU: NCCL send/recv needs two ranks on two GPUs; not run");
    return;
  }
  CHECK_ALL_OK(RunNccl(2, [](Communicator& comm, int rank, int) -> absl::Status {
    const Tensor sent = HostInput(DType::kF32, 12345, 0, 13);
    if (rank == 0) {
      BRAID_ASSIGN_OR_RETURN(Tensor t, ToDevice(sent, rank));
      return Run(comm.Send(t, 1), "send");
    }
    BRAID_ASSIGN_OR_RETURN(Tensor t, Poisoned(DType::kF32, 12345, rank));
    BRAID_RETURN_IF_ERROR(Run(comm.Recv(t, 0), "recv"));
    return ExpectEqual(t, sent, "recv");
  }));
}

TEST_CASE("nccl: CPU tensors on an nccl communicator are refused", "[nccl][cuda]") {
  if (GpuCount() == 0) return;
  CHECK_ALL_OK(RunNccl(1, [](Communicator& comm, int, int) -> absl::Status {
    Tensor host = HostInput(DType::kF32, 8, 0, 0);
    absl::StatusOr<WorkHandle> work = comm.AllReduce(host, ReduceOp::kSum);
    if (work.ok() || work.status().code() != absl::StatusCode::kInvalidArgument ||
        !(absl::StrContains(work.status().message(), "takes tensors on cuda:") ||
          absl::StrContains(work.status().message(), "takes CUDA tensors"))) {
      return absl::InternalError(absl::StrCat("expected kInvalidArgument naming the CUDA device it takes, got ",
                                              work.ok() ? "OK" : work.status().ToString()));
    }
    return absl::OkStatus();
  }));
}

// A bootstrap that claims a group of `size` where only rank 0 exists: NCCL's
// init waits for ranks that never come.
class LonelyBootstrap final : public Bootstrap {
 public:
  explicit LonelyBootstrap(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline) override {
    std::vector<std::string> all(static_cast<size_t>(size_));
    all[0] = std::string(mine);
    return all;
  }

 private:
  int size_;
};

TEST_CASE("nccl: init with a rank missing fails at its deadline (ncclCommAbort), never hangs", "[nccl][cuda]") {
  if (GpuCount() == 0) return;
  LonelyBootstrap bootstrap(2);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<NcclTransport>> transport =
      NcclTransport::Create(bootstrap, 0, DeadlineIn(absl::Seconds(3)));
  const absl::Duration took = absl::Now() - start;
  INFO(transport.status());
  CHECK(transport.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(took < absl::Seconds(20));
}

TEST_CASE("nccl: a rank that never joins fails the collective at its deadline; later calls fail fast", "[nccl][cuda]") {
  const int gpus = GpuCount();
  if (gpus == 0) return;
  if (gpus < 2) {
    WARN("one GPU: the missing-peer collective deadline needs two GPUs; not run (init deadline is tested)");
    return;
  }
  const std::vector<absl::Status> statuses = RunNccl(
      2,
      [](Communicator& comm, int rank, int) -> absl::Status {
        if (rank == 1) return absl::OkStatus();  // never joins; its communicator is destroyed
        BRAID_ASSIGN_OR_RETURN(Tensor t, ToDevice(HostInput(DType::kF32, 1024, 0, 0), 0));
        const absl::Time start = absl::Now();
        const absl::Status first = Run(comm.AllReduce(t, ReduceOp::kSum), "allreduce without rank 1");
        const absl::Duration took = absl::Now() - start;
        if (first.ok()) return absl::InternalError("an all-reduce without rank 1 succeeded");
        if (took > absl::Seconds(30))
          return absl::InternalError(absl::StrCat("the failure took ", absl::FormatDuration(took)));
        const absl::Status later = Run(comm.AllReduce(t, ReduceOp::kSum), "later allreduce");
        if (later.ok() || later.code() != absl::StatusCode::kFailedPrecondition) {
          return absl::InternalError(absl::StrCat("a later call after the failure returned ", later.ToString()));
        }
        return absl::OkStatus();
      },
      absl::Seconds(3));
  CHECK_ALL_OK(statuses);
}

TEST_CASE("nccl: ranks issuing different collectives get a clear error naming both", "[nccl][cuda]") {
  const int gpus = GpuCount();
  if (gpus < 2) {
    if (gpus == 1) WARN("one GPU: the mismatch check needs two ranks; not run");
    return;
  }
  const std::vector<absl::Status> statuses = RunNccl(2, [](Communicator& comm, int rank, int) -> absl::Status {
    const int64_t count = rank == 0 ? 10 : 20;
    BRAID_ASSIGN_OR_RETURN(Tensor t, ToDevice(HostInput(DType::kF32, count, rank, 0), rank));
    return Run(comm.AllReduce(t, ReduceOp::kSum), "mismatched allreduce");
  });
  for (const absl::Status& status : statuses) {
    INFO(status);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "mismatched collective"));
  }
}

}  // namespace
}  // namespace braid
