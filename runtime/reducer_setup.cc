// The reducer's construction (every rank's agreement, the bucket layout and
// its rebuild), Recover and BroadcastParameters: reducer.h.
#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/deadline.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/status.h"
#include "runtime/reducer.h"

namespace braid {
namespace {

// Construction order of reducers in this process: names the store keys of
// the mismatch report (every rank builds its reducers in the same order).
std::atomic<int64_t> reducer_instances{0};

uint64_t Fnv1a(absl::string_view text) {
  uint64_t hash = 1469598103934665603ull;
  for (char c : text) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace


namespace {

// What must match on every rank: options that shape the collectives, then
// one line per gradient.
std::vector<std::string> Describe(const ReducerOptions& options, const std::string& hook,
                                  const std::vector<Tensor>& grads) {
  std::vector<std::string> lines;
  lines.push_back(absl::StrCat("bucket_cap_mb=", options.bucket_cap_mb, " first_bucket_mb=", options.first_bucket_mb,
                               " find_unused_parameters=", options.find_unused_parameters,
                               " static_graph=", options.static_graph, " uneven_inputs=", options.uneven_inputs,
                               " comm_hook=", hook));
  for (const Tensor& g : grads) lines.push_back(g.DebugString());
  return lines;
}

}  // namespace

absl::Status Reducer::CheckRanksAgree() {
  std::vector<Tensor> grads;
  for (const Variable& v : vars_) grads.push_back(v.grad);
  const std::string text = absl::StrJoin(Describe(options_, hook_->name(), grads), "\n");
  BRAID_ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({2}, DType::kI64));
  mine.data<int64_t>()[0] = static_cast<int64_t>(vars_.size());
  mine.data<int64_t>()[1] = static_cast<int64_t>(Fnv1a(text));
  BRAID_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({2 * size_}, DType::kI64));
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm_.AllGather(mine, all));
  const absl::Status status = work->Wait(DeadlineIn(timeout_));
  if (!status.ok()) return Annotate(status, absl::StrCat("rank ", rank_, ": reducer: checking the parameters"));
  const int64_t instance = reducer_instances.fetch_add(1);
  std::vector<int64_t> gathered(all.data<int64_t>(), all.data<int64_t>() + 2 * size_);
  bool agree = true;
  for (int r = 1; r < size_; ++r) agree = agree && gathered[2 * r + 1] == gathered[1] && gathered[2 * r] == gathered[0];
  if (agree) return absl::OkStatus();

  // Publish this rank's description in the store and compare with rank 0's
  // (rank 0 with the first rank that differs), naming the first difference.
  const std::string prefix = absl::StrCat("braid/reducer/", comm_.name(), "/", instance, "/rank");
  BRAID_RETURN_IF_ERROR(group_.store().Set(absl::StrCat(prefix, rank_), text));
  int other = 0;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) {
      if (gathered[2 * r + 1] != gathered[1] || gathered[2 * r] != gathered[0]) {
        other = r;
        break;
      }
    }
  }
  std::string counts;
  for (int r = 0; r < size_; ++r) absl::StrAppend(&counts, r == 0 ? "" : ", ", "rank ", r, ": ", gathered[2 * r]);
  const std::string head = absl::StrCat("rank ", rank_, ": reducer: ranks registered different gradients or options (",
                                        "gradients per rank: ", counts, ")");
  // Rank 0 may host the store (a job started without braidrun): it returns
  // only once every rank has read what it needs, or after a bounded wait.
  auto done_reading = [&] {
    (void)group_.store().Set(absl::StrCat(prefix, "read", rank_), "");
    if (rank_ != 0) return;
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(absl::StrCat(prefix, "read", r));
    (void)group_.store().Wait(keys, DeadlineIn(std::min(timeout_, absl::Seconds(10))));
  };
  if (other == rank_) {
    done_reading();
    return absl::InvalidArgumentError(absl::StrCat(head, "; this rank matches rank 0, another rank differs"));
  }
  absl::StatusOr<std::string> theirs =
      group_.store().Get(absl::StrCat(prefix, other), DeadlineIn(std::min(timeout_, absl::Seconds(60))));
  done_reading();
  if (!theirs.ok()) return absl::InvalidArgumentError(absl::StrCat(head, " (details unavailable: ", theirs.status().message(), ")"));
  const std::vector<std::string> a = absl::StrSplit(text, '\n');
  const std::vector<std::string> b = absl::StrSplit(*theirs, '\n');
  std::string detail;
  if (a[0] != b[0]) {
    detail = absl::StrCat("options differ: rank ", rank_, " has ", a[0], "; rank ", other, " has ", b[0]);
  } else {
    for (size_t i = 1; i < std::max(a.size(), b.size()); ++i) {
      const std::string here = i < a.size() ? a[i] : "nothing";
      const std::string there = i < b.size() ? b[i] : "nothing";
      if (here != there) {
        detail = absl::StrCat("parameter ", i - 1, " is ", here, " on rank ", rank_, " but ", there, " on rank ", other);
        break;
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(head, ": ", detail, ". Every rank must build the same model and pass its gradients in the same order"));
}

std::vector<std::vector<int>> Reducer::ComputeBuckets(const std::vector<int>& order) const {
  struct Open {
    DType dtype;
    Device device;
    std::vector<int> vars;
    size_t bytes = 0;
    bool first = true;
  };
  const auto mb = [](double m) { return static_cast<size_t>(m * 1024 * 1024); };
  std::vector<Open> open;
  std::vector<std::vector<int>> closed;
  for (int v : order) {
    const Tensor& g = vars_[static_cast<size_t>(v)].grad;
    auto it = std::find_if(open.begin(), open.end(),
                           [&](const Open& o) { return o.dtype == g.dtype() && o.device == g.device(); });
    if (it == open.end()) {
      open.push_back(Open{g.dtype(), g.device(), {}, 0, true});
      it = open.end() - 1;
    }
    it->vars.push_back(v);
    it->bytes += g.nbytes();
    if (it->bytes >= mb(it->first ? options_.first_bucket_mb : options_.bucket_cap_mb)) {
      closed.push_back(std::move(it->vars));
      it->vars.clear();
      it->bytes = 0;
      it->first = false;
    }
  }
  for (Open& o : open) {
    if (!o.vars.empty()) closed.push_back(std::move(o.vars));
  }
  // Launch order: by where each bucket's first gradient is in `order`.
  std::vector<int> position(vars_.size());
  for (size_t p = 0; p < order.size(); ++p) position[static_cast<size_t>(order[p])] = static_cast<int>(p);
  std::stable_sort(closed.begin(), closed.end(), [&](const std::vector<int>& x, const std::vector<int>& y) {
    return position[static_cast<size_t>(x.front())] < position[static_cast<size_t>(y.front())];
  });
  return closed;
}

absl::StatusOr<Communicator*> Reducer::CommForDevice(Device device) {
  Communicator* device_comm = options_.device_comm;
  if (device_comm != nullptr && device_comm->on_streams() && device_comm->device_runtime()->device() == device) {
    return device_comm;
  }
  if (device.is_cuda() && options_.comm != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": reducer: a ", ToString(device), " bucket on the subgroup '", comm_.name(),
        "' needs ReducerOptions::device_comm, a communicator of that subgroup on ", ToString(device)));
  }
  if (device.is_cuda()) return group_.CommFor(device);
  return &comm_;
}

