// The C API (capi/braid.h) over runtime/ProcessGroup, the Communicator and
// the Reducer. Every entry point catches nothing: braid's C++ does not throw,
// it returns absl::Status, which becomes a code here and a thread-local message.
#include "capi/braid.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/launch_env.h"
#include "base/status.h"
#include "collectives/communicator.h"
#include "collectives/selection.h"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "runtime/worker_env.h"
#include "store/store.h"
#include "tensor/tensor.h"

struct braid_group {
  std::unique_ptr<braid::ProcessGroup> group;  // null for a subgroup
  std::unique_ptr<braid::Communicator> sub;    // a subgroup's communicator

  braid::Communicator& comm() const { return sub ? *sub : group->comm(); }
};

struct braid_work {
  braid::WorkHandle handle;
};

struct braid_reducer {
  std::unique_ptr<braid::Reducer> reducer;
  std::vector<braid::Reducer::NoSyncScope> no_sync;
};

namespace braid {
namespace {

constexpr char kVersion[] = "0.4.0";

thread_local std::string last_error;

braid_status Fail(const absl::Status& status) {
  last_error = std::string(status.message());
  return static_cast<braid_status>(status.code());
}

braid_status Finish(const absl::Status& status) {
  if (status.ok()) {
    last_error.clear();
    return BRAID_OK;
  }
  return Fail(status);
}

braid_status Invalid(absl::string_view what) { return Fail(absl::InvalidArgumentError(what)); }

// A braid::Store over the caller's functions (capi/braid.h, braid_store_ops).
class CallbackStore : public Store {
 public:
  explicit CallbackStore(braid_store_ops ops) : ops_(ops) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    const std::string k(key);
    if (ops_.set(ops_.ctx, k.c_str(), value.data(), value.size()) != 0) return Error("set", key);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override {
    const std::string k(key);
    std::string value;
    auto sink = [](void* sink_ctx, const void* data, size_t size) {
      static_cast<std::string*>(sink_ctx)->assign(static_cast<const char*>(data), size);
    };
    if (ops_.get(ops_.ctx, k.c_str(), TimeoutMs(deadline), sink, &value) != 0) {
      absl::Status error = Error("get", key);
      if (Expired(deadline)) return absl::DeadlineExceededError(error.message());
      return error;
    }
    return value;
  }

  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    const std::string k(key);
    int64_t result = 0;
    if (ops_.add(ops_.ctx, k.c_str(), delta, &result) != 0) return Error("add", key);
    return result;
  }

  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view, absl::string_view) override {
    return absl::UnimplementedError(
        absl::StrCat("the caller's store has no compare-and-set (key \"", key, "\")"));
  }

  absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline) override {
    for (const std::string& key : keys) BRAID_RETURN_IF_ERROR(Get(key, deadline).status());
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override {
    std::vector<const char*> names;
    for (const std::string& key : keys) names.push_back(key.c_str());
    int exists = 0;
    if (ops_.check(ops_.ctx, names.data(), names.size(), &exists) != 0) {
      return Error("check", keys.empty() ? "" : keys[0]);
    }
    return exists != 0;
  }

  absl::StatusOr<bool> Delete(absl::string_view key) override {
    const std::string k(key);
    int existed = 0;
    if (ops_.remove(ops_.ctx, k.c_str(), &existed) != 0) return Error("delete", key);
    return existed != 0;
  }

  absl::StatusOr<int64_t> NumKeys() override {
    return absl::UnimplementedError("the caller's store does not count its keys");
  }

 private:
  static int64_t TimeoutMs(Deadline deadline) {
    if (deadline == absl::InfiniteFuture()) return -1;
    return std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
  }

  absl::Status Error(absl::string_view op, absl::string_view key) const {
    const char* message = ops_.error != nullptr ? ops_.error(ops_.ctx) : nullptr;
    return absl::UnavailableError(absl::StrCat("the caller's store: ", op, " \"", key,
                                               "\" failed: ", message != nullptr ? message : "(no message)"));
  }

  const braid_store_ops ops_;
};

int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  int value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) ? value : fallback;
}

