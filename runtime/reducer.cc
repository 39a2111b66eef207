#include "runtime/reducer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/deadline.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/status.h"

namespace braid {
namespace {

std::string ShapeString(const Tensor& t) { return absl::StrCat("[", absl::StrJoin(t.shape(), ", "), "]"); }

}  // namespace

Reducer::NoSyncScope::~NoSyncScope() {
  if (reducer_ != nullptr) reducer_->EndNoSync();
}

Reducer::NoSyncScope Reducer::NoSync() {
  MutexLock lock(&mu_);
  ++no_sync_depth_;
  return NoSyncScope(this);
}

void Reducer::EndNoSync() {
  MutexLock lock(&mu_);
  --no_sync_depth_;
}

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(ProcessGroup& group, std::vector<Tensor> gradients,
                                                         ReducerOptions options) {
  const std::string where = absl::StrCat("rank ", group.rank(), ": reducer: ");
  if (!(options.bucket_cap_mb > 0) || !(options.first_bucket_mb > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "bucket_cap_mb (", options.bucket_cap_mb,
                                                   ") and first_bucket_mb (", options.first_bucket_mb,
                                                   ") must be positive"));
  }
  if (!options.parameter_names.empty() && options.parameter_names.size() != gradients.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, options.parameter_names.size(), " parameter names for ",
                                                   gradients.size(), " gradients"));
  }
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (!gradients[i].defined() || !gradients[i].IsContiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "gradient ", i, " (", gradients[i].DebugString(),
                                                     ") must be a defined, contiguous tensor"));
    }
  }
  if (options.comm != nullptr && !options.comm->member()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "not a member of ReducerOptions::comm, ", options.comm->name()));
  }
  BRAID_ASSIGN_OR_RETURN(const absl::Duration timeout, ResolveTimeout(options.timeout, group.timeout()));
  std::unique_ptr<Reducer> reducer(new Reducer(group, std::move(gradients), std::move(options), timeout));
  BRAID_RETURN_IF_ERROR(reducer->CheckRanksAgree());
  std::vector<int> order(reducer->vars_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(order.size() - 1 - i);
  BRAID_RETURN_IF_ERROR(reducer->BuildBuckets(reducer->ComputeBuckets(order)));
  reducer->completion_ = std::thread([r = reducer.get()] { r->CompletionLoop(); });
  return reducer;
}

Reducer::Reducer(ProcessGroup& group, std::vector<Tensor> gradients, ReducerOptions options, absl::Duration timeout)
    : group_(group),
      comm_(options.comm != nullptr ? *options.comm : group.comm()),
      rank_(comm_.rank()),
      size_(comm_.size()),
      options_(std::move(options)),
      timeout_(timeout),
      hook_(options_.comm_hook ? options_.comm_hook : AllReduceHook()) {
  vars_.resize(gradients.size());
  for (size_t i = 0; i < gradients.size(); ++i) {
    Variable& v = vars_[i];
    v.grad = std::move(gradients[i]);
    const std::string name = options_.parameter_names.empty() ? "" : absl::StrCat(options_.parameter_names[i], ", ");
    v.label = absl::StrCat("parameter ", i, " (", name, DTypeName(v.grad.dtype()), ShapeString(v.grad), ")");
  }
  const size_t n = vars_.size();
  marked_.assign(n, 0);
  locally_used_.assign(n, 0);
  accumulated_used_.assign(n, 0);
  static_unused_.assign(n, 0);
}

Reducer::~Reducer() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (completion_.joinable()) completion_.join();
  DrainStreams();  // device work may still use the buckets' memory
}

void Reducer::DrainStreams() {
  for (const Bucket& b : buckets_) {
    if (b.grad.stream != nullptr) (void)b.grad.stream->Synchronize(DeadlineIn(timeout_));
  }
}

// ---------------------------------------------------------------------------
// Iterations

absl::Status Reducer::PrepareForBackward() { return StartIteration(/*shadow=*/false); }

