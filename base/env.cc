#include "base/env.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/mutex.h"

namespace braid {
namespace {

struct Registry {
  absl::Mutex mu;
  std::vector<const EnvKnob*> knobs ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // never destroyed: knobs live to exit
  return *registry;
}

absl::Status Malformed(const EnvKnob& knob, const std::string& value, const char* expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("environment variable ", knob.name(), "=\"", value, "\" is not ", expected));
}

}  // namespace

EnvKnob::EnvKnob(const char* name, const char* default_value, const char* help)
    : name_(name), default_value_(default_value), help_(help) {
  Registry& registry = GetRegistry();
  MutexLock lock(&registry.mu);
  registry.knobs.push_back(this);
}

bool EnvKnob::IsSet() const { return std::getenv(name_) != nullptr; }

std::string EnvKnob::String() const {
  const char* value = std::getenv(name_);
  return value != nullptr ? std::string(value) : std::string(default_value_);
}

absl::StatusOr<int64_t> EnvKnob::Int() const {
  const std::string value = String();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed)) return Malformed(*this, value, "an integer");
  return parsed;
}

absl::StatusOr<double> EnvKnob::Double() const {
  const std::string value = String();
  double parsed = 0;
  if (!absl::SimpleAtod(value, &parsed)) return Malformed(*this, value, "a number");
  return parsed;
}

absl::StatusOr<bool> EnvKnob::Bool() const {
  const std::string value = absl::AsciiStrToLower(String());
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off" || value.empty()) {
    return false;
  }
  return Malformed(*this, value, "a boolean (1/0, true/false, yes/no, on/off)");
}

absl::StatusOr<absl::Duration> EnvKnob::Seconds() const {
  const std::string value = String();
  double seconds = 0;
  if (!absl::SimpleAtod(value, &seconds) || !(seconds >= 0)) {
    return Malformed(*this, value, "a non-negative number of seconds");
  }
  return absl::Seconds(seconds);
}

std::vector<const EnvKnob*> AllEnvKnobs() {
  Registry& registry = GetRegistry();
  std::vector<const EnvKnob*> knobs;
  {
    MutexLock lock(&registry.mu);
    knobs = registry.knobs;
  }
  std::sort(knobs.begin(), knobs.end(),
            [](const EnvKnob* a, const EnvKnob* b) { return std::strcmp(a->name(), b->name()) < 0; });
  return knobs;
}

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

EnvLookup MapEnv(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace braid