// The worker environment; with a caller's store and rank, it need not name a store.
absl::StatusOr<WorkerEnv> EnvFor(const braid_group_options& options) {
  const bool explicit_rank = options.rank >= 0 || options.world_size >= 0;
  if (explicit_rank && (options.rank < 0 || options.world_size <= 0 || options.rank >= options.world_size)) {
    return absl::InvalidArgumentError(absl::StrCat("braid_group_create: rank ", options.rank, " of world size ",
                                                   options.world_size, ": set both, 0 <= rank < world size"));
  }
  absl::StatusOr<WorkerEnv> env = ReadWorkerEnv();
  if (!explicit_rank) return env;
  if (!env.ok()) {
    if (options.store == nullptr) return env.status();
    // A framework's own launch (mp.spawn with a TCP init method): one host.
    WorkerEnv own;
    own.local_rank = EnvInt(launch_env::kLocalRank, options.rank);
    own.local_world_size = EnvInt(launch_env::kLocalWorldSize, options.world_size);
    env = own;
  }
  if (env->world_size != options.world_size && env->local_world_size == env->world_size) {
    env->local_world_size = options.world_size;  // the caller's group is the whole host
  }
  env->rank = options.rank;
  env->world_size = options.world_size;
  env->local_rank = std::min(env->local_rank, env->local_world_size - 1);
  return env;
}

absl::StatusOr<DType> ToDType(braid_dtype dtype) {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= kNumDTypes) {
    return absl::InvalidArgumentError(absl::StrCat("unknown braid_dtype ", static_cast<int>(dtype)));
  }
  return static_cast<DType>(dtype);
}

absl::StatusOr<ReduceOp> ToOp(braid_op op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > static_cast<int>(ReduceOp::kAvg)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown braid_op ", static_cast<int>(op)));
  }
  return static_cast<ReduceOp>(op);
}

absl::StatusOr<Tensor> ToTensor(const braid_buffer* buffer, absl::string_view name) {
  if (buffer == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " buffer is NULL"));
  if (buffer->count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " buffer has a negative count ", buffer->count));
  }
  if (buffer->data == nullptr && buffer->count > 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " buffer of ", buffer->count, " elements has no data"));
  }
  BRAID_ASSIGN_OR_RETURN(DType dtype, ToDType(buffer->dtype));
  Device device;
  switch (buffer->device.type) {
    case BRAID_CPU:
      device = Device::Cpu();
      break;
    case BRAID_CUDA:
      device = Device::Cuda(buffer->device.index);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(name, " buffer has an unknown device type ", static_cast<int>(buffer->device.type)));
  }
  return Tensor::View(buffer->data, {buffer->count}, dtype, device);
}

// braid's CallOptions for the C API's (NULL: the defaults).
absl::StatusOr<CallOptions> ToCallOptions(const braid_call_options* call) {
  CallOptions options;
  if (call == nullptr) return options;
  if (call->stream != nullptr) {
    return absl::UnimplementedError(
        "a CUDA stream was given, but the C API's collectives are not stream-ordered yet: pass NULL (CUDA buffers "
        "are then ordered synchronously with the device)");
  }
  if (call->timeout_sec > 0) options.timeout = absl::Seconds(call->timeout_sec);
  if (call->algorithm != nullptr) {
    BRAID_ASSIGN_OR_RETURN(options.algorithm, ParseAlgorithm(call->algorithm));
  }
  options.async = call->async != 0;
  return options;
}

// The communicator for `tensor`.
absl::StatusOr<Communicator*> CommFor(braid_group* group, const Tensor& tensor) {
  if (group->sub) return group->sub.get();  // a subgroup is one host communicator (CUDA buffers staged)
  return group->group->CommFor(tensor.device());
}

braid_status Issue(absl::StatusOr<WorkHandle> handle, braid_work** work) {
  if (!handle.ok()) return Fail(handle.status());
  if (work == nullptr) return Finish((*handle)->Wait());
  *work = new braid_work{std::move(*handle)};
  last_error.clear();
  return BRAID_OK;
}

