// train_mlp --recovery=in-place: the training loop that outlives its ranks.
//
// The ranks form an ElasticGroup (runtime/elastic.h). A step that fails (a
// peer died, hung past the timeout, or a replacement asks to join) is
// followed by a Reform: the live ranks, and any newcomer, form the next
// group; then every rank takes the model and the training position (epoch,
// sample cursor, step) from the most advanced rank, so no finished step is
// lost and every rank holds the same parameters; the reducer is rebuilt on
// the new group, the data re-sharded for the new world size, and the
// interrupted step done again. With fewer than --min-ranks ranks left, the
// survivors exit and braidrun restarts everyone from the newest checkpoint.
//
// Data: each epoch's order is EpochOrder (torch's DistributedSampler); a
// step of W ranks takes the next W * batch positions, rank r every W-th from
// r. With a constant world size that is exactly the restart loop's sharding.
// --check keeps every step's (epoch, cursor, world size), handed on in Sync,
// and at the end replays them in one process: the same arithmetic.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/logging.h"
#include "base/status.h"
#include "examples/mlp.h"
#include "runtime/elastic.h"
#include "runtime/reducer.h"
#include "runtime/worker_env.h"
#include "tensor/tensor.h"

namespace braid::examples {
namespace {

// Where training stands; the same on every rank after every step.
struct Position {
  int64_t epoch = 0;
  int64_t cursor = 0;  // positions of EpochOrder consumed this epoch
  int64_t step = 0;    // steps finished since the start
};

// One finished step, as --check replays it: the world size and where its
// combined batch began (ranks take positions cursor .. cursor + world * batch).
struct StepRecord {
  int64_t epoch = 0;
  int64_t cursor = 0;
  int64_t world = 0;
};

class InPlaceTrainer {
 public:
  explicit InPlaceTrainer(const Flags& flags)
      : flags_(flags), data_(Dataset::Make(flags.samples, flags.seed)), model_(LayerSizes(flags.model), flags.seed) {}

  absl::Status Run();

 private:
  // Everyone takes the model and the position from the most advanced rank,
  // then builds the reducer on the current group. Collective.
  absl::Status Sync(bool fresh);
  // One data-parallel step of the current group; advances pos_ when done.
  absl::Status Step(double* loss);
  // After a failure: regroup and Sync, until it holds or cannot.
  absl::Status Recover(absl::Status cause);
  absl::Status VerifyIdentical();
  // --check: every rank takes the step history from `source` (a newcomer has none).
  absl::Status SyncHistory(int source);
  // --check at the end: identical parameters everywhere, and rank 0's replay of
  // the history in one process within 1e-4 of them. Collective.
  absl::Status Check();
  std::vector<float*> Grads() { return ReducerGrads(*reducer_); }
  ProcessGroup& group() { return elastic_->group(); }

  const Flags& flags_;
  Dataset data_;
  Mlp model_;
  Position pos_;
  std::unique_ptr<ElasticGroup> elastic_;
  std::vector<std::vector<float>> initial_grads_;
  std::unique_ptr<Reducer> reducer_;
  std::vector<int> order_;  // EpochOrder for (order_epoch_, order_world_)
  int64_t order_epoch_ = -1;
  int order_world_ = 0;
  std::vector<StepRecord> history_;  // --check only
};

absl::Status InPlaceTrainer::Sync(bool fresh) {
  // Progress orders positions; a newcomer has none.
  const int64_t progress = fresh && elastic_->joined_running() ? -1 : pos_.step;
  BRAID_ASSIGN_OR_RETURN(const int source, elastic_->MostAdvanced(progress));
  BRAID_ASSIGN_OR_RETURN(Tensor position, Tensor::Empty({3}, DType::kI64));
  position.data<int64_t>()[0] = pos_.epoch;
  position.data<int64_t>()[1] = pos_.cursor;
  position.data<int64_t>()[2] = pos_.step;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, group().comm().Broadcast(position, source));
  BRAID_RETURN_IF_ERROR(work->Wait());
  pos_ = Position{position.data<int64_t>()[0], position.data<int64_t>()[1], position.data<int64_t>()[2]};
  if (flags_.check) BRAID_RETURN_IF_ERROR(SyncHistory(source));
  BRAID_RETURN_IF_ERROR(Reducer::BroadcastParameters(group(), ParamTensors(model_), source));
  if (reducer_) {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> next, reducer_->Recover(group()));
    reducer_ = std::move(next);
    return absl::OkStatus();
  }
  BRAID_ASSIGN_OR_RETURN(reducer_, MakeReducer(group(), flags_, model_, &initial_grads_));
  return absl::OkStatus();
}