absl::Status Reducer::StartIteration(bool shadow) {
  bool sync = true;
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    if (in_iteration_) {
      // Nothing marked and nothing issued: a forward without backward; start over.
      const bool restartable = marked_count_ == 0 && next_launch_ == 0 && !(syncing_ && options_.uneven_inputs);
      if (!restartable) {
        std::vector<int> missing;
        for (int v = 0; v < num_parameters(); ++v) {
          if (!marked_[static_cast<size_t>(v)]) missing.push_back(v);
        }
        broken_ = absl::FailedPreconditionError(absl::StrCat(
            "rank ", rank_, ": reducer: PrepareForBackward: the previous iteration (", iteration_,
            ") was never finished: Finalize() was not called",
            missing.empty() ? "" : absl::StrCat(", and these gradients were never marked ready: ", Labels(missing)),
            ". Call Finalize() after every backward pass, and MarkReady(i) for every parameter whose gradient was "
            "computed; if some parameters take no part in the loss, build the Reducer with "
            "find_unused_parameters = true (or static_graph = true when the unused set never changes). "
            "The reducer cannot continue"));
        comm_.Abort(broken_);
        return broken_;
      }
      in_iteration_ = false;
    }
    sync = shadow || no_sync_depth_ == 0;
  }
  if (sync && !shadow && options_.uneven_inputs) {
    // "Still training": ranks in Join() contribute 0 and shadow this iteration.
    BRAID_ASSIGN_OR_RETURN(Tensor flag, Tensor::Empty({1}, DType::kI32));
    flag.data<int32_t>()[0] = 1;
    BRAID_RETURN_IF_ERROR(Annotate(AllReduceSmall(flag, ReduceOp::kSum),
                                   absl::StrCat("rank ", rank_, ": reducer: agreeing which ranks still train")));
  }
  MutexLock lock(&mu_);
  in_iteration_ = true;
  syncing_ = sync;
  shadow_ = shadow;
  std::fill(marked_.begin(), marked_.end(), 0);
  marked_count_ = 0;
  if (!sync) return absl::OkStatus();
  ++iteration_;
  std::fill(locally_used_.begin(), locally_used_.end(), 0);
  next_launch_ = 0;
  finished_ = 0;
  reduced_here_.clear();
  iteration_error_ = absl::OkStatus();
  launch_blocked_ = absl::ZeroDuration();
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.grad.parameters.size());
    b.launched = false;
  }
  prepare_time_ = absl::Now();
  if (static_known_ && !shadow) {
    // static_graph: the unused set is known, so no bucket waits for it.
    for (int v = 0; v < num_parameters(); ++v) {
      if (!static_unused_[static_cast<size_t>(v)]) continue;
      marked_[static_cast<size_t>(v)] = 1;
      NoteFillError(v, FillSlot(v, Fill::kZero));
      --buckets_[static_cast<size_t>(vars_[static_cast<size_t>(v)].bucket)].pending;
    }
    LaunchReadyBuckets();
  }
  return absl::OkStatus();
}

absl::Status Reducer::MarkReady(int index) {
  if (index < 0 || index >= num_parameters()) {
    return absl::OutOfRangeError(absl::StrCat("rank ", rank_, ": reducer: MarkReady(", index,
                                              "): the reducer has parameters 0..", num_parameters() - 1));
  }
  const size_t i = static_cast<size_t>(index);
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    if (!in_iteration_) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, ": reducer: MarkReady(", index,
                                                        ") outside an iteration: call PrepareForBackward() first"));
    }
    if (marked_[i]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, ": reducer: ", vars_[i].label, " marked ready twice in iteration ", iteration_,
          " (ignored). Mark each gradient once, when it is final; a parameter used twice in the forward pass "
          "is marked after both contributions are accumulated"));
    }
    marked_[i] = 1;
    ++marked_count_;
    if (!syncing_) {
      accumulated_used_[i] = 1;
      return absl::OkStatus();
    }
    locally_used_[i] = 1;
    if (!rebuilt_) arrival_.push_back(index);
  }
  // Outside the lock: threads marking different gradients copy in parallel.
  // A failed fill still launches the bucket (the peers wait for it); Finalize reports it.
  const absl::Status filled = FillSlot(index, Fill::kCopy);
  MutexLock lock(&mu_);
  NoteFillError(index, filled);
  if (--buckets_[static_cast<size_t>(vars_[i].bucket)].pending == 0) {
    const absl::Time start = absl::Now();
    LaunchReadyBuckets();
    launch_blocked_ += absl::Now() - start;
  }
  return absl::OkStatus();
}