#define BRAID_CAPI_ASSIGN(lhs, expr)         \
  auto lhs##_or = (expr);                    \
  if (!lhs##_or.ok()) return Fail(lhs##_or.status()); \
  auto& lhs = *lhs##_or

template <typename Call>
braid_status InOut(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                   const braid_call_options* call_options, braid_work** work, Call call) {
  if (group == nullptr) return Invalid("the group is NULL");
  BRAID_CAPI_ASSIGN(options, ToCallOptions(call_options));
  BRAID_CAPI_ASSIGN(input, ToTensor(in, "the input"));
  BRAID_CAPI_ASSIGN(output, ToTensor(out, "the output"));
  if (input.device() != output.device()) {
    return Invalid(absl::StrCat("the input is on ", ToString(input.device()), ", the output on ",
                                ToString(output.device())));
  }
  BRAID_CAPI_ASSIGN(comm, CommFor(group, input));
  return Issue(call(*comm, input, output, options), work);
}

template <typename Call>
braid_status One(braid_group* group, const braid_buffer* buffer, const braid_call_options* call_options,
                 braid_work** work, Call call) {
  if (group == nullptr) return Invalid("the group is NULL");
  BRAID_CAPI_ASSIGN(options, ToCallOptions(call_options));
  BRAID_CAPI_ASSIGN(tensor, ToTensor(buffer, "the"));
  BRAID_CAPI_ASSIGN(comm, CommFor(group, tensor));
  return Issue(call(*comm, tensor, options), work);
}

std::vector<Tensor> ToTensors(const braid_buffer* buffers, int count, absl::Status& status) {
  std::vector<Tensor> tensors;
  for (int i = 0; i < count && status.ok(); ++i) {
    absl::StatusOr<Tensor> tensor = ToTensor(&buffers[i], absl::StrCat("buffer ", i, ": the"));
    if (tensor.ok()) {
      tensors.push_back(std::move(*tensor));
    } else {
      status = tensor.status();
    }
  }
  return tensors;
}

}  // namespace
}  // namespace braid

using braid::Fail;
using braid::Finish;
using braid::Invalid;

