// LocalDeviceLinks (collectives/transport/local_device_link.h) with 2-4
// thread ranks, each with its own stream, on every runtime here: the host
// one in CI, and GPU 0's CUDA runtime where there is a GPU. Checks: a ring
// exchange round after round with the send buffer overwritten on the stream
// right after each GroupEnd (the receiver still gets the old value: the
// sender's stream waits for the copy), a slow producer never read stale,
// mismatched sizes and a peer that never comes.
#include "collectives/transport/local_device_link.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "tests/harness/statuses.h"
#include "tensor/device.h"
#include "tensor/stream.h"
#include "tests/collectives/device/local_device_transport.h"

namespace braid {
namespace {

constexpr size_t kCount = 4096;

// One rank's device buffers and stream.
struct Rank {
  explicit Rank(DeviceRuntime& rt) : rt(rt), stream(rt.NewStream().value()) {
    for (float** b : {&send, &recv, &next}) *b = static_cast<float*>(rt.Allocate(kCount * sizeof(float)).value());
  }
  ~Rank() {
    (void)stream->Synchronize(DeadlineIn(absl::Seconds(10)));
    for (float* b : {send, recv, next}) rt.Free(b);
  }
  void Fill(float* dst, float value) {
    std::vector<float> host(kCount, value);
    REQUIRE(stream->Copy(dst, host.data(), sizeof(float) * kCount).ok());
    REQUIRE(stream->Synchronize(DeadlineIn(absl::Seconds(10))).ok());
  }
  std::vector<float> Read(const float* src) {
    std::vector<float> host(kCount);
    REQUIRE(stream->Copy(host.data(), src, sizeof(float) * kCount).ok());
    REQUIRE(stream->Synchronize(DeadlineIn(absl::Seconds(10))).ok());
    return host;
  }
  DeviceRuntime& rt;
  std::unique_ptr<Stream> stream;
  float* send = nullptr;
  float* recv = nullptr;
  float* next = nullptr;
};

TEST_CASE("LocalDeviceLinks: a ring exchange, the send buffer overwritten right after", "[device_link]") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) {
    for (int n : {2, 3, 4}) {
      INFO(rt->name() << ", " << n << " ranks");
      LocalDeviceLinks links(*rt, n);
      std::vector<std::unique_ptr<Rank>> ranks;
      for (int r = 0; r < n; ++r) {
        ranks.push_back(std::make_unique<Rank>(*rt));
        ranks.back()->Fill(ranks.back()->next, -1.0f);
      }
      constexpr int kRounds = 20;
      const std::vector<absl::Status> statuses = testing::OnThreads(n, [&](int r) -> absl::Status {
        Rank& me = *ranks[static_cast<size_t>(r)];
        DeviceLink& link = links.link(r);
        std::vector<float> value(kCount);
        for (int round = 0; round < kRounds; ++round) {
          // This round's value, written on the stream (as a kernel would).
          for (float& v : value) v = static_cast<float>(1000 * round + r);
          BRAID_RETURN_IF_ERROR(me.stream->Copy(me.send, value.data(), sizeof(float) * kCount));
          BRAID_RETURN_IF_ERROR(me.stream->Synchronize(DeadlineIn(absl::Seconds(10))));
          link.GroupStart();
          BRAID_RETURN_IF_ERROR(link.Send((r + 1) % n, me.send, sizeof(float) * kCount, *me.stream));
          BRAID_RETURN_IF_ERROR(link.Recv((r + n - 1) % n, me.recv, sizeof(float) * kCount, *me.stream));
          BRAID_RETURN_IF_ERROR(link.GroupEnd(DeadlineIn(absl::Seconds(10))));
          // Overwrite the send buffer at once, on the stream, after a pause
          // that lets a receiver that did not wait read the wrong thing.
          BRAID_RETURN_IF_ERROR(me.stream->HostFunc([] { absl::SleepFor(absl::Microseconds(200)); }));
          BRAID_RETURN_IF_ERROR(me.stream->Copy(me.send, me.next, sizeof(float) * kCount));
          std::vector<float> got(kCount);
          BRAID_RETURN_IF_ERROR(me.stream->Copy(got.data(), me.recv, sizeof(float) * kCount));
          BRAID_RETURN_IF_ERROR(me.stream->Synchronize(DeadlineIn(absl::Seconds(10))));
          const float want = static_cast<float>(1000 * round + (r + n - 1) % n);
          for (float v : got) {
            if (v != want) return absl::InternalError(absl::StrCat("rank ", r, " round ", round, ": ", v, ", want ", want));
          }
        }
        return absl::OkStatus();
      });
      REQUIRE_ALL_OK(statuses);
    }
  }
}

