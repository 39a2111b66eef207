// A Communicator over device links (LocalDeviceTransport: thread ranks, the
// host runtime's streams), i.e. the path CUDA tensors take over NCCL with
// only the link swapped: every collective and algorithm, the ordering
// against the caller's stream (a slow producer is never read stale, the
// call never waits for the device, Work::WaitStream orders a consumer),
// deadlines by the watchdog, a rank that never comes, and Abort.
#include <algorithm>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "collectives/transport/local_device_link.h"
#include "tests/collectives/device/local_device_transport.h"
#include "tensor/device.h"
#include "tests/harness/statuses.h"

namespace braid {
namespace {

constexpr absl::Duration kLong = absl::Seconds(30);

// Runs body(rank, communicator, stream, keep) on n threads over one set of
// links. Tensors in `keep` outlive the communicator: after a failure, work
// already queued on the device may still touch them until it drains.
using Body = std::function<absl::Status(int, Communicator&, Stream&, std::vector<Tensor>&)>;
std::vector<absl::Status> RunDeviceRanks(DeviceRuntime& rt, int n, absl::Duration timeout, const Body& body) {
  LocalDeviceLinks links(rt, n);
  return testing::OnThreads(n, [&](int r) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, rt.NewStream());
    CommunicatorOptions options;
    options.timeout = timeout;
    options.stream = stream.get();
    BRAID_ASSIGN_OR_RETURN(
        std::unique_ptr<Communicator> comm,
        Communicator::Create(std::make_unique<testing::LocalDeviceTransport>(links, r, n), options));
    std::vector<Tensor> keep;
    absl::Status status = body(r, *comm, *stream, keep);
    comm.reset();  // drains the device before the stream and `keep` go
    return status;
  });
}

// The device all tensors below are made on (set per runtime, before ranks start).
Device g_device = Device::Cpu();

absl::StatusOr<Tensor> FromHost(const std::vector<float>& values) {
  BRAID_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kF32));
  std::copy(values.begin(), values.end(), host.span<float>().begin());
  if (g_device.is_cpu()) return host;
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(host.shape(), DType::kF32, g_device));
  BRAID_RETURN_IF_ERROR(t.CopyFrom(host));
  return t;
}

absl::StatusOr<Tensor> Filled(size_t count, float value) { return FromHost(std::vector<float>(count, value)); }

absl::Status Expect(const Tensor& t, const std::function<float(size_t)>& want, const std::string& what) {
  BRAID_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(t.shape(), DType::kF32));
  BRAID_RETURN_IF_ERROR(host.CopyFrom(t));
  const auto got = host.span<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " is ", got[i], ", expected ", want(i)));
    }
  }
  return absl::OkStatus();
}

