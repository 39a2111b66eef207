// elastic_worker: a worker of elastic_test. It forms an ElasticGroup and runs
// --rounds all-reduces, each checked exactly: every member adds (id + 1) *
// round, so the sum names who took part. A failed round is followed by a
// Reform and done again by the new group (the round comes from the most
// advanced rank). Once its first epoch's group has run a collective it sets
// running/<id> in that group's store. Between rounds it sleeps --sleep-ms.
// At the end it prints
//   done id <id> epoch <epoch> world <size> round <rounds> members <ids>
// Flags: --rounds=N (default 40), --sleep-ms=N (default 20), --min-ranks=N (default 1).
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "runtime/elastic.h"
#include "runtime/worker_env.h"
#include "tensor/tensor.h"

namespace braid {
namespace {

int IntFlag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    int value = 0;
    if (absl::ConsumePrefix(&arg, absl::StrCat("--", name, "=")) && absl::SimpleAtoi(arg, &value)) return value;
  }
  return fallback;
}

// The round every member continues from: the most advanced one's.
absl::Status SyncRound(ElasticGroup& elastic, int64_t* round) {
  BRAID_ASSIGN_OR_RETURN(const int source, elastic.MostAdvanced(elastic.joined_running() && *round == 0 ? -1 : *round));
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({1}, DType::kI64));
  t.data<int64_t>()[0] = *round;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, elastic.group().comm().Broadcast(t, source));
  BRAID_RETURN_IF_ERROR(work->Wait());
  *round = t.data<int64_t>()[0];
  return absl::OkStatus();
}

absl::Status AllReduceRound(ElasticGroup& elastic, int64_t round) {
  Communicator& comm = elastic.group().comm();
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({1024}, DType::kI64));
  for (int i = 0; i < 1024; ++i) t.data<int64_t>()[i] = (elastic.id() + 1) * round + i;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(t, ReduceOp::kSum));
  BRAID_RETURN_IF_ERROR(work->Wait());
  int64_t ids = 0;
  for (const membership::Member& m : elastic.members()) ids += m.id + 1;
  for (int i = 0; i < 1024; ++i) {
    const int64_t want = ids * round + static_cast<int64_t>(comm.size()) * i;
    if (t.data<int64_t>()[i] != want) {
      return absl::InternalError(absl::StrCat("round ", round, " element ", i, ": ", t.data<int64_t>()[i],
                                              ", want ", want));
    }
  }
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  const int rounds = IntFlag(argc, argv, "rounds", 40);
  const int sleep_ms = IntFlag(argc, argv, "sleep-ms", 20);
  BRAID_ASSIGN_OR_RETURN(WorkerEnv env, ReadWorkerEnv());
  ElasticOptions options;
  options.min_ranks = IntFlag(argc, argv, "min-ranks", 1);
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<ElasticGroup> elastic, ElasticGroup::Create(env, options));
  int64_t round = 0;
  absl::Status status = SyncRound(*elastic, &round);
  // Every member built the first epoch and took part in a collective: the
  // test kills only after this, so that the kill lands in the rounds.
  if (status.ok()) {
    status = elastic->group().store().Set(absl::StrCat("running/", elastic->id()), absl::StrCat(elastic->epoch()));
  }
  while (true) {
    if (status.ok() && round >= rounds) break;
    if (status.ok()) status = AllReduceRound(*elastic, round + 1);
    if (absl::IsInternal(status)) return status;  // a wrong sum: no recovery from that
    if (status.ok()) {
      ++round;
      absl::SleepFor(absl::Milliseconds(sleep_ms));
      continue;
    }
    std::printf("id %d: round %lld failed: %s\n", elastic->id(), static_cast<long long>(round + 1),
                std::string(status.message()).c_str());
    std::fflush(stdout);
    BRAID_RETURN_IF_ERROR(elastic->Reform(status));
    std::printf("id %d: regrouped, epoch %lld, %d ranks over %s\n", elastic->id(),
                static_cast<long long>(elastic->epoch()), elastic->group().size(),
                elastic->group().comm().transport_name());
    std::fflush(stdout);
    status = SyncRound(*elastic, &round);
  }
  std::string ids;
  for (const membership::Member& m : elastic->members()) absl::StrAppend(&ids, ids.empty() ? "" : ",", m.id);
  std::printf("done id %d epoch %lld world %d round %lld members %s\n", elastic->id(),
              static_cast<long long>(elastic->epoch()), elastic->group().size(), static_cast<long long>(round),
              ids.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  const absl::Status status = braid::Run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "elastic_worker: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