TEST_CASE("LocalDeviceLinks: a slow producer is never read stale", "[device_link]") {
  for (DeviceRuntime* rt : testing::TestRuntimes()) {
    INFO(rt->name());
    LocalDeviceLinks links(*rt, 2);
    Rank a(*rt), b(*rt);
    a.Fill(a.send, 1.0f);
    a.Fill(a.next, 9.0f);
    const std::vector<absl::Status> statuses = testing::OnThreads(2, [&](int r) -> absl::Status {
      DeviceLink& link = links.link(r);
      link.GroupStart();
      if (r == 0) {
        // The new value lands late on the sender's stream, before the Send.
        BRAID_RETURN_IF_ERROR(a.stream->HostFunc([] { absl::SleepFor(absl::Milliseconds(100)); }));
        BRAID_RETURN_IF_ERROR(a.stream->Copy(a.send, a.next, sizeof(float) * kCount));
        BRAID_RETURN_IF_ERROR(link.Send(1, a.send, sizeof(float) * kCount, *a.stream));
      } else {
        BRAID_RETURN_IF_ERROR(link.Recv(0, b.recv, sizeof(float) * kCount, *b.stream));
      }
      return link.GroupEnd(DeadlineIn(absl::Seconds(10)));
    });
    REQUIRE_ALL_OK(statuses);
    for (float v : b.Read(b.recv)) REQUIRE(v == 9.0f);
  }
}

TEST_CASE("LocalDeviceLinks: mismatched sizes and a peer that never comes", "[device_link]") {
  DeviceRuntime& rt = DeviceRuntime::Host();
  {
    LocalDeviceLinks links(rt, 2);
    Rank a(rt), b(rt);
    const std::vector<absl::Status> statuses = testing::OnThreads(2, [&](int r) -> absl::Status {
      DeviceLink& link = links.link(r);
      link.GroupStart();
      if (r == 0) BRAID_RETURN_IF_ERROR(link.Send(1, a.send, 64, *a.stream));
      if (r == 1) BRAID_RETURN_IF_ERROR(link.Recv(0, b.recv, 128, *b.stream));
      return link.GroupEnd(DeadlineIn(absl::Seconds(10)));
    });
    REQUIRE(statuses[0].ok());
    REQUIRE(absl::IsInvalidArgument(statuses[1]));
    REQUIRE(absl::StrContains(statuses[1].message(), "rank 0 sent 64 bytes, this rank expected 128"));
  }
  {
    LocalDeviceLinks links(rt, 2);
    Rank b(rt);
    DeviceLink& link = links.link(1);
    link.GroupStart();
    REQUIRE(link.Recv(0, b.recv, 64, *b.stream).ok());
    const absl::Status status = link.GroupEnd(DeadlineIn(absl::Milliseconds(100)));
    REQUIRE(absl::IsDeadlineExceeded(status));
    REQUIRE(absl::StrContains(status.message(), "from rank 0: it never sent them"));
    REQUIRE(absl::IsInvalidArgument(link.Send(1, b.send, 8, *b.stream)));  // itself
  }
}

}  // namespace
}  // namespace braid