TEST_CASE("device communicator: every collective and algorithm on device streams") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) {
  g_device = rt->device();
  for (int n : {2, 3, 4}) {
    INFO("ranks " << n << " on " << rt->name());
    const auto statuses = RunDeviceRanks(*rt, n, kLong, [n](int r, Communicator& comm, Stream&, std::vector<Tensor>&) -> absl::Status {
      const size_t count = 1000;
      const float mine = static_cast<float>(r + 1);
      const float total = static_cast<float>(n * (n + 1) / 2);
      struct Check {
        WorkHandle work;
        Tensor tensor;
        std::function<float(size_t)> want;
        std::string what;
      };
      std::vector<Check> checks;  // issued back to back, waited for at the end
      for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd}) {
        BRAID_ASSIGN_OR_RETURN(Tensor t, Filled(count, mine));
        BRAID_ASSIGN_OR_RETURN(WorkHandle w, comm.AllReduce(t, ReduceOp::kSum, {.algorithm = a}));
        checks.push_back({w, t, [total](size_t) { return total; }, absl::StrCat("allreduce ", AlgorithmName(a))});
      }
      BRAID_ASSIGN_OR_RETURN(Tensor avg, Filled(count, mine));
      BRAID_ASSIGN_OR_RETURN(WorkHandle wa, comm.AllReduce(avg, ReduceOp::kAvg, {.algorithm = Algorithm::kRing}));
      checks.push_back({wa, avg, [total, n](size_t) { return total / static_cast<float>(n); }, "allreduce avg"});
      BRAID_ASSIGN_OR_RETURN(Tensor rs_in, Filled(count * n, mine));
      BRAID_ASSIGN_OR_RETURN(Tensor rs_out, Filled(count, 0));
      BRAID_ASSIGN_OR_RETURN(WorkHandle wrs, comm.ReduceScatter(rs_in, rs_out, ReduceOp::kSum));
      checks.push_back({wrs, rs_out, [total](size_t) { return total; }, "reducescatter"});
      BRAID_ASSIGN_OR_RETURN(Tensor ag_in, Filled(count, mine));
      BRAID_ASSIGN_OR_RETURN(Tensor ag_out, Filled(count * n, 0));
      BRAID_ASSIGN_OR_RETURN(WorkHandle wag, comm.AllGather(ag_in, ag_out));
      checks.push_back({wag, ag_out, [count](size_t i) { return static_cast<float>(i / count + 1); }, "allgather"});
      BRAID_ASSIGN_OR_RETURN(Tensor bc, Filled(count, r == 1 ? 42.0f : 0.0f));
      BRAID_ASSIGN_OR_RETURN(WorkHandle wbc, comm.Broadcast(bc, 1));
      checks.push_back({wbc, bc, [](size_t) { return 42.0f; }, "broadcast"});
      BRAID_ASSIGN_OR_RETURN(Tensor red_in, Filled(count, mine));
      BRAID_ASSIGN_OR_RETURN(Tensor red_out, Filled(count, -1));
      BRAID_ASSIGN_OR_RETURN(WorkHandle wr, comm.Reduce(red_in, red_out, ReduceOp::kSum, 0));
      checks.push_back({wr, red_out, [total, r](size_t) { return r == 0 ? total : -1.0f; }, "reduce"});
      std::vector<float> blocks(count * n);
      for (size_t i = 0; i < count * n; ++i) blocks[i] = static_cast<float>(r * 100 + i / count);
      BRAID_ASSIGN_OR_RETURN(Tensor a2a_in, FromHost(blocks));
      BRAID_ASSIGN_OR_RETURN(Tensor a2a_out, Filled(count * n, 0));
      BRAID_ASSIGN_OR_RETURN(WorkHandle wa2a, comm.AllToAll(a2a_in, a2a_out));
      checks.push_back({wa2a, a2a_out, [count, r](size_t i) { return static_cast<float>((i / count) * 100 + r); },
                        "alltoall"});
      BRAID_ASSIGN_OR_RETURN(WorkHandle wb, comm.Barrier());
      BRAID_ASSIGN_OR_RETURN(Tensor p2p, Filled(count, r == 0 ? 7.0f : 0.0f));
      WorkHandle wp;
      if (r == 0) {
        BRAID_ASSIGN_OR_RETURN(wp, comm.Send(p2p, 1));
      } else if (r == 1) {
        BRAID_ASSIGN_OR_RETURN(wp, comm.Recv(p2p, 0));
      }
      BRAID_RETURN_IF_ERROR(wb->Wait(DeadlineIn(kLong)));
      if (wp) BRAID_RETURN_IF_ERROR(wp->Wait(DeadlineIn(kLong)));
      if (r <= 1) BRAID_RETURN_IF_ERROR(Expect(p2p, [](size_t) { return 7.0f; }, "send/recv"));
      for (const Check& c : checks) {
        BRAID_RETURN_IF_ERROR(c.work->Wait(DeadlineIn(kLong)));
        BRAID_RETURN_IF_ERROR(Expect(c.tensor, c.want, absl::StrCat("rank ", r, " ", c.what)));
      }
      // What the selector chose, by name, for the device link.
      BRAID_ASSIGN_OR_RETURN(Algorithm big,
                             comm.AlgorithmFor(CollectiveKind::kAllReduce, 1 << 20, DType::kF32, PeerMemory::kFast));
      if (big != Algorithm::kRing) return absl::InternalError("auto large all-reduce on a device link is not ring");
      if (comm.AlgorithmFor(CollectiveKind::kAllReduce, 8, DType::kF32, PeerMemory::kFast,
                            {.algorithm = Algorithm::kWindow})
              .ok()) {
        return absl::InternalError("window accepted on a device link");
      }
      return absl::OkStatus();
    });
    REQUIRE_ALL_OK(statuses);
  }
  }
}

// The producer stream is held by a host function until the call has
// returned: the collective must not read the input before the producer's
// write after it, and the call must not wait for it.
TEST_CASE("device communicator: a slow producer is never read stale; WaitStream orders a consumer") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) {
  g_device = rt->device();
  INFO(rt->name());
  const int n = 3;
  const auto statuses = RunDeviceRanks(*rt, n, kLong, [](int r, Communicator& comm, Stream& producer, std::vector<Tensor>& keep) -> absl::Status {
    const size_t count = 4096;
    BRAID_ASSIGN_OR_RETURN(Tensor t, Filled(count, 0.0f));
    BRAID_ASSIGN_OR_RETURN(Tensor ones, Filled(count, 1.0f));
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    BRAID_RETURN_IF_ERROR(producer.HostFunc([released] { released.wait(); }));
    BRAID_RETURN_IF_ERROR(producer.Copy(t.data(), ones.data(), t.nbytes()));  // queued just before the collective
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(t, ReduceOp::kSum, {.algorithm = Algorithm::kRing}));
    const bool finished_early = work->Test();  // the device is held: the call must have returned without it
    release.set_value();
    if (finished_early) return absl::InternalError(absl::StrCat("rank ", r, ": finished before its input was written"));
    BRAID_ASSIGN_OR_RETURN(DeviceRuntime * device, DeviceRuntime::For(g_device));
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Stream> consumer, device->NewStream());
    BRAID_ASSIGN_OR_RETURN(Tensor seen, Filled(count, -1.0f));
    BRAID_RETURN_IF_ERROR(work->WaitStream(*consumer, DeadlineIn(kLong)));
    BRAID_RETURN_IF_ERROR(consumer->Copy(seen.data(), t.data(), t.nbytes()));
    BRAID_RETURN_IF_ERROR(consumer->Synchronize(DeadlineIn(kLong)));
    BRAID_RETURN_IF_ERROR(Expect(seen, [](size_t) { return 3.0f; }, absl::StrCat("rank ", r, " consumer")));
    return work->Wait(DeadlineIn(kLong));
  });
  REQUIRE_ALL_OK(statuses);
  }
}