absl::Status Reducer::FillSlot(int index, Fill fill) {
  const Variable& v = vars_[static_cast<size_t>(index)];
  if (Stream* stream = buckets_[static_cast<size_t>(v.bucket)].grad.stream) {
    // Queued after backward's write of the gradient on the compute stream.
    if (fill == Fill::kZero) return stream->Zero(v.slot.data(), v.slot.nbytes());
    if (fill == Fill::kCopy && !options_.gradient_as_bucket_view) {
      return stream->Copy(v.slot.data(), v.grad.data(), v.slot.nbytes());
    }
    return absl::OkStatus();
  }
  // A CUDA bucket staged through host memory (no stream communicator for its
  // GPU): the host reads it, so backward's writes on the compute stream must
  // have landed.
  if (fill == Fill::kCopy && options_.compute_stream != nullptr && v.slot.device().is_cuda()) {
    BRAID_RETURN_IF_ERROR(options_.compute_stream->Synchronize(DeadlineIn(timeout_)));
  }
  if (fill == Fill::kZero && v.slot.device().is_cuda()) {
    // memset cannot reach device memory: zeros copied in (a failed copy is Finalize's error).
    BRAID_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(v.slot.shape(), v.slot.dtype()));
    return Tensor(v.slot).CopyFrom(zeros);
  }
  if (fill == Fill::kZero) {
    std::memset(v.slot.data(), 0, v.slot.nbytes());
  } else if (fill == Fill::kCopy && !options_.gradient_as_bucket_view) {
    // Same dtype, numel, both contiguous: only a CUDA copy can fail.
    return Tensor(v.slot).CopyFrom(v.grad);
  }
  return absl::OkStatus();
}

void Reducer::NoteFillError(int index, const absl::Status& status) {
  if (status.ok() || !iteration_error_.ok()) return;
  iteration_error_ = Annotate(status, absl::StrCat("rank ", rank_, ": reducer: filling the bucket of ",
                                                   vars_[static_cast<size_t>(index)].label, " in iteration ",
                                                   iteration_));
}

absl::Status Reducer::CopyBack(int index) {
  const Variable& var = vars_[static_cast<size_t>(index)];
  if (Stream* stream = buckets_[static_cast<size_t>(var.bucket)].grad.stream) {
    return stream->Copy(var.grad.data(), var.slot.data(), var.slot.nbytes());
  }
  return Tensor(var.grad).CopyFrom(var.slot);
}

void Reducer::LaunchReadyBuckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_];
    b.launched = true;
    b.launch_time = absl::Now();
    Pending pending{static_cast<int>(next_launch_), hook_->Launch(*b.comm, b.grad)};
    ++next_launch_;
    // Reduced on this thread (CallOptions::caller_thread): Finalize finishes
    // it here too, without waking the completion thread and waiting for it.
    if (b.grad.last && pending.work.ok() && (*pending.work)->Test()) {
      reduced_here_.push_back(std::move(pending));
    } else {
      completion_queue_.push_back(std::move(pending));
    }
  }
}

void Reducer::CompletionLoop() {
  for (;;) {
    Pending pending{0, absl::UnknownError("unset")};
    {
      MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !completion_queue_.empty() || stopping_; };
      Await(&mu_, absl::Condition(&ready));
      if (completion_queue_.empty()) return;
      pending = std::move(completion_queue_.front());
      completion_queue_.pop_front();
    }
    FinishBucket(std::move(pending));
  }
}

absl::Status Reducer::WaitForBuckets(Deadline deadline) {
  std::vector<Pending> mine;
  {
    MutexLock lock(&mu_);
    mine.swap(reduced_here_);
  }
  for (Pending& pending : mine) FinishBucket(std::move(pending));
  MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finished_ == buckets_.size(); };
  if (!AwaitWithDeadline(&mu_, absl::Condition(&done), deadline)) {
    broken_ = absl::DeadlineExceededError(absl::StrCat("rank ", rank_, ": reducer: iteration ", iteration_, ": ",
                                                       buckets_.size() - finished_, " of ", buckets_.size(),
                                                       " buckets still reducing at the deadline"));
    return broken_;
  }
  return iteration_error_;
}

absl::Status Reducer::Finalize() { return FinishIteration(); }

