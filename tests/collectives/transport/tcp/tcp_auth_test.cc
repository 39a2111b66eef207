// The tcp transport's job-secret handshake: ranks that share the secret
// connect; a stranger that knows the rank handshake but not the secret is
// refused and logged while the job's own connection still comes up; a rank
// with a different secret fails with a clear error instead of joining.
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "absl/strings/match.h"
#include "base/auth.h"
#include "base/bytes.h"
#include "base/fd.h"
#include "base/socket.h"
#include "catch2/catch.hpp"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/tcp/tcp_transport.h"
#include "tests/harness/stderr_capture.h"

namespace braid {
namespace {

// An in-process Bootstrap for two ranks on threads. `hold_rank` (if >= 0)
// does not get its AllGather result until Release(): the test acts in between.
class TwoRankBootstrap {
 public:
  class Rank final : public Bootstrap {
   public:
    Rank(TwoRankBootstrap& shared, int rank) : shared_(shared), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return 2; }
    absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline) override {
      std::unique_lock<std::mutex> lock(shared_.mu_);
      shared_.values_[static_cast<size_t>(rank_)] = std::string(mine);
      ++shared_.arrived_;
      shared_.cv_.notify_all();
      shared_.cv_.wait(lock, [&] { return shared_.arrived_ == 2 && (rank_ != shared_.hold_rank_ || shared_.released_); });
      return shared_.values_;
    }

   private:
    TwoRankBootstrap& shared_;
    int rank_;
  };

  explicit TwoRankBootstrap(int hold_rank) : hold_rank_(hold_rank) {}
  // Waits for both ranks' addresses.
  std::vector<std::string> Addresses() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return arrived_ == 2; });
    return values_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> values_ = std::vector<std::string>(2);
  int arrived_ = 0;
  int hold_rank_;
  bool released_ = false;
};

std::vector<absl::Status> CreateBoth(TwoRankBootstrap& shared, const std::string& secret0, const std::string& secret1,
                                     absl::Duration timeout, const std::function<void()>& meanwhile = {}) {
  std::vector<absl::Status> statuses(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  const std::string secrets[2] = {secret0, secret1};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      TwoRankBootstrap::Rank bootstrap(shared, r);
      TcpTransportOptions options;
      options.secret = JobSecret(secrets[r]);
      statuses[static_cast<size_t>(r)] = TcpTransport::Create(bootstrap, DeadlineIn(timeout), options).status();
    });
  }
  if (meanwhile) meanwhile();
  for (std::thread& t : threads) t.join();
  return statuses;
}

TEST_CASE("tcp transport: ranks with the same secret connect", "[security][tcp]") {
  TwoRankBootstrap shared(-1);
  const std::vector<absl::Status> statuses = CreateBoth(shared, "job-secret", "job-secret", absl::Seconds(20));
  INFO(statuses[0] << " / " << statuses[1]);
  CHECK(statuses[0].ok());
  CHECK(statuses[1].ok());
}

TEST_CASE("tcp transport: a stranger without the secret is refused, the job still connects", "[security][tcp]") {
  // Rank 0 (which connects to rank 1) is held until the stranger has tried.
  TwoRankBootstrap shared(/*hold_rank=*/0);
  StderrCapture capture;
  bool stranger_closed = false;
  const std::vector<absl::Status> statuses = CreateBoth(shared, "job-secret", "job-secret", absl::Seconds(20), [&] {
    absl::StatusOr<HostPort> rank1 = ParseHostPort(shared.Addresses()[1], 0);
    absl::StatusOr<UniqueFd> fd = rank1.ok() ? ConnectTcp(*rank1, DeadlineIn(absl::Seconds(10)))
                                             : absl::StatusOr<UniqueFd>(rank1.status());
    if (fd.ok()) {
      // A perfect imitation of rank 0's rank handshake, then a guessed proof.
      FrameHeader hello;
      hello.kind = CollectiveKind::kHandshake;
      hello.root = 0;
      hello.count = 2;
      const Deadline deadline = DeadlineIn(absl::Seconds(10));
      std::string nonce(JobSecret::kNonceBytes, 'n');
      std::string reply(JobSecret::kNonceBytes + JobSecret::kProofBytes, '\0');
      std::string guess(JobSecret::kProofBytes, 'g');
      (void)SendAll(fd->get(), AsBytes(hello), deadline);
      (void)SendAll(fd->get(), absl::MakeConstSpan(reinterpret_cast<const std::byte*>(nonce.data()), nonce.size()),
                    deadline);
      (void)RecvAll(fd->get(), absl::MakeSpan(reinterpret_cast<std::byte*>(reply.data()), reply.size()), deadline);
      (void)SendAll(fd->get(), absl::MakeConstSpan(reinterpret_cast<const std::byte*>(guess.data()), guess.size()),
                    deadline);
      char byte;
      stranger_closed = RecvAll(fd->get(), AsWritableBytes(byte), deadline).code() == absl::StatusCode::kUnavailable;
    }
    shared.Release();
  });
  const std::string log = capture.Finish();
  INFO(statuses[0] << " / " << statuses[1] << "\nlog: " << log);
  CHECK(stranger_closed);
  CHECK(absl::StrContains(log, "claiming rank 0: wrong job secret"));
  CHECK(statuses[0].ok());
  CHECK(statuses[1].ok());
}

TEST_CASE("tcp transport: a rank with a different secret gets a clear error", "[security][tcp]") {
  TwoRankBootstrap shared(-1);
  StderrCapture capture;
  const std::vector<absl::Status> statuses = CreateBoth(shared, "secret-a", "secret-b", absl::Seconds(2));
  capture.Finish();
  INFO(statuses[0] << " / " << statuses[1]);
  CHECK(statuses[0].code() == absl::StatusCode::kPermissionDenied);
  CHECK(absl::StrContains(statuses[0].message(), "does not know this job's secret"));
  CHECK(statuses[1].code() == absl::StatusCode::kDeadlineExceeded);  // nobody it accepts ever proves it
}

}  // namespace
}  // namespace braid