// Every rank's producer stream is held by a user's host function that waits
// until that rank's collective (on another stream) is done. CUDA runs every
// stream's host functions on one thread, and so does the host runtime: had
// braid completed its Work from a host function, it would queue behind the
// user's and never run (the first H200 run's reducer_device_test hang).
TEST_CASE("device communicator: a user's blocking host function does not hold braid's completions back") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) {
  g_device = rt->device();
  INFO(rt->name());
  const auto statuses = RunDeviceRanks(*rt, 2, kLong, [rt](int r, Communicator& comm, Stream& producer, std::vector<Tensor>& keep) -> absl::Status {
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    BRAID_RETURN_IF_ERROR(producer.HostFunc([released] { released.wait(); }));
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Stream> other, rt->NewStream());
    BRAID_ASSIGN_OR_RETURN(Tensor t, Filled(256, static_cast<float>(r + 1)));
    keep.push_back(t);
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(t, ReduceOp::kSum, {.stream = other.get()}));
    const absl::Status waited = work->Wait(DeadlineIn(absl::Seconds(10)));
    release.set_value();
    BRAID_RETURN_IF_ERROR(Annotate(waited, absl::StrCat("rank ", r, ": its Work, with the host-function thread held")));
    BRAID_RETURN_IF_ERROR(other->Synchronize(DeadlineIn(kLong)));
    return Expect(t, [](size_t) { return 3.0f; }, absl::StrCat("rank ", r));
  });
  REQUIRE_ALL_OK(statuses);
  }
}

TEST_CASE("device communicator: a collective the device never finishes fails at its deadline") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) {
  g_device = rt->device();
  INFO(rt->name());
  const auto statuses = RunDeviceRanks(*rt, 2, absl::Milliseconds(300), [](int r, Communicator& comm, Stream& producer, std::vector<Tensor>& keep) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(Tensor t, Filled(64, 1.0f));
    keep.push_back(t);
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    BRAID_RETURN_IF_ERROR(producer.HostFunc([released] { released.wait(); }));  // a kernel that hangs
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(t, ReduceOp::kSum));
    const absl::Status status = work->Wait(DeadlineIn(kLong));
    BRAID_ASSIGN_OR_RETURN(Tensor again, Filled(64, 1.0f));
    const absl::StatusOr<WorkHandle> later = comm.AllReduce(again, ReduceOp::kSum);
    release.set_value();
    if (status.code() != absl::StatusCode::kDeadlineExceeded && status.code() != absl::StatusCode::kAborted) {
      return absl::InternalError(absl::StrCat("rank ", r, ": expected the deadline, got ", status.ToString()));
    }
    // Each rank's own watchdog, or the peer's abort reaching it first.
    if (!absl::StrContains(status.message(), "allreduce seq 1")) {
      return absl::InternalError(absl::StrCat("rank ", r, ": the error does not name the collective: ", status.ToString()));
    }
    if (later.ok()) return absl::InternalError("a call after the failure was accepted");
    return absl::OkStatus();
  });
  REQUIRE_ALL_OK(statuses);
  }
}

TEST_CASE("device communicator: a rank that never comes is named; Abort fails what is queued") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) {
  g_device = rt->device();
  INFO(rt->name());
  const auto statuses = RunDeviceRanks(*rt, 2, absl::Milliseconds(300), [](int r, Communicator& comm, Stream&, std::vector<Tensor>&) -> absl::Status {
    if (r == 1) return absl::OkStatus();  // never calls
    BRAID_ASSIGN_OR_RETURN(Tensor t, Filled(64, 1.0f));
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(t, ReduceOp::kSum));
    const absl::Status status = work->Wait(DeadlineIn(kLong));
    if (status.ok() || !absl::StrContains(status.message(), "rank 1")) {
      return absl::InternalError(absl::StrCat("expected an error naming rank 1, got ", status.ToString()));
    }
    return absl::OkStatus();
  });
  REQUIRE_ALL_OK(statuses);

  const auto aborted = RunDeviceRanks(*rt, 2, kLong, [](int r, Communicator& comm, Stream& producer, std::vector<Tensor>& keep) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(Tensor t, Filled(64, 1.0f));
    keep.push_back(t);
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    BRAID_RETURN_IF_ERROR(producer.HostFunc([released] { released.wait(); }));
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(t, ReduceOp::kSum));
    comm.Abort(absl::CancelledError("test abort"));
    const absl::Status status = work->Wait(DeadlineIn(kLong));
    release.set_value();
    if (status.ok()) return absl::InternalError(absl::StrCat("rank ", r, ": the aborted collective succeeded"));
    return absl::OkStatus();
  });
  REQUIRE_ALL_OK(aborted);
  }
}

}  // namespace
}  // namespace braid