absl::Status InPlaceTrainer::Step(double* loss) {
  const int world = group().size();
  const int rank = group().rank();
  if (order_epoch_ != pos_.epoch || order_world_ != world) {
    order_ = EpochOrder(flags_.samples, static_cast<int>(pos_.epoch), flags_.seed, world);
    order_epoch_ = pos_.epoch;
    order_world_ = world;
  }
  std::vector<int> batch;
  for (int k = 0; k < flags_.batch_size; ++k) {
    batch.push_back(order_[static_cast<size_t>(pos_.cursor + rank + static_cast<int64_t>(world) * k)]);
  }
  BRAID_RETURN_IF_ERROR(reducer_->PrepareForBackward());
  absl::Status marked;
  *loss = model_.Step(data_, batch, Grads(), [&](int i) { marked.Update(reducer_->MarkReady(i)); });
  BRAID_RETURN_IF_ERROR(marked);
  BRAID_RETURN_IF_ERROR(reducer_->Finalize());
  model_.Sgd(Grads(), static_cast<float>(flags_.lr));
  if (flags_.check) history_.push_back({pos_.epoch, pos_.cursor, world});
  pos_.cursor += static_cast<int64_t>(world) * flags_.batch_size;
  ++pos_.step;
  return absl::OkStatus();
}

absl::Status InPlaceTrainer::VerifyIdentical() {
  Communicator& comm = group().comm();
  BRAID_ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({1}, DType::kI64));
  BRAID_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({comm.size()}, DType::kI64));
  mine.data<int64_t>()[0] = static_cast<int64_t>(HashParams(model_));
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllGather(mine, all));
  BRAID_RETURN_IF_ERROR(work->Wait());
  for (int r = 0; r < comm.size(); ++r) {
    if (all.data<int64_t>()[r] != mine.data<int64_t>()[0]) {
      // Not a failure to recover from: the replicas diverged.
      return absl::InternalError(absl::StrCat("after step ", pos_.step, " rank ", r, "'s parameters differ from rank ",
                                              comm.rank(), "'s"));
    }
  }
  return absl::OkStatus();
}

absl::Status InPlaceTrainer::SyncHistory(int source) {
  BRAID_ASSIGN_OR_RETURN(Tensor length, Tensor::Empty({1}, DType::kI64));
  length.data<int64_t>()[0] = static_cast<int64_t>(history_.size());
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, group().comm().Broadcast(length, source));
  BRAID_RETURN_IF_ERROR(work->Wait());
  const int64_t n = length.data<int64_t>()[0];
  if (n == 0) {
    history_.clear();
    return absl::OkStatus();
  }
  BRAID_ASSIGN_OR_RETURN(Tensor records, Tensor::Empty({3 * n}, DType::kI64));
  int64_t* r = records.data<int64_t>();
  if (group().rank() == source) {
    for (int64_t i = 0; i < n; ++i) {
      const StepRecord& h = history_[static_cast<size_t>(i)];
      r[3 * i] = h.epoch;
      r[3 * i + 1] = h.cursor;
      r[3 * i + 2] = h.world;
    }
  }
  BRAID_ASSIGN_OR_RETURN(work, group().comm().Broadcast(records, source));
  BRAID_RETURN_IF_ERROR(work->Wait());
  history_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) history_[static_cast<size_t>(i)] = {r[3 * i], r[3 * i + 1], r[3 * i + 2]};
  return absl::OkStatus();
}

absl::Status InPlaceTrainer::Check() {
  BRAID_RETURN_IF_ERROR(VerifyIdentical());
  BRAID_ASSIGN_OR_RETURN(Tensor verdict, Tensor::Zeros({1}, DType::kF64));  // rank 0's max difference
  if (group().rank() == 0) {
    Mlp reference(LayerSizes(flags_.model), flags_.seed);
    std::vector<std::vector<float>> grads;
    std::vector<float*> grad_ptrs;
    for (const auto& p : reference.params()) grads.emplace_back(p.size());
    for (auto& g : grads) grad_ptrs.push_back(g.data());
    std::map<int64_t, int64_t> steps_at;  // world size -> steps
    for (const StepRecord& h : history_) {
      const std::vector<int> order =
          EpochOrder(flags_.samples, static_cast<int>(h.epoch), flags_.seed, static_cast<int>(h.world));
      const auto first = order.begin() + h.cursor;
      const std::vector<int> combined(first, first + h.world * flags_.batch_size);
      reference.Step(data_, combined, grad_ptrs, [](int) {});
      reference.Sgd(grad_ptrs, static_cast<float>(flags_.lr));
      ++steps_at[h.world];
    }
    verdict.data<double>()[0] = MaxAbsDifference(reference.params(), model_.params());
    std::string worlds;
    for (const auto& [world, steps] : steps_at) absl::StrAppend(&worlds, worlds.empty() ? "" : ", ", steps, " at ", world);
    std::printf("check: %zu steps replayed in one process (steps at world size: %s), parameters bit-identical on "
                "every rank: yes; max |difference| %.3g (tolerance 1e-4)\n",
                history_.size(), worlds.c_str(), verdict.data<double>()[0]);
    std::fflush(stdout);
  }
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, group().comm().Broadcast(verdict, 0));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(600))));
  if (!(verdict.data<double>()[0] <= 1e-4)) {
    return absl::InternalError(absl::StrCat("check failed: max difference from the replay ", verdict.data<double>()[0]));
  }
  if (group().rank() == 0) std::printf("check: PASSED\n");
  return absl::OkStatus();
}

