// The reducer's device path (ReducerOptions::device_comm): buckets reduced on
// a communicator that runs on streams, ordered against the trainer's
// compute stream with events, the host never waiting for the device. Thread
// ranks with real process groups (tcp, a store) for the reducer's own small
// collectives, and LocalDeviceTransport (host streams) for the buckets: the
// same code CUDA buckets on NCCL take, with only the link swapped.
//
// The ordering check: rank 1's compute stream is held (a host function)
// through iteration 1, so its all-reduce cannot finish; rank 0 meanwhile
// finalizes iteration 1 and queues iteration 2's gradients into the same
// bucket memory, then lets rank 1 go on. Iteration 1's average comes out
// right on both ranks only if a bucket is never reused before its done event.
//
// The host function waits for rank 0 at most kHold: CUDA forbids a host
// function to wait for other device work, and rank 0's way to iteration 2
// must not need the device (a device-wide synchronization there, as
// cudaFree's, would wait for rank 1's held stream: the first H200 run hung
// with an unbounded latch here). If rank 0 did not get there in time, the
// test fails saying so instead of hanging.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "collectives/transport/local_device_link.h"
#include "runtime/process_group.h"
#include "tensor/device.h"
#include "runtime/reducer.h"
#include "tests/collectives/device/local_device_transport.h"
#include "tests/runtime/device_thread_rank.h"
#include "tests/harness/statuses.h"
#include "tests/harness/subprocess.h"

namespace braid {
namespace {

constexpr int kRanks = 2;
constexpr absl::Duration kHold = absl::Seconds(10);
constexpr int kIterations = 3;
const std::vector<int64_t> kSizes = {3000, 5000, 700};

float Gradient(int rank, int iteration, size_t param) {
  return static_cast<float>((rank + 1) * (iteration + 1)) + static_cast<float>(param);
}
float Average(int iteration, size_t param) {
  float sum = 0;
  for (int r = 0; r < kRanks; ++r) sum += Gradient(r, iteration, param);
  return sum / kRanks;
}

// Rank 0 got to iteration 2 (while rank 1 was held), and whether rank 1's
// hold ran out first.
struct Hold {
  std::atomic<bool> rank0_ahead{false};
  std::atomic<bool> ran_out{false};
};

absl::Status RunRank(DeviceRuntime& rt, int rank, uint16_t port, LocalDeviceLinks& links, Hold& hold, bool fp16) {
  BRAID_ASSIGN_OR_RETURN(testing::DeviceThreadRank ranked,
                         testing::MakeDeviceThreadRank(links, rank, kRanks, port, absl::Seconds(30)));
  std::unique_ptr<ProcessGroup>& group = ranked.group;
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Stream> compute, rt.NewStream());
  std::vector<Tensor> grads;
  for (int64_t n : kSizes) {
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({n}, DType::kF32, rt.device()));
    grads.push_back(t);
  }
  // What backward "computes", per iteration and parameter, and what the
  // trainer reads back after Finalize (both through the compute stream).
  std::vector<std::vector<std::vector<float>>> written(kIterations), read(kIterations);
  ReducerOptions options;
  options.bucket_cap_mb = 0.02;  // several buckets
  options.first_bucket_mb = 0.01;
  options.device_comm = ranked.device_comm.get();
  options.compute_stream = compute.get();
  if (fp16) options.comm_hook = Bf16CompressHook();
  {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(*group, grads, options));
    for (int it = 0; it < kIterations; ++it) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      if (rank == 1 && it == 1) {
        BRAID_RETURN_IF_ERROR(compute->HostFunc([&hold] {
          const absl::Time until = absl::Now() + kHold;
          while (!hold.rank0_ahead.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
          hold.ran_out = !hold.rank0_ahead.load();
        }));
      }
      for (size_t p = kSizes.size(); p-- > 0;) {
        written[it].push_back(std::vector<float>(kSizes[p], Gradient(rank, it, p)));
        BRAID_RETURN_IF_ERROR(compute->Copy(grads[p].data(), written[it].back().data(), grads[p].nbytes()));
        BRAID_RETURN_IF_ERROR(reducer->MarkReady(static_cast<int>(p)));
      }
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      for (size_t p = 0; p < kSizes.size(); ++p) {
        read[it].push_back(std::vector<float>(kSizes[p], -1.0f));
        BRAID_RETURN_IF_ERROR(compute->Copy(read[it].back().data(), grads[p].data(), grads[p].nbytes()));
      }
      // Rank 0 has queued iteration 2's gradients into the buckets: now rank 1 may go on.
      if (rank == 0 && it == 2) hold.rank0_ahead = true;
    }
    BRAID_RETURN_IF_ERROR(compute->Synchronize(DeadlineIn(absl::Seconds(30))));
  }
  for (int it = 0; it < kIterations; ++it) {
    for (size_t p = 0; p < kSizes.size(); ++p) {
      for (size_t k = 0; k < read[it][p].size(); ++k) {
        if (read[it][p][k] != Average(it, p)) {
          return absl::InternalError(absl::StrCat("rank ", rank, " iteration ", it, " parameter ", p, " element ", k,
                                                  ": ", read[it][p][k], ", expected ", Average(it, p)));
        }
      }
    }
  }
  return absl::OkStatus();
}

void Run(DeviceRuntime& rt, bool compress) {
  INFO(rt.name());
  LocalDeviceLinks links(rt, kRanks);
  Hold hold;
  const uint16_t port = UnusedPort();
  std::vector<absl::Status> statuses(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      statuses[r] = RunRank(rt, r, port, links, hold, compress);
      if (r == 0) hold.rank0_ahead = true;  // done (or failed): rank 1 need not wait
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE_ALL_OK(statuses);
  INFO("rank 0 did not queue iteration 2 while rank 1's compute stream was held: something on its way "
       "waits for the device (a device-wide synchronization such as cudaFree's)");
  CHECK_FALSE(hold.ran_out.load());
}


TEST_CASE("reducer on streams: buckets follow the compute stream and are never reused before done") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) Run(*rt, /*compress=*/false);
}

// The values are small integers: bf16 keeps them exact.
TEST_CASE("reducer on streams: the bf16 hook's conversions run on the stream") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) Run(*rt, /*compress=*/true);
}

}  // namespace
}  // namespace braid
