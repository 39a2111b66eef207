// tensor/stream.h on every runtime this machine has: the host one always, the
// CUDA one of GPU 0 where there is a GPU (tools/gpu_check.sh runs this binary
// there). The same checks for both: ordering within a stream, ordering across
// streams by events (a slow producer is never read stale, and without the
// wait it is: the control that shows the check can fail), event queries,
// deadlines, and destruction finishing queued work.
#include "tensor/stream.h"

#include <atomic>
#include <future>
#include <thread>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "tensor/device.h"

namespace braid {
namespace {

std::vector<DeviceRuntime*> Runtimes() {
  std::vector<DeviceRuntime*> runtimes = {&DeviceRuntime::Host()};
  if (CudaDeviceCount() > 0) {
    absl::StatusOr<DeviceRuntime*> cuda = DeviceRuntime::For(Device::Cuda(0));
    REQUIRE(cuda.ok());
    runtimes.push_back(*cuda);
  }
  return runtimes;
}

// A buffer of `n` floats in the runtime's memory.
struct Buffer {
  Buffer(DeviceRuntime& rt, size_t n) : rt(rt), n(n) {
    absl::StatusOr<void*> memory = rt.Allocate(n * sizeof(float));
    REQUIRE(memory.ok());
    data = static_cast<float*>(*memory);
  }
  ~Buffer() { rt.Free(data); }
  // Host copies through `stream` (synchronized).
  void Fill(Stream& stream, float value) {
    std::vector<float> host(n, value);
    REQUIRE(stream.Copy(data, host.data(), n * sizeof(float)).ok());
    REQUIRE(stream.Synchronize(DeadlineIn(absl::Seconds(10))).ok());
  }
  std::vector<float> Read(Stream& stream) {
    std::vector<float> host(n);
    REQUIRE(stream.Copy(host.data(), data, n * sizeof(float)).ok());
    REQUIRE(stream.Synchronize(DeadlineIn(absl::Seconds(10))).ok());
    return host;
  }
  DeviceRuntime& rt;
  size_t n;
  float* data = nullptr;
};

std::unique_ptr<Stream> NewStream(DeviceRuntime& rt) {
  absl::StatusOr<std::unique_ptr<Stream>> stream = rt.NewStream();
  REQUIRE(stream.ok());
  return std::move(*stream);
}

std::unique_ptr<Event> NewEvent(DeviceRuntime& rt) {
  absl::StatusOr<std::unique_ptr<Event>> event = rt.NewEvent();
  REQUIRE(event.ok());
  return std::move(*event);
}

TEST_CASE("Stream: work on one stream runs in order", "[stream]") {
  for (DeviceRuntime* rt : Runtimes()) {
    INFO(rt->name());
    auto stream = NewStream(*rt);
    Buffer a(*rt, 1 << 16), b(*rt, 1 << 16);
    a.Fill(*stream, 1.0f);
    b.Fill(*stream, 2.0f);
    // a = a + b, three times, then a /= 7, then b = a: all queued at once.
    for (int i = 0; i < 3; ++i) REQUIRE(stream->Reduce(DType::kF32, ReduceOp::kSum, a.data, a.data, b.data, a.n).ok());
    REQUIRE(stream->Divide(DType::kF32, a.data, a.n, 7).ok());
    REQUIRE(stream->Copy(b.data, a.data, a.n * sizeof(float)).ok());
    const std::vector<float> out = b.Read(*stream);
    for (float v : out) REQUIRE(v == 1.0f);
  }
}

// The producer queues a write that lands late (a host function that sleeps
// first, as a slow kernel would); the consumer copies the buffer out.
std::vector<float> ProduceThenConsume(DeviceRuntime& rt, bool wait_for_producer) {
  auto producer = NewStream(rt);
  auto consumer = NewStream(rt);
  auto ready = NewEvent(rt);
  Buffer data(rt, 1024), out(rt, 1024), fresh(rt, 1024);
  data.Fill(*producer, 1.0f);  // the stale value
  fresh.Fill(*producer, 5.0f);
  REQUIRE(producer->HostFunc([] { absl::SleepFor(absl::Milliseconds(200)); }).ok());
  REQUIRE(producer->Copy(data.data, fresh.data, 1024 * sizeof(float)).ok());
  REQUIRE(producer->Record(*ready).ok());
  if (wait_for_producer) REQUIRE(consumer->WaitEvent(*ready).ok());
  REQUIRE(consumer->Copy(out.data, data.data, 1024 * sizeof(float)).ok());
  std::vector<float> result = out.Read(*consumer);
  REQUIRE(producer->Synchronize(DeadlineIn(absl::Seconds(10))).ok());
  return result;
}

TEST_CASE("Stream: a consumer that waits on the producer's event never reads stale input", "[stream]") {
  for (DeviceRuntime* rt : Runtimes()) {
    INFO(rt->name());
    for (float v : ProduceThenConsume(*rt, /*wait_for_producer=*/true)) REQUIRE(v == 5.0f);
  }
}

TEST_CASE("Stream: without the wait the consumer reads stale input (the control)", "[stream]") {
  for (DeviceRuntime* rt : Runtimes()) {
    INFO(rt->name());
    const std::vector<float> out = ProduceThenConsume(*rt, /*wait_for_producer=*/false);
    REQUIRE(out[0] == 1.0f);
  }
}

TEST_CASE("Stream: events query, synchronize, and time out", "[stream]") {
  for (DeviceRuntime* rt : Runtimes()) {
    INFO(rt->name());
    auto stream = NewStream(*rt);
    auto event = NewEvent(*rt);
    REQUIRE(*event->Query());  // never recorded: complete
    std::atomic<bool> ran{false};
    REQUIRE(stream->HostFunc([&ran] {
                    absl::SleepFor(absl::Milliseconds(300));
                    ran = true;
                  }).ok());
    REQUIRE(stream->Record(*event).ok());
    REQUIRE_FALSE(*event->Query());
    const absl::Status early = event->Synchronize(DeadlineIn(absl::Milliseconds(20)));
    REQUIRE(absl::IsDeadlineExceeded(early));
    REQUIRE(absl::IsDeadlineExceeded(stream->Synchronize(DeadlineIn(absl::Milliseconds(20)))));
    REQUIRE(event->Synchronize(DeadlineIn(absl::Seconds(10))).ok());
    REQUIRE(ran);
    REQUIRE(*event->Query());
  }
}

TEST_CASE("Stream: a chain of streams ordered by events", "[stream]") {
  for (DeviceRuntime* rt : Runtimes()) {
    INFO(rt->name());
    std::vector<std::unique_ptr<Stream>> streams;
    std::vector<std::unique_ptr<Event>> events;
    for (int i = 0; i < 4; ++i) {
      streams.push_back(NewStream(*rt));
      events.push_back(NewEvent(*rt));
    }
    Buffer acc(*rt, 4096), one(*rt, 4096);
    acc.Fill(*streams[0], 0.0f);
    one.Fill(*streams[0], 1.0f);
    // Stream i adds one after stream i-1 has: each waits for the previous.
    for (int i = 0; i < 4; ++i) {
      if (i > 0) REQUIRE(streams[i]->WaitEvent(*events[i - 1]).ok());
      REQUIRE(streams[i]->HostFunc([] { absl::SleepFor(absl::Milliseconds(10)); }).ok());
      REQUIRE(streams[i]->Reduce(DType::kF32, ReduceOp::kSum, acc.data, acc.data, one.data, acc.n).ok());
      REQUIRE(streams[i]->Record(*events[i]).ok());
    }
    REQUIRE(events[3]->Synchronize(DeadlineIn(absl::Seconds(10))).ok());
    for (float v : acc.Read(*streams[3])) REQUIRE(v == 4.0f);
  }
}

TEST_CASE("Stream: destroying a stream finishes what was queued on it", "[stream]") {
  for (DeviceRuntime* rt : Runtimes()) {
    INFO(rt->name());
    std::atomic<int> done{0};
    {
      auto stream = NewStream(*rt);
      for (int i = 0; i < 5; ++i) {
        REQUIRE(stream->HostFunc([&done] {
                        absl::SleepFor(absl::Milliseconds(5));
                        ++done;
                      }).ok());
      }
    }
    REQUIRE(done == 5);
  }
}

// CUDA may run the host functions of independent streams one after another on
// one thread; the host runtime always does, so that a host function waiting
// for other device work deadlocks in CI as it can on a GPU (the first H200
// run: reducer_device_test). Without that, b's function runs at once.
TEST_CASE("Stream: host functions of every stream run on one thread, one at a time", "[stream]") {
  DeviceRuntime& rt = DeviceRuntime::Host();
  auto a = NewStream(rt);
  auto b = NewStream(rt);
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  std::thread::id a_thread, b_thread;
  std::atomic<bool> b_ran{false};
  std::promise<void> a_started;
  REQUIRE(a->HostFunc([&] {
              a_thread = std::this_thread::get_id();
              a_started.set_value();
              opened.wait();
            }).ok());
  a_started.get_future().wait();  // a's function holds the thread before b's is queued
  REQUIRE(b->HostFunc([&] {
              b_thread = std::this_thread::get_id();
              b_ran = true;
            }).ok());
  auto after_b = NewEvent(rt);
  REQUIRE(b->Record(*after_b).ok());
  absl::SleepFor(absl::Milliseconds(200));
  CHECK_FALSE(b_ran.load());  // behind a's, which holds the one thread
  CHECK_FALSE(*after_b->Query());  // and b's later work waits for its own function
  open.set_value();
  REQUIRE(b->Synchronize(DeadlineIn(absl::Seconds(10))).ok());
  REQUIRE(a->Synchronize(DeadlineIn(absl::Seconds(10))).ok());
  CHECK(b_ran.load());
  CHECK(a_thread == b_thread);
}

TEST_CASE("Stream: a host function that calls the device interface fails, and so does its stream", "[stream]") {
  DeviceRuntime& rt = DeviceRuntime::Host();
  auto stream = NewStream(rt);
  auto other = NewStream(rt);
  auto event = NewEvent(rt);
  absl::Status inside_record, inside_query;
  REQUIRE(stream->HostFunc([&] {
                  inside_record = other->Record(*event);
                  inside_query = event->Query().status();
                }).ok());
  const absl::Status synced = stream->Synchronize(DeadlineIn(absl::Seconds(10)));
  INFO(synced << " / " << inside_record << " / " << inside_query);
  CHECK(inside_record.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(inside_record.message(), "a host function called Stream::Record"));
  CHECK(inside_query.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(synced.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(synced.message(), "CUDA forbids device calls in host functions"));
  CHECK(other->Synchronize(DeadlineIn(absl::Seconds(10))).ok());  // the call never reached it
  // The same calls from the host are fine.
  CHECK(other->Record(*event).ok());
  CHECK(event->Synchronize(DeadlineIn(absl::Seconds(10))).ok());
}

TEST_CASE("DeviceRuntime: CUDA is refused clearly without it", "[stream]") {
  if (CudaDeviceCount() > 0) return;
  absl::StatusOr<DeviceRuntime*> cuda = DeviceRuntime::For(Device::Cuda(0));
  REQUIRE(absl::IsFailedPrecondition(cuda.status()));
  REQUIRE(std::string(cuda.status().message()).find("cuda:0") != std::string::npos);
  REQUIRE(DeviceRuntime::For(Device::Cpu()).value() == &DeviceRuntime::Host());
}

}  // namespace
}  // namespace braid
