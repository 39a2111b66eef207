// braid::Store over the caller's functions (capi/braid.h, braid_store_ops):
// how a framework's own store (torch's c10d::Store) carries braid's rendezvous.
#ifndef BRAID_CAPI_CALLBACK_STORE_H_
#define BRAID_CAPI_CALLBACK_STORE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/status.h"
#include "capi/braid.h"
#include "store/store.h"

namespace braid::capi {

class CallbackStore : public Store {
 public:
  explicit CallbackStore(braid_store_ops ops) : ops_(ops) {}
  ~CallbackStore() override {
    if (ops_.release != nullptr) ops_.release(ops_.ctx);
  }
  CallbackStore(const CallbackStore&) = delete;
  CallbackStore& operator=(const CallbackStore&) = delete;

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

}  // namespace braid::capi

#endif  // BRAID_CAPI_CALLBACK_STORE_H_