extern "C" {

const char* braid_version(void) { return braid::kVersion; }
int braid_abi_version(void) { return BRAID_ABI_VERSION; }
const char* braid_last_error(void) { return braid::last_error.c_str(); }

void braid_group_options_init(braid_group_options* options) {
  *options = braid_group_options{};
  options->rank = -1;
  options->world_size = -1;
}

braid_status braid_group_create(const braid_group_options* options, braid_group** group) {
  if (group == nullptr) return Invalid("braid_group_create: the result pointer is NULL");
  braid_group_options defaults;
  braid_group_options_init(&defaults);
  const braid_group_options& o = options != nullptr ? *options : defaults;
  BRAID_CAPI_ASSIGN(env, braid::EnvFor(o));
  braid::ProcessGroupOptions pg;
  if (o.timeout_sec > 0) pg.timeout = absl::Seconds(o.timeout_sec);
  if (o.transport != nullptr) pg.transport = o.transport;
  if (o.store != nullptr) pg.store = std::make_shared<braid::CallbackStore>(*o.store);
  BRAID_CAPI_ASSIGN(created, braid::ProcessGroup::Create(env, std::move(pg)));
  *group = new braid_group{std::move(created), nullptr};
  braid::last_error.clear();
  return BRAID_OK;
}

void braid_group_destroy(braid_group* group) { delete group; }
int braid_group_rank(const braid_group* group) { return group->comm().rank(); }
int braid_group_size(const braid_group* group) { return group->comm().size(); }
int braid_group_local_rank(const braid_group* group) {
  if (!group->sub) return group->group->env().local_rank;
  const braid::Communicator& c = *group->sub;
  return c.member() ? c.host_layout().local_rank_of[c.rank()] : -1;
}
int braid_group_local_size(const braid_group* group) {
  if (!group->sub) return group->group->env().local_world_size;
  const braid::Communicator& c = *group->sub;
  return c.member() ? static_cast<int>(c.host_layout().LocalGroup(c.rank()).size()) : 0;
}
const char* braid_group_transport(const braid_group* group) { return group->comm().transport_name(); }
int braid_group_is_member(const braid_group* group) { return group->comm().member() ? 1 : 0; }

namespace braid {
namespace {

braid_status Subgroup(absl::StatusOr<std::unique_ptr<Communicator>> made, braid_group** subgroup) {
  if (!made.ok()) return Fail(made.status());
  *subgroup = new braid_group{nullptr, std::move(*made)};
  last_error.clear();
  return BRAID_OK;
}

}  // namespace
}  // namespace braid

braid_status braid_group_split(braid_group* group, int color, int key, const char* name, braid_group** subgroup) {
  if (group == nullptr || subgroup == nullptr) return Invalid("braid_group_split: the group or result is NULL");
  return braid::Subgroup(group->comm().Split(color, key, name != nullptr ? name : ""), subgroup);
}

braid_status braid_group_new(braid_group* group, const int* ranks, int count, const char* name,
                             braid_group** subgroup) {
  if (group == nullptr || subgroup == nullptr) return Invalid("braid_group_new: the group or result is NULL");
  if (count <= 0 || ranks == nullptr) return Invalid(absl::StrCat("braid_group_new: ", count, " ranks at NULL"));
  return braid::Subgroup(group->comm().NewGroup(std::vector<int>(ranks, ranks + count), name != nullptr ? name : ""),
                         subgroup);
}

void braid_group_abort(braid_group* group, const char* reason) {
  const std::string why = reason != nullptr ? reason : "aborted by the caller";
  group->comm().Abort(absl::AbortedError(absl::StrCat("rank ", group->comm().rank(), ": braid_group_abort: ", why)));
}

void braid_call_options_init(braid_call_options* call) { *call = braid_call_options{}; }

braid_status braid_all_reduce(braid_group* group, const braid_buffer* in, const braid_buffer* out, braid_op op,
                              const braid_call_options* call, braid_work** work) {
  BRAID_CAPI_ASSIGN(reduce_op, braid::ToOp(op));
  return braid::InOut(group, in, out, call, work, [&](braid::Communicator& comm, auto& i, auto& o, auto& c) {
    return comm.AllReduce(i, o, reduce_op, c);
  });
}

braid_status braid_broadcast(braid_group* group, const braid_buffer* buffer, int root, const braid_call_options* call,
                             braid_work** work) {
  return braid::One(group, buffer, call, work,
                    [&](braid::Communicator& comm, auto& t, auto& c) { return comm.Broadcast(t, root, c); });
}

braid_status braid_reduce(braid_group* group, const braid_buffer* in, const braid_buffer* out, braid_op op, int root,
                          const braid_call_options* call, braid_work** work) {
  BRAID_CAPI_ASSIGN(reduce_op, braid::ToOp(op));
  return braid::InOut(group, in, out, call, work, [&](braid::Communicator& comm, auto& i, auto& o, auto& c) {
    return comm.Reduce(i, o, reduce_op, root, c);
  });
}

braid_status braid_all_gather(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                              const braid_call_options* call, braid_work** work) {
  return braid::InOut(group, in, out, call, work,
                      [&](braid::Communicator& comm, auto& i, auto& o, auto& c) { return comm.AllGather(i, o, c); });
}

braid_status braid_reduce_scatter(braid_group* group, const braid_buffer* in, const braid_buffer* out, braid_op op,
                                  const braid_call_options* call, braid_work** work) {
  BRAID_CAPI_ASSIGN(reduce_op, braid::ToOp(op));
  return braid::InOut(group, in, out, call, work, [&](braid::Communicator& comm, auto& i, auto& o, auto& c) {
    return comm.ReduceScatter(i, o, reduce_op, c);
  });
}

braid_status braid_all_to_all(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                              const braid_call_options* call, braid_work** work) {
  return braid::InOut(group, in, out, call, work,
                      [&](braid::Communicator& comm, auto& i, auto& o, auto& c) { return comm.AllToAll(i, o, c); });
}

braid_status braid_barrier(braid_group* group, const braid_call_options* call, braid_work** work) {
  if (group == nullptr) return Invalid("the group is NULL");
  BRAID_CAPI_ASSIGN(options, braid::ToCallOptions(call));
  return braid::Issue(group->comm().Barrier(options), work);
}

braid_status braid_send(braid_group* group, const braid_buffer* buffer, int peer, const braid_call_options* call,
                        braid_work** work) {
  return braid::One(group, buffer, call, work,
                    [&](braid::Communicator& comm, auto& t, auto& c) { return comm.Send(t, peer, c); });
}

braid_status braid_recv(braid_group* group, const braid_buffer* buffer, int peer, const braid_call_options* call,
                        braid_work** work) {
  return braid::One(group, buffer, call, work,
                    [&](braid::Communicator& comm, auto& t, auto& c) { return comm.Recv(t, peer, c); });
}

braid_status braid_work_test(braid_work* work, int* done) {
  if (work == nullptr) return Invalid("the work handle is NULL");
  const bool finished = work->handle->Test();
  if (done != nullptr) *done = finished ? 1 : 0;
  return finished ? Finish(work->handle->status()) : Finish(absl::OkStatus());
}

braid_status braid_work_wait(braid_work* work, double timeout_sec) {
  if (work == nullptr) return Invalid("the work handle is NULL");
  const braid::Deadline deadline = timeout_sec < 0 ? absl::InfiniteFuture() : braid::DeadlineIn(absl::Seconds(timeout_sec));
  return Finish(work->handle->Wait(deadline));
}

void braid_work_free(braid_work* work) { delete work; }

void braid_reducer_options_init(braid_reducer_options* options) {
  *options = braid_reducer_options{};
  options->bucket_cap_mb = 25;
  options->first_bucket_mb = 1;
}

braid_status braid_reducer_create(braid_group* group, const braid_buffer* gradients, int count,
                                  const braid_reducer_options* options, braid_reducer** reducer) {
  if (group == nullptr || reducer == nullptr) return Invalid("braid_reducer_create: the group or result is NULL");
  if (count < 0 || (count > 0 && gradients == nullptr)) {
    return Invalid(absl::StrCat("braid_reducer_create: ", count, " gradients at NULL"));
  }
  absl::Status status;
  std::vector<braid::Tensor> tensors = braid::ToTensors(gradients, count, status);
  if (!status.ok()) return Fail(status);
  braid::ReducerOptions ro;
  if (options != nullptr) {
    if (options->bucket_cap_mb > 0) ro.bucket_cap_mb = options->bucket_cap_mb;
    if (options->first_bucket_mb > 0) ro.first_bucket_mb = options->first_bucket_mb;
    ro.find_unused_parameters = options->find_unused_parameters != 0;
  }
  if (!group->group) {
    return Fail(absl::UnimplementedError(
        "braid_reducer_create: the reducer takes a group made by braid_group_create, not a subgroup"));
  }
  BRAID_CAPI_ASSIGN(created, braid::Reducer::Create(*group->group, std::move(tensors), std::move(ro)));
  *reducer = new braid_reducer{std::move(created), {}};
  braid::last_error.clear();
  return BRAID_OK;
}

void braid_reducer_destroy(braid_reducer* reducer) {
  if (reducer == nullptr) return;
  reducer->no_sync.clear();
  delete reducer;
}

braid_status braid_reducer_prepare(braid_reducer* reducer) {
  return Finish(reducer->reducer->PrepareForBackward());
}

braid_status braid_reducer_mark_ready(braid_reducer* reducer, int index) {
  return Finish(reducer->reducer->MarkReady(index));
}

braid_status braid_reducer_finalize(braid_reducer* reducer) { return Finish(reducer->reducer->Finalize()); }

braid_status braid_reducer_no_sync_begin(braid_reducer* reducer) {
  reducer->no_sync.push_back(reducer->reducer->NoSync());
  return Finish(absl::OkStatus());
}

braid_status braid_reducer_no_sync_end(braid_reducer* reducer) {
  if (reducer->no_sync.empty()) {
    return Fail(absl::FailedPreconditionError("braid_reducer_no_sync_end without a matching begin"));
  }
  reducer->no_sync.pop_back();
  return Finish(absl::OkStatus());
}

braid_status braid_broadcast_buffers(braid_group* group, const braid_buffer* buffers, int count, int root) {
  if (group == nullptr) return Invalid("the group is NULL");
  absl::Status status;
  std::vector<braid::Tensor> tensors = braid::ToTensors(buffers, count, status);
  if (!status.ok()) return Fail(status);
  if (!group->group) {
    return Fail(absl::UnimplementedError(
        "braid_broadcast_buffers: takes a group made by braid_group_create; on a subgroup use braid_broadcast"));
  }
  return Finish(braid::Reducer::BroadcastParameters(*group->group, tensors, root));
}

}  // extern "C"