absl::Status InPlaceTrainer::Recover(absl::Status cause) {
  const absl::Time start = absl::Now();
  const int64_t world_before = group().size();
  const int64_t step_before = pos_.step;
  while (true) {
    BRAID_LOG(WARNING) << "train_mlp: step " << pos_.step << " failed (" << cause.message() << "); regrouping";
    BRAID_RETURN_IF_ERROR(elastic_->Reform(cause));
    cause = Sync(/*fresh=*/false);
    if (cause.ok()) break;
  }
  if (group().rank() == 0) {
    std::printf("recovered in place: epoch %lld of the group, %lld -> %d ranks, resuming at step %lld (this rank "
                "had finished %lld), %.0f ms\n",
                static_cast<long long>(elastic_->epoch()), static_cast<long long>(world_before), group().size(),
                static_cast<long long>(pos_.step), static_cast<long long>(step_before),
                absl::ToDoubleMilliseconds(absl::Now() - start));
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status InPlaceTrainer::Run() {
  BRAID_ASSIGN_OR_RETURN(WorkerEnv env, ReadWorkerEnv());
  ElasticOptions options;
  options.min_ranks = flags_.min_ranks;
  BRAID_ASSIGN_OR_RETURN(elastic_, ElasticGroup::Create(env, options));
  // The first group resumes from the newest checkpoint, if any (rank 0 reads
  // it; Sync hands it round as the most advanced position).
  if (!elastic_->joined_running() && !flags_.checkpoint_dir.empty() && group().rank() == 0) {
    if (::mkdir(flags_.checkpoint_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("mkdir ", flags_.checkpoint_dir));
    }
    BRAID_ASSIGN_OR_RETURN(const int epoch, LoadNewestCheckpoint(flags_.checkpoint_dir, model_));
    if (epoch > 0) {
      pos_.epoch = epoch;
      pos_.step = 1;  // any progress: the others (at 0) take it from here
      std::printf("resumed from %s\n", CheckpointPath(flags_.checkpoint_dir, epoch).c_str());
    }
  }
  absl::Status synced = Sync(/*fresh=*/true);
  if (!synced.ok()) BRAID_RETURN_IF_ERROR(Recover(synced));
  if (elastic_->joined_running()) {
    std::printf("rank %d joined the running group at step %lld (epoch %lld of the group, %d ranks)\n", elastic_->id(),
                static_cast<long long>(pos_.step), static_cast<long long>(elastic_->epoch()), group().size());
    std::fflush(stdout);
  } else if (group().rank() == 0) {
    std::printf("train_mlp: %s model, %lld parameters, %d ranks, batch %d per rank, %d samples, lr %g, in-place "
                "recovery\n",
                flags_.model.c_str(), static_cast<long long>(model_.num_parameters()), group().size(),
                flags_.batch_size, flags_.samples, flags_.lr);
    std::fflush(stdout);
  }
  StepLog step_log(flags_.step_log, elastic_->id());
  double loss_sum = 0;
  int64_t loss_steps = 0;
  while (pos_.epoch < flags_.epochs) {
    const int world = group().size();
    const int64_t padded = (flags_.samples + world - 1) / world * world;
    if (pos_.cursor + static_cast<int64_t>(world) * flags_.batch_size > padded) {
      if (group().rank() == 0) {
        std::printf("epoch %lld/%d: loss %.4f (rank 0's batches), %d ranks\n", static_cast<long long>(pos_.epoch + 1),
                    flags_.epochs, loss_steps > 0 ? loss_sum / static_cast<double>(loss_steps) : 0.0, world);
        std::fflush(stdout);
        if (!flags_.checkpoint_dir.empty()) {
          BRAID_RETURN_IF_ERROR(SaveCheckpoint(flags_.checkpoint_dir, static_cast<int>(pos_.epoch + 1), model_));
        }
      }
      ++pos_.epoch;
      pos_.cursor = 0;
      loss_sum = 0;
      loss_steps = 0;
      continue;
    }
    double loss = 0;
    absl::Status step = Step(&loss);
    if (step.ok()) {
      loss_sum += loss;
      ++loss_steps;
      step_log.Finished(pos_.step - 1, world);
      if (flags_.verify_steps) step = VerifyIdentical();
      if (absl::IsInternal(step)) return step;
    }
    if (!step.ok()) {
      BRAID_RETURN_IF_ERROR(Recover(step));
      continue;
    }
    if (flags_.step_sleep_ms > 0) absl::SleepFor(absl::Milliseconds(flags_.step_sleep_ms));
  }
  std::printf("final parameters: hash %016llx (rank %d, step %lld, %d ranks)\n",
              static_cast<unsigned long long>(HashParams(model_)), elastic_->id(), static_cast<long long>(pos_.step),
              group().size());
  std::fflush(stdout);
  return flags_.check ? Check() : absl::OkStatus();
}

}  // namespace

absl::Status TrainInPlace(const Flags& flags) { return InPlaceTrainer(flags).Run(); }

}  // namespace braid::examples
