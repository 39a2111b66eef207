// Environment knobs, each declared once next to the code that reads it:
//
//   BRAID_ENV_KNOB(kTimeoutKnob, "BRAID_TIMEOUT_SEC", "600",
//                  "Deadline for every collective and rendezvous wait, seconds.");
//   absl::StatusOr<int64_t> seconds = kTimeoutKnob.Int();
//
// Every declared knob registers itself, so a tool can list them all
// (AllEnvKnobs). Values are read from the environment on each call: cheap, and
// tests may setenv between calls. Knobs are read at setup time, never in hot loops.
#ifndef BRAID_BASE_ENV_H_
#define BRAID_BASE_ENV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace braid {

class EnvKnob {
 public:
  // Registers the knob; `name`, `default_value` and `help` must be literals
  // (they are kept by pointer).
  EnvKnob(const char* name, const char* default_value, const char* help);
  EnvKnob(const EnvKnob&) = delete;
  EnvKnob& operator=(const EnvKnob&) = delete;

  const char* name() const { return name_; }
  const char* default_value() const { return default_value_; }
  const char* help() const { return help_; }

  // True when the variable is set (even to "").
  bool IsSet() const;
  // The value, or the default when unset.
  std::string String() const;
  // Parsed values; a malformed value is kInvalidArgument naming the variable.
  absl::StatusOr<int64_t> Int() const;
  absl::StatusOr<double> Double() const;
  absl::StatusOr<bool> Bool() const;  // 1/0, true/false, yes/no, on/off
  // A number of seconds (fractions allowed) as a Duration.
  absl::StatusOr<absl::Duration> Seconds() const;

 private:
  const char* name_;
  const char* default_value_;
  const char* help_;
};

// Every knob linked into this binary, sorted by name.
std::vector<const EnvKnob*> AllEnvKnobs();

// Reads one environment variable (nullopt when unset), so that code which
// reads many of them (a scheduler's) can be tested with a map instead of
// setenv. ProcessEnv() reads this process's environment; MapEnv a fixed map.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnv();
EnvLookup MapEnv(std::map<std::string, std::string> values);

}  // namespace braid

#define BRAID_ENV_KNOB(var, name, default_value, help) \
  const ::braid::EnvKnob var(name, default_value, help)

#endif  // BRAID_BASE_ENV_H_