absl::Status Reducer::BuildBuckets(const std::vector<std::vector<int>>& assignment) {
  std::vector<Bucket> buckets(assignment.size());
  for (size_t b = 0; b < assignment.size(); ++b) {
    const Tensor& first = vars_[static_cast<size_t>(assignment[b].front())].grad;
    int64_t total = 0;
    for (int v : assignment[b]) total += vars_[static_cast<size_t>(v)].grad.numel();
    BRAID_ASSIGN_OR_RETURN(buckets[b].comm, CommForDevice(first.device()));
    // Mappable where the peers reach it (shm): they read and write it in
    // place. Else private memory, whose huge pages backward writes faster.
    const HostMemory memory =
        buckets[b].comm->size() > 1 && buckets[b].comm->peers_reachable() ? HostMemory::kMappable : HostMemory::kPrivate;
    // Zeros: the first touch of the memory happens here, not in backward.
    BRAID_ASSIGN_OR_RETURN(Tensor flat, Tensor::Zeros({total}, first.dtype(), first.device(), memory));
    buckets[b].grad = GradBucket{static_cast<int>(b), flat, assignment[b], size_};
    buckets[b].grad.last = b + 1 == assignment.size();
    if (buckets[b].comm->on_streams()) {
      buckets[b].grad.stream = options_.compute_stream != nullptr ? options_.compute_stream
                                                                  : &buckets[b].comm->device_runtime()->DefaultStream();
    }
  }
  // Slots: in view mode the values move into the new buckets.
  for (size_t b = 0; b < assignment.size(); ++b) {
    int64_t offset = 0;
    for (int v : assignment[b]) {
      Variable& var = vars_[static_cast<size_t>(v)];
      BRAID_ASSIGN_OR_RETURN(Tensor piece, buckets[b].grad.buffer.Narrow(0, offset, var.grad.numel()));
      BRAID_ASSIGN_OR_RETURN(Tensor slot, piece.Reshape(var.grad.shape()));
      if (options_.gradient_as_bucket_view) {
        BRAID_RETURN_IF_ERROR(slot.CopyFrom(var.slot.defined() ? var.slot : var.grad));
      }
      var.slot = slot;
      var.bucket = static_cast<int>(b);
      offset += var.grad.numel();
    }
  }
  buckets_ = std::move(buckets);
  return absl::OkStatus();
}

