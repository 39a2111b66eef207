#include "store/store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"

namespace braid {

absl::StatusOr<int64_t> Store::Arrive(absl::string_view key, int64_t count, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(const int64_t arrival, Add(key, 1));
  const std::string all = absl::StrCat(key, "/all");
  if (arrival == count) BRAID_RETURN_IF_ERROR(Set(all, ""));
  BRAID_RETURN_IF_ERROR(Wait({all}, deadline));
  return arrival;
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  BRAID_CHECK(base_ != nullptr) << "PrefixStore(\"" << prefix_ << "\") over a null store";
}

std::string PrefixStore::Prefixed(absl::string_view key) const {
  return absl::StrCat(prefix_, "/", key);
}

std::vector<std::string> PrefixStore::Prefixed(absl::Span<const std::string> keys) const {
  std::vector<std::string> result;
  result.reserve(keys.size());
  for (const std::string& key : keys) result.push_back(Prefixed(key));
  return result;
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(Prefixed(key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key, Deadline deadline) {
  return base_->Get(Prefixed(key), deadline);
}

absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return base_->Add(Prefixed(key), delta);
}

absl::StatusOr<std::string> PrefixStore::CompareSet(absl::string_view key,
                                                    absl::string_view expected,
                                                    absl::string_view desired) {
  return base_->CompareSet(Prefixed(key), expected, desired);
}

absl::StatusOr<int64_t> PrefixStore::Arrive(absl::string_view key, int64_t count, Deadline deadline) {
  return base_->Arrive(Prefixed(key), count, deadline);
}

absl::Status PrefixStore::Wait(absl::Span<const std::string> keys, Deadline deadline) {
  return base_->Wait(Prefixed(keys), deadline);
}

absl::StatusOr<bool> PrefixStore::Check(absl::Span<const std::string> keys) {
  return base_->Check(Prefixed(keys));
}

absl::StatusOr<bool> PrefixStore::Delete(absl::string_view key) {
  return base_->Delete(Prefixed(key));
}

absl::StatusOr<int64_t> PrefixStore::NumKeys() { return base_->NumKeys(); }

absl::StatusOr<std::optional<std::string>> GetIfSet(Store& store, absl::string_view key) {
  const std::string name(key);
  absl::StatusOr<bool> exists = store.Check({name});
  if (!exists.ok()) return exists.status();
  if (!*exists) return std::optional<std::string>();
  absl::StatusOr<std::string> value = store.Get(name, Deadline());
  if (!value.ok()) return value.status();
  return std::optional<std::string>(std::move(*value));
}

}  // namespace braid
