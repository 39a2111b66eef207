// The transport conformance suite: written once, run over every transport,
// with real processes.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/bytes.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "tests/collectives/test_bootstrap.h"
#include "tests/collectives/transport_factories.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/statuses.h"

namespace braid::testing {
namespace {

FrameHeader Frame(uint64_t seq, uint32_t tag, uint64_t count) {
  FrameHeader header;
  header.kind = CollectiveKind::kSendRecv;
  header.seq = seq;
  header.tag = tag;
  header.count = count;
  header.dtype = 0;
  return header;
}

std::vector<std::byte> Pattern(size_t bytes, int from, int salt) {
  std::vector<std::byte> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>((i * 131 + static_cast<size_t>(from) * 7 + salt) & 0xff);
  return data;
}

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

TEST_CASE("Transport: every pair exchanges frames of every size at once, in order", "[transport]") {
  for (const NamedTransport& transport_kind : AllTransports()) {
    for (int n : {2, 3, 4}) {
      INFO(transport_kind.name << " with " << n << " ranks");
      auto statuses = RunRanks(n, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
        HarnessBootstrap bootstrap(context);
        BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
        const int me = context.rank();
        // Both directions at once with large messages: must not deadlock.
        const size_t sizes[] = {0, 1, 7, 4096, (size_t{1} << 20) + 3, size_t{16} << 20};
        uint32_t tag = 0;
        for (size_t bytes : sizes) {
          std::vector<std::vector<std::byte>> outgoing, incoming;
          std::vector<OpId> ops;
          outgoing.reserve(n);
          incoming.reserve(n);
          for (int peer = 0; peer < n; ++peer) {
            outgoing.push_back(Pattern(bytes, me, static_cast<int>(tag)));
            incoming.emplace_back(bytes);
          }
          for (int peer = 0; peer < n; ++peer) {
            if (peer == me) continue;
            BRAID_ASSIGN_OR_RETURN(OpId s, transport->PostSend(peer, Frame(1, tag, bytes), outgoing[peer]));
            BRAID_ASSIGN_OR_RETURN(OpId r, transport->PostRecv(peer, Frame(1, tag, bytes), absl::MakeSpan(incoming[peer])));
            ops.push_back(s);
            ops.push_back(r);
          }
          BRAID_RETURN_IF_ERROR(transport->Wait(ops, context.deadline()));
          for (int peer = 0; peer < n; ++peer) {
            if (peer == me) continue;
            BRAID_RETURN_IF_ERROR(Expect(incoming[peer] == Pattern(bytes, peer, static_cast<int>(tag)),
                                         absl::StrCat("payload from ", peer, " of ", bytes, " bytes differs")));
          }
          ++tag;
        }
        // Many small frames queued back to back arrive in order.
        const int kMessages = 500;
        const int right = (me + 1) % n, left = (me + n - 1) % n;
        std::vector<uint32_t> sent(kMessages), got(kMessages);
        std::vector<OpId> ops;
        for (int i = 0; i < kMessages; ++i) {
          sent[i] = static_cast<uint32_t>(me * 100000 + i);
          BRAID_ASSIGN_OR_RETURN(OpId r, transport->PostRecv(left, Frame(2, i, 1), AsWritableBytes(got[i])));
          BRAID_ASSIGN_OR_RETURN(OpId s, transport->PostSend(right, Frame(2, i, 1), AsBytes(sent[i])));
          ops.push_back(r);
          ops.push_back(s);
        }
        BRAID_RETURN_IF_ERROR(transport->Wait(ops, context.deadline()));
        for (int i = 0; i < kMessages; ++i) {
          BRAID_RETURN_IF_ERROR(Expect(got[i] == static_cast<uint32_t>(left * 100000 + i), "out of order"));
        }
        return context.Barrier();
      });
      REQUIRE_ALL_OK(statuses);
    }
  }
}

TEST_CASE("Transport: a mismatched frame fails with both sides' descriptions", "[transport]") {
  for (const NamedTransport& transport_kind : AllTransports()) {
    INFO(transport_kind.name);
    auto statuses = RunRanks(2, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
      HarnessBootstrap bootstrap(context);
      BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
      const int peer = 1 - context.rank();
      // Rank 0 sends 100 elements, rank 1 expects 200: each sees the other's frame differ.
      const uint64_t count = context.rank() == 0 ? 100 : 200;
      std::vector<std::byte> out(count), in(count);
      BRAID_ASSIGN_OR_RETURN(OpId s, transport->PostSend(peer, Frame(5, 0, count), out));
      BRAID_ASSIGN_OR_RETURN(OpId r, transport->PostRecv(peer, Frame(5, 0, count), absl::MakeSpan(in)));
      absl::Status status = transport->Wait({s, r}, DeadlineIn(absl::Seconds(10)));
      return status;
    });
    for (int rank = 0; rank < 2; ++rank) {
      const std::string message(statuses[rank].message());
      INFO(statuses[rank]);
      CHECK(statuses[rank].code() == absl::StatusCode::kInvalidArgument);
      CHECK(absl::StrContains(message, "mismatched collective with peer " + std::to_string(1 - rank)));
      CHECK(absl::StrContains(message, "count 100"));
      CHECK(absl::StrContains(message, "count 200"));
    }
  }
}