absl::Status Reducer::RebuildBuckets() {
  DrainStreams();  // the old buckets go: the device must be done with them (once)
  // Rank 0's arrival order, completed with the parameters it never saw
  // (in reverse index order), shared with everyone.
  const int n = num_parameters();
  BRAID_ASSIGN_OR_RETURN(Tensor order, Tensor::Empty({n}, DType::kI64));
  {
    MutexLock lock(&mu_);
    std::vector<char> seen(static_cast<size_t>(n), 0);
    int p = 0;
    for (int v : arrival_) {
      order.data<int64_t>()[p++] = v;
      seen[static_cast<size_t>(v)] = 1;
    }
    for (int v = n - 1; v >= 0; --v) {
      if (!seen[static_cast<size_t>(v)]) order.data<int64_t>()[p++] = v;
    }
    arrival_.clear();
    rebuilt_ = true;
  }
  if (n == 0) return absl::OkStatus();
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm_.Broadcast(order, 0));
  BRAID_RETURN_IF_ERROR(Annotate(work->Wait(DeadlineIn(timeout_)),
                                 absl::StrCat("rank ", rank_, ": reducer: sharing rank 0's gradient order")));
  std::vector<int> ordered(static_cast<size_t>(n));
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (int p = 0; p < n; ++p) {
    const int64_t v = order.data<int64_t>()[p];
    if (v < 0 || v >= n || seen[static_cast<size_t>(v)]) {
      return absl::InternalError(absl::StrCat("rank ", rank_, ": reducer: rank 0's gradient order is not a permutation"));
    }
    seen[static_cast<size_t>(v)] = 1;
    ordered[static_cast<size_t>(p)] = static_cast<int>(v);
  }
  std::vector<std::vector<int>> assignment = ComputeBuckets(ordered);
  if (assignment == BucketAssignment()) return absl::OkStatus();
  BRAID_LOG(INFO) << "reducer: rebuilt " << assignment.size() << " buckets in the order gradients arrived on rank 0";
  return BuildBuckets(assignment);
}

std::vector<std::vector<int>> Reducer::BucketAssignment() const {
  std::vector<std::vector<int>> out;
  for (const Bucket& b : buckets_) out.push_back(b.grad.parameters);
  return out;
}

const Tensor& Reducer::gradient(int index) const {
  const Variable& v = vars_.at(static_cast<size_t>(index));
  return options_.gradient_as_bucket_view ? v.slot : v.grad;
}

std::vector<int> Reducer::unused_parameters() const {
  MutexLock lock(&mu_);
  return unused_;
}

ReducerStats Reducer::last_stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

std::string Reducer::Labels(const std::vector<int>& indices) const {
  std::vector<std::string> labels;
  for (int v : indices) labels.push_back(vars_[static_cast<size_t>(v)].label);
  return absl::StrJoin(labels, ", ");
}

absl::Status Reducer::AllReduceSmall(Tensor& t, ReduceOp op) {
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm_.AllReduce(t, op));
  return work->Wait(DeadlineIn(timeout_));
}

absl::Status Reducer::BroadcastParameters(ProcessGroup& group, absl::Span<const Tensor> parameters, int root,
                                          absl::optional<absl::Duration> timeout) {
  const std::string where = absl::StrCat("rank ", group.rank(), ": BroadcastParameters: ");
  if (root < 0 || root >= group.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "root ", root, " outside 0..", group.size() - 1));
  }
  BRAID_ASSIGN_OR_RETURN(const absl::Duration limit, ResolveTimeout(timeout, group.timeout()));
  // CUDA parameters are staged through host memory by Tensor::CopyFrom
  // (complete when it returns): work a stream still has queued on them must
  // be done first.
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].defined() || !parameters[i].IsContiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "parameter ", i, " (", parameters[i].DebugString(),
                                                     ") must be a contiguous tensor"));
    }
  }
  // One message per dtype: parameters packed in order.
  for (DType dtype : kAllDTypes) {
    int64_t total = 0;
    for (const Tensor& p : parameters) total += p.dtype() == dtype ? p.numel() : 0;
    if (total == 0) continue;
    BRAID_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({total}, dtype));
    auto each = [&](auto&& fn) -> absl::Status {
      int64_t offset = 0;
      for (const Tensor& p : parameters) {
        if (p.dtype() != dtype) continue;
        BRAID_ASSIGN_OR_RETURN(Tensor piece, flat.Narrow(0, offset, p.numel()));
        BRAID_RETURN_IF_ERROR(fn(piece, p));
        offset += p.numel();
      }
      return absl::OkStatus();
    };
    if (group.rank() == root) {
      BRAID_RETURN_IF_ERROR(each([](Tensor& piece, const Tensor& p) { return piece.CopyFrom(p); }));
    }
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, group.comm().Broadcast(flat, root));
    BRAID_RETURN_IF_ERROR(Annotate(work->Wait(DeadlineIn(limit)), absl::StrCat(where, DTypeName(dtype), " parameters")));
    if (group.rank() != root) {
      BRAID_RETURN_IF_ERROR(each([](Tensor& piece, const Tensor& p) { return Tensor(p).CopyFrom(piece); }));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Recover(ProcessGroup& group) const {
  if (options_.comm != nullptr) {
    return absl::UnimplementedError(absl::StrCat("rank ", group.rank(), ": reducer: one on the subgroup '", comm_.name(),
                                                 "' does not recover: split the regrouped ranks, make a new one"));
  }
  std::vector<Tensor> gradients;
  for (const Variable& var : vars_) gradients.push_back(var.grad);
  return Create(group, std::move(gradients), options_);
}

}  // namespace braid
