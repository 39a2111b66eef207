// The C API (capi/braid.h): groups, subgroups and the reducer, over
// runtime/ProcessGroup, the Communicator and the Reducer; the collectives are
// in braid_calls.cc. Every entry point catches nothing: braid's C++ does not
// throw, it returns absl::Status, which becomes a code here and a
// thread-local message.
#include "capi/braid.h"

#include <algorithm>
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
#include "base/launch_env.h"
#include "capi/callback_store.h"
#include "capi/handles.h"
#include "collectives/communicator.h"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "runtime/worker_env.h"
#include "tensor/mappable_memory.h"
#include "tensor/tensor.h"

namespace braid::capi {
namespace {

constexpr char kVersion[] = "0.4.0";

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

braid_status Subgroup(absl::StatusOr<std::unique_ptr<Communicator>> made, braid_group** subgroup) {
  if (!made.ok()) return Fail(made.status());
  *subgroup = new braid_group{nullptr, std::move(*made)};
  LastError().clear();
  return BRAID_OK;
}

}  // namespace
}  // namespace braid::capi

using braid::capi::Fail;
using braid::capi::Finish;
using braid::capi::Invalid;

extern "C" {

const char* braid_version(void) { return braid::capi::kVersion; }
int braid_abi_version(void) { return BRAID_ABI_VERSION; }
const char* braid_last_error(void) { return braid::capi::LastError().c_str(); }

braid_status braid_mem_alloc(size_t bytes, void** data) {
  if (data == nullptr) return Invalid("braid_mem_alloc: the result pointer is NULL");
  *data = nullptr;
  if (bytes == 0) return Invalid("braid_mem_alloc: 0 bytes");
  BRAID_CAPI_ASSIGN(memory, braid::AllocateMappable(bytes));
  *data = memory;
  braid::capi::LastError().clear();
  return BRAID_OK;
}

void braid_mem_free(void* data) {
  if (data != nullptr) braid::FreeMappable(static_cast<std::byte*>(data));
}

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
  braid::ProcessGroupOptions pg;
  // First: from here on it owns the caller's ctx (its release runs on every path).
  if (o.store != nullptr) pg.store = std::make_shared<braid::capi::CallbackStore>(*o.store);
  BRAID_CAPI_ASSIGN(env, braid::capi::EnvFor(o));
  if (o.timeout_sec > 0) pg.timeout = absl::Seconds(o.timeout_sec);
  if (o.transport != nullptr) pg.transport = o.transport;
  BRAID_CAPI_ASSIGN(created, braid::ProcessGroup::Create(env, std::move(pg)));
  *group = new braid_group{std::move(created), nullptr};
  braid::capi::LastError().clear();
  return BRAID_OK;
}

void braid_group_retain(braid_group* group) { group->references.fetch_add(1, std::memory_order_relaxed); }

void braid_group_destroy(braid_group* group) {
  if (group != nullptr && group->references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete group;
}
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

braid_status braid_group_split(braid_group* group, int color, int key, const char* name, braid_group** subgroup) {
  if (group == nullptr || subgroup == nullptr) return Invalid("braid_group_split: the group or result is NULL");
  return braid::capi::Subgroup(group->comm().Split(color, key, name != nullptr ? name : ""), subgroup);
}

braid_status braid_group_new(braid_group* group, const int* ranks, int count, const char* name,
                             braid_group** subgroup) {
  if (group == nullptr || subgroup == nullptr) return Invalid("braid_group_new: the group or result is NULL");
  if (count <= 0 || ranks == nullptr) return Invalid(absl::StrCat("braid_group_new: ", count, " ranks at NULL"));
  return braid::capi::Subgroup(group->comm().NewGroup(std::vector<int>(ranks, ranks + count), name != nullptr ? name : ""),
                         subgroup);
}

void braid_group_abort(braid_group* group, const char* reason) {
  const std::string why = reason != nullptr ? reason : "aborted by the caller";
  group->comm().Abort(absl::AbortedError(absl::StrCat("rank ", group->comm().rank(), ": braid_group_abort: ", why)));
}

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
  std::vector<braid::Tensor> tensors = braid::capi::ToTensors(gradients, count, status);
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
  braid::capi::LastError().clear();
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
  std::vector<braid::Tensor> tensors = braid::capi::ToTensors(buffers, count, status);
  if (!status.ok()) return Fail(status);
  if (!group->group) {
    return Fail(absl::UnimplementedError(
        "braid_broadcast_buffers: takes a group made by braid_group_create; on a subgroup use braid_broadcast"));
  }
  return Finish(braid::Reducer::BroadcastParameters(*group->group, tensors, root));
}

}  // extern "C"