TEST_CASE("Transport: a peer that dies fails the waits on it within seconds", "[transport]") {
  for (const NamedTransport& transport_kind : AllTransports()) {
    INFO(transport_kind.name);
    auto statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
      HarnessBootstrap bootstrap(context);
      BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
      BRAID_RETURN_IF_ERROR(context.Barrier());
      if (context.rank() == 2) {
        raise(SIGKILL);  // dies holding its connections
      }
      std::vector<std::byte> in(64);
      BRAID_ASSIGN_OR_RETURN(OpId r, transport->PostRecv(2, Frame(9, 0, 64), absl::MakeSpan(in)));
      const absl::Time start = absl::Now();
      absl::Status status = transport->Wait({r}, DeadlineIn(absl::Seconds(30)));
      if (absl::Now() - start > absl::Seconds(5)) {
        return absl::InternalError(absl::StrCat("took ", absl::FormatDuration(absl::Now() - start), ": ", status.ToString()));
      }
      return status;
    });
    CHECK(absl::StrContains(statuses[2].message(), "SIGKILL"));
    for (int rank = 0; rank < 2; ++rank) {
      INFO(statuses[rank]);
      CHECK(statuses[rank].code() == absl::StatusCode::kUnavailable);
      CHECK(absl::StrContains(statuses[rank].message(), "peer 2"));
    }
  }
}

TEST_CASE("Transport: Abort tells the peers why; deadlines name what is pending", "[transport]") {
  for (const NamedTransport& transport_kind : AllTransports()) {
    INFO(transport_kind.name);
    auto statuses = RunRanks(2, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
      HarnessBootstrap bootstrap(context);
      BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
      std::vector<std::byte> in(8);
      if (context.rank() == 0) {
        // Nobody sends this: the wait must end at its deadline, naming it.
        BRAID_ASSIGN_OR_RETURN(OpId r, transport->PostRecv(1, Frame(3, 4, 8), absl::MakeSpan(in)));
        absl::Status late = transport->Wait({r}, DeadlineIn(absl::Milliseconds(300)));
        BRAID_RETURN_IF_ERROR(Expect(late.code() == absl::StatusCode::kDeadlineExceeded &&
                                         absl::StrContains(late.message(), "receive from peer 1") &&
                                         absl::StrContains(late.message(), "step 4"),
                                     late.ToString()));
        BRAID_RETURN_IF_ERROR(context.Barrier());
        // The frame still pending is now rank 1's abort notice.
        return transport->Wait({r}, DeadlineIn(absl::Seconds(10)));
      }
      BRAID_RETURN_IF_ERROR(context.Barrier());
      transport->Abort(absl::InternalError("the optimizer exploded"));
      std::vector<std::byte> out(8);
      absl::StatusOr<OpId> after = transport->PostSend(0, Frame(3, 5, 8), out);
      BRAID_RETURN_IF_ERROR(Expect(after.status().code() == absl::StatusCode::kFailedPrecondition,
                                   after.status().ToString()));
      return context.Barrier().ok() ? absl::OkStatus() : absl::OkStatus();
    });
    INFO(statuses[0]);
    CHECK(statuses[0].code() == absl::StatusCode::kAborted);
    CHECK(absl::StrContains(statuses[0].message(), "the optimizer exploded"));
    CHECK(statuses[1].ok());
  }
}

}  // namespace
}  // namespace braid::testing
