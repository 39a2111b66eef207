// braid_store_ops over torch's c10d::Store, so braid meets the other ranks
// through the store torch hands every backend.
#ifndef BRAID_PYTHON_TORCH_BACKEND_STORE_OPS_H_
#define BRAID_PYTHON_TORCH_BACKEND_STORE_OPS_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "capi/braid.h"
#include "python/torch_backend/errors.h"

namespace braid_torch {

// braid_store_ops over a c10d::Store (torch hands the backend creator a
// PrefixStore, so each process group's keys are its own). The store's verbs
// throw; here they become nonzero returns with the message kept for error(),
// per thread: braid reads it on the thread whose call failed.
class StoreOps {
 public:
  // The functions for braid_group_options.store: braid owns the returned
  // ctx (a reference to `store`) and releases it with the group.
  static braid_store_ops For(c10::intrusive_ptr<c10d::Store> store) {
    braid_store_ops ops{};
    ops.ctx = new StoreOps(std::move(store));
    ops.set = &StoreOps::Set;
    ops.get = &StoreOps::Get;
    ops.add = &StoreOps::Add;
    ops.check = &StoreOps::Check;
    ops.remove = &StoreOps::Remove;
    ops.error = &StoreOps::Error;
    ops.release = [](void* ctx) { delete static_cast<StoreOps*>(ctx); };
    return ops;
  }

 private:
  explicit StoreOps(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  static c10d::Store& StoreOf(void* ctx) { return *static_cast<StoreOps*>(ctx)->store_; }

  template <typename Body>
  static int Guard(const char* verb, const char* key, Body body) {
    try {
      body();
      return 0;
    } catch (const std::exception& e) {
      last_error_ = std::string("c10d store ") + verb + " \"" + key + "\": " + MessageOf(e);
      return 1;
    }
  }

  static int Set(void* ctx, const char* key, const void* value, size_t size) {
    return Guard("set", key, [&] {
      const auto* bytes = static_cast<const uint8_t*>(value);
      StoreOf(ctx).set(key, std::vector<uint8_t>(bytes, bytes + size));
    });
  }

  static int Get(void* ctx, const char* key, int64_t timeout_ms,
                 void (*sink)(void* sink_ctx, const void* value, size_t size), void* sink_ctx) {
    return Guard("get", key, [&] {
      c10d::Store& store = StoreOf(ctx);
      if (timeout_ms < 0) {
        store.wait({key});  // the store's own timeout
      } else if (timeout_ms == 0) {
        // c10d reads a zero timeout as "none": look once instead.
        if (!store.check({key})) Fail("not there and no time left to wait");
      } else {
        store.wait({key}, std::chrono::milliseconds(timeout_ms));
      }
      const std::vector<uint8_t> value = store.get(key);
      sink(sink_ctx, value.data(), value.size());
    });
  }

  static int Add(void* ctx, const char* key, int64_t delta, int64_t* result) {
    return Guard("add", key, [&] { *result = StoreOf(ctx).add(key, delta); });
  }

  static int Check(void* ctx, const char* const* keys, size_t count, int* exists) {
    return Guard("check", count > 0 ? keys[0] : "", [&] {
      *exists = StoreOf(ctx).check(std::vector<std::string>(keys, keys + count)) ? 1 : 0;
    });
  }

  static int Remove(void* ctx, const char* key, int* existed) {
    return Guard("delete", key, [&] { *existed = StoreOf(ctx).deleteKey(key) ? 1 : 0; });
  }

  static const char* Error(void*) { return last_error_.c_str(); }

  static inline thread_local std::string last_error_;

  const c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace braid_torch

#endif  // BRAID_PYTHON_TORCH_BACKEND_STORE_OPS_H_