absl::Status Reducer::FinishIteration() {
  const absl::Time entry = absl::Now();
  std::vector<int> missing;
  bool shadow = false;
  bool detect = false;
  Tensor used;
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    if (!in_iteration_) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank_, ": reducer: Finalize() without PrepareForBackward()"));
    }
    if (!syncing_) {
      in_iteration_ = false;
      return absl::OkStatus();
    }
    shadow = shadow_;
    detect = options_.find_unused_parameters || (options_.static_graph && !static_known_);
    for (int v = 0; v < num_parameters(); ++v) {
      const size_t i = static_cast<size_t>(v);
      if (marked_[i]) continue;
      if (accumulated_used_[i] && !shadow) {
        // Used in a NoSync iteration: its accumulated gradient is reduced.
        NoteFillError(v, FillSlot(v, Fill::kCopy));
        locally_used_[i] = 1;
      } else {
        NoteFillError(v, FillSlot(v, Fill::kZero));
        if (!shadow && !detect && !options_.find_unused_parameters) missing.push_back(v);
      }
      marked_[i] = 1;
      --buckets_[static_cast<size_t>(vars_[i].bucket)].pending;
    }
    LaunchReadyBuckets();
    // With detection, which parameters any rank used; without it, how many
    // gradients each rank never marked (reduced as zeros: every rank's
    // average is then wrong, so every rank must fail, not only the one).
    absl::StatusOr<Tensor> t = Tensor::Empty({detect ? num_parameters() : size_}, DType::kI32);
    if (!t.ok()) return t.status();
    used = *t;
    for (int v = 0; v < used.numel(); ++v) {
      used.data<int32_t>()[v] = detect ? (shadow ? 0 : locally_used_[static_cast<size_t>(v)])
                                       : (v == rank_ ? static_cast<int32_t>(missing.size()) : 0);
    }
  }
  // After every bucket, in the same order on every rank.
  absl::Status status =
      Annotate(AllReduceSmall(used, ReduceOp::kSum),
               absl::StrCat("rank ", rank_, ": reducer: ",
                            detect ? "agreeing on unused parameters" : "checking every rank marked every gradient"));
  std::vector<std::string> missed_elsewhere;
  if (!detect && status.ok()) {
    for (int r = 0; r < size_; ++r) {
      const int32_t count = used.data<int32_t>()[r];
      if (count > 0 && r != rank_) missed_elsewhere.push_back(absl::StrCat("rank ", r, " (", count, ")"));
    }
  }
  status.Update(WaitForBuckets(DeadlineIn(timeout_ + absl::Seconds(10))));
  const absl::Time waited = absl::Now();
  bool rebuild = false;
  int64_t iteration = 0;
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    iteration = iteration_;
    if (status.ok()) status.Update(ApplyUnused(used, detect, shadow));
    if (!shadow) std::fill(accumulated_used_.begin(), accumulated_used_.end(), 0);
    in_iteration_ = false;
    RecordIterationStats(entry, waited, shadow);
    rebuild = status.ok() && !rebuilt_;
  }
  if (rebuild && missed_elsewhere.empty() && missing.empty()) status.Update(RebuildBuckets());
  if (!status.ok()) return status;
  return UnmarkedGradients(iteration, missing, missed_elsewhere);
}

absl::Status Reducer::Join() {
  if (!options_.uneven_inputs) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": reducer: Join() needs ReducerOptions::uneven_inputs = true on every rank"));
  }
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    if (in_iteration_) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank_, ": reducer: Join() inside an iteration: call Finalize() first"));
    }
  }
  int64_t shadowed = 0;
  for (;;) {
    BRAID_ASSIGN_OR_RETURN(Tensor flag, Tensor::Empty({1}, DType::kI32));
    flag.data<int32_t>()[0] = 0;
    BRAID_RETURN_IF_ERROR(Annotate(AllReduceSmall(flag, ReduceOp::kSum),
                                   absl::StrCat("rank ", rank_, ": reducer: Join")));
    if (flag.data<int32_t>()[0] == 0) break;  // every rank has joined
    BRAID_RETURN_IF_ERROR(StartIteration(/*shadow=*/true));
    BRAID_RETURN_IF_ERROR(FinishIteration());  // marks everything as zeros and reduces
    ++shadowed;
  }
  BRAID_LOG(INFO) << "reducer: joined; shadowed " << shadowed << " iterations of the other ranks";
  return absl::OkStatus();
}

}  // namespace braid
