// How a bucket's reduction ends, and what Finalize does once every bucket's
// has: the parameters no rank used, the iteration's statistics, and the
// errors for gradients never marked ready (reducer.cc runs the iteration).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/deadline.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/status.h"
#include "runtime/reducer.h"

namespace braid {

// One launched bucket: waits for its collectives, lets the hook finish, copies
// the average back into gradients copied in, and counts it. On the completion
// thread, or on Finalize's for a last bucket reduced on the launching thread.
void Reducer::FinishBucket(Pending pending) {
  std::vector<int> copy_out;
  absl::Time launched;
  {
    MutexLock lock(&mu_);
    launched = buckets_[static_cast<size_t>(pending.bucket)].launch_time;
    // Gradients copied in get the average copied back now, during backward;
    // the rest (unused here) wait for Finalize's decision.
    if (!options_.gradient_as_bucket_view && !shadow_) {
      for (int v : buckets_[static_cast<size_t>(pending.bucket)].grad.parameters) {
        if (locally_used_[static_cast<size_t>(v)]) copy_out.push_back(v);
      }
    }
  }
  Bucket& bucket = buckets_[static_cast<size_t>(pending.bucket)];
  absl::Status status = pending.work.status();
  Stream* stream = bucket.grad.stream;
  // A device bucket: its compute stream waits for the collective, never the host.
  if (status.ok()) {
    const Deadline deadline = launched + timeout_ + absl::Seconds(5);
    status = stream != nullptr ? (*pending.work)->WaitStream(*stream, deadline) : (*pending.work)->Wait(deadline);
  }
  if (status.ok()) status = hook_->Finish(bucket.grad);
  if (status.ok()) {
    for (int v : copy_out) status.Update(CopyBack(v));
  }
  MutexLock lock(&mu_);
  bucket.done_time = absl::Now();
  if (Timeline* timeline = comm_.timeline()) {
    timeline->Span(absl::StrCat("bucket ", pending.bucket), Timeline::Track::kBuckets, launched, bucket.done_time,
                   absl::StrCat("\"bucket\": ", pending.bucket, ", \"iteration\": ", iteration_,
                                ", \"bytes\": ", bucket.grad.buffer.nbytes(), ", \"parameters\": ",
                                bucket.grad.parameters.size(), ", \"hook\": \"", hook_->name(),
                                "\", \"ok\": ", status.ok() ? "true" : "false"));
  }
  if (!status.ok() && iteration_error_.ok()) {
    iteration_error_ = Annotate(status, absl::StrCat("rank ", rank_, ": reducer: bucket ", pending.bucket,
                                                     " of iteration ", iteration_, " (", hook_->name(), ")"));
  }
  ++finished_;
}

absl::Status Reducer::ApplyUnused(const Tensor& used, bool detect, bool shadow) {
  absl::Status status;
  std::vector<char> unused(vars_.size(), 0);
  if (detect) {
    for (size_t v = 0; v < vars_.size(); ++v) unused[v] = used.data<int32_t>()[v] == 0;
    if (options_.static_graph && !static_known_) {
      static_unused_ = unused;
      static_known_ = true;
    }
  } else if (static_known_) {
    unused = static_unused_;
  }
  unused_.clear();
  for (size_t v = 0; v < vars_.size(); ++v) {
    if (unused[v]) unused_.push_back(static_cast<int>(v));
    // Zero here but used elsewhere: the average still lands in its gradient.
    if (!unused[v] && !locally_used_[v] && !shadow && !options_.gradient_as_bucket_view) {
      status.Update(CopyBack(static_cast<int>(v)));
    }
  }
  return status;
}

// The buckets ran one after another on the communicator.
void Reducer::RecordIterationStats(absl::Time entry, absl::Time waited, bool shadow) {
  ReducerStats stats;
  stats.iteration = iteration_;
  stats.backward = entry - prepare_time_;
  absl::Time previous = absl::InfinitePast();
  for (const Bucket& b : buckets_) {
    const absl::Time start = std::max(b.launch_time, previous);
    if (b.done_time > start) stats.communication += b.done_time - start;
    previous = b.done_time;
    stats.bytes += b.grad.buffer.nbytes();
  }
  stats.buckets = static_cast<int>(buckets_.size());
  stats.exposed = std::min(stats.communication, (waited - entry) + launch_blocked_);
  stats.hidden = stats.communication - stats.exposed;
  stats.overlap = stats.communication > absl::ZeroDuration() ? stats.hidden / stats.communication : 1.0;
  stats_ = stats;
  if (Timeline* timeline = comm_.timeline()) {
    // Backward: PrepareForBackward to Finalize; then what Finalize waited for the buckets.
    const std::string args = absl::StrCat("\"iteration\": ", iteration_, ", \"buckets\": ", stats.buckets,
                                          ", \"bytes\": ", stats.bytes, ", \"shadow\": ", shadow ? "true" : "false");
    timeline->Span("backward", Timeline::Track::kBackward, prepare_time_, entry, args);
    timeline->Span("finalize (waiting for buckets)", Timeline::Track::kBackward, entry, waited, args);
  }
  BRAID_LOG(INFO) << "reducer: iteration " << stats.iteration << ": backward "
                  << absl::FormatDuration(stats.backward) << ", communication "
                  << absl::FormatDuration(stats.communication) << " (" << absl::FormatDuration(stats.exposed)
                  << " exposed, " << static_cast<int>(stats.overlap * 100 + 0.5) << "% hidden), "
                  << stats.buckets << " buckets, " << stats.bytes << " bytes" << (shadow ? " (joined, shadowing)" : "");
}

absl::Status Reducer::UnmarkedGradients(int64_t iteration, const std::vector<int>& missing,
                                        const std::vector<std::string>& missed_elsewhere) const {
  if (missing.empty() && !missed_elsewhere.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": reducer: Finalize in iteration ", iteration, ": gradients never marked ready on ",
        absl::StrJoin(missed_elsewhere, ", "),
        ", reduced there as zeros, so this rank's averaged gradients are wrong too; that rank's error names them "
        "(MarkReady for every parameter, or find_unused_parameters = true on every rank)"));
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": reducer: Finalize in iteration ", iteration, ": ", missing.size(),
        " gradient(s) never marked ready: ", Labels(missing),
        ". They were reduced as zeros so the other ranks do not hang. Call MarkReady(i) for every parameter once its "
        "gradient is computed; if these parameters take no part in the loss, build the Reducer with "
        "find_unused_parameters = true (or static_graph = true when the unused set never changes)"));
  }
  return absl::OkStatus();
}

}  // namespace braid
