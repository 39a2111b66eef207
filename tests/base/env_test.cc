// Tests of base/env.h: knob parsing, defaults, errors naming the variable, and
// the registry of every knob linked in.
#include "base/env.h"

#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/logging.h"
#include "catch2/catch.hpp"
#include "tests/harness/scoped_env.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kIntKnob, "BRAID_TEST_ENV_INT", "17", "An integer knob for env_test.");
BRAID_ENV_KNOB(kBoolKnob, "BRAID_TEST_ENV_BOOL", "false", "A boolean knob for env_test.");
BRAID_ENV_KNOB(kSecondsKnob, "BRAID_TEST_ENV_SECONDS", "2.5", "A seconds knob for env_test.");
BRAID_ENV_KNOB(kDoubleKnob, "BRAID_TEST_ENV_DOUBLE", "0.25", "A number knob for env_test.");

void CheckMalformed(const absl::Status& status, const char* name) {
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), name));
}

TEST_CASE("EnvKnob: unset gives the default", "[base][env]") {
  testing::ScopedEnv env({"BRAID_TEST_ENV_INT", "BRAID_TEST_ENV_BOOL", "BRAID_TEST_ENV_SECONDS", "BRAID_TEST_ENV_DOUBLE"});
  CHECK_FALSE(kIntKnob.IsSet());
  CHECK(kIntKnob.String() == "17");
  CHECK(kIntKnob.Int().value() == 17);
  CHECK(kBoolKnob.Bool().value() == false);
  CHECK(kSecondsKnob.Seconds().value() == absl::Milliseconds(2500));
  CHECK(kDoubleKnob.Double().value() == 0.25);
  CHECK(std::string(kIntKnob.name()) == "BRAID_TEST_ENV_INT");
  CHECK(std::string(kIntKnob.default_value()) == "17");
  CHECK(std::string(kIntKnob.help()) == "An integer knob for env_test.");
}

TEST_CASE("EnvKnob: Int parses what setenv set, each call afresh", "[base][env]") {
  {
    testing::ScopedEnv env({"BRAID_TEST_ENV_INT"});
    env.Set("BRAID_TEST_ENV_INT", "42");
    CHECK(kIntKnob.IsSet());
    CHECK(kIntKnob.Int().value() == 42);
  }
  {
    testing::ScopedEnv env({"BRAID_TEST_ENV_INT"});
    env.Set("BRAID_TEST_ENV_INT", "-9000000000");
    CHECK(kIntKnob.Int().value() == -9000000000LL);
  }
  for (const char* bad : {"", "twelve", "12abc", "1.5", "99999999999999999999"}) {
    CAPTURE(bad);
    testing::ScopedEnv env({"BRAID_TEST_ENV_INT"});
    env.Set("BRAID_TEST_ENV_INT", bad);
    CHECK(kIntKnob.IsSet());
    CheckMalformed(kIntKnob.Int().status(), "BRAID_TEST_ENV_INT");
  }
}

TEST_CASE("EnvKnob: Bool accepts 1/0, true/false, yes/no, on/off in any case", "[base][env]") {
  for (const char* yes : {"1", "true", "TRUE", "Yes", "on"}) {
    CAPTURE(yes);
    testing::ScopedEnv env({"BRAID_TEST_ENV_BOOL"});
    env.Set("BRAID_TEST_ENV_BOOL", yes);
    CHECK(kBoolKnob.Bool().value() == true);
  }
  for (const char* no : {"0", "false", "No", "OFF", ""}) {
    CAPTURE(no);
    testing::ScopedEnv env({"BRAID_TEST_ENV_BOOL"});
    env.Set("BRAID_TEST_ENV_BOOL", no);
    CHECK(kBoolKnob.Bool().value() == false);
  }
  for (const char* bad : {"2", "maybe", "tru"}) {
    CAPTURE(bad);
    testing::ScopedEnv env({"BRAID_TEST_ENV_BOOL"});
    env.Set("BRAID_TEST_ENV_BOOL", bad);
    CheckMalformed(kBoolKnob.Bool().status(), "BRAID_TEST_ENV_BOOL");
  }
}

TEST_CASE("EnvKnob: Seconds and Double parse numbers", "[base][env]") {
  {
    testing::ScopedEnv env({"BRAID_TEST_ENV_SECONDS"});
    env.Set("BRAID_TEST_ENV_SECONDS", "0.25");
    CHECK(kSecondsKnob.Seconds().value() == absl::Milliseconds(250));
  }
  {
    testing::ScopedEnv env({"BRAID_TEST_ENV_SECONDS"});
    env.Set("BRAID_TEST_ENV_SECONDS", "30");
    CHECK(kSecondsKnob.Seconds().value() == absl::Seconds(30));
  }
  {
    testing::ScopedEnv env({"BRAID_TEST_ENV_SECONDS"});
    env.Set("BRAID_TEST_ENV_SECONDS", "0");
    CHECK(kSecondsKnob.Seconds().value() == absl::ZeroDuration());
  }
  for (const char* bad : {"-1", "soon", "10s", "nan", ""}) {
    CAPTURE(bad);
    testing::ScopedEnv env({"BRAID_TEST_ENV_SECONDS"});
    env.Set("BRAID_TEST_ENV_SECONDS", bad);
    CheckMalformed(kSecondsKnob.Seconds().status(), "BRAID_TEST_ENV_SECONDS");
  }
  {
    testing::ScopedEnv env({"BRAID_TEST_ENV_DOUBLE"});
    env.Set("BRAID_TEST_ENV_DOUBLE", "1e-3");
    CHECK(kDoubleKnob.Double().value() == 1e-3);
  }
  {
    testing::ScopedEnv env({"BRAID_TEST_ENV_DOUBLE"});
    env.Set("BRAID_TEST_ENV_DOUBLE", "x");
    CheckMalformed(kDoubleKnob.Double().status(), "BRAID_TEST_ENV_DOUBLE");
  }
}

TEST_CASE("DefaultTimeout reads BRAID_TIMEOUT_SEC", "[base][env]") {
  {
    testing::ScopedEnv env({"BRAID_TIMEOUT_SEC"});
    CHECK(DefaultTimeout().value() == absl::Seconds(600));
  }
  {
    testing::ScopedEnv env({"BRAID_TIMEOUT_SEC"});
    env.Set("BRAID_TIMEOUT_SEC", "7.5");
    CHECK(DefaultTimeout().value() == absl::Milliseconds(7500));
  }
  {
    testing::ScopedEnv env({"BRAID_TIMEOUT_SEC"});
    env.Set("BRAID_TIMEOUT_SEC", "forever");
    CheckMalformed(DefaultTimeout().status(), "BRAID_TIMEOUT_SEC");
  }
}

TEST_CASE("ResolveTimeout: its own, else the inherited one, else BRAID_TIMEOUT_SEC", "[base][env]") {
  testing::ScopedEnv env({"BRAID_TIMEOUT_SEC"});
  env.Set("BRAID_TIMEOUT_SEC", "9");
  CHECK(ResolveTimeout(absl::Seconds(2), absl::Seconds(5)).value() == absl::Seconds(2));
  CHECK(ResolveTimeout(absl::nullopt, absl::Seconds(5)).value() == absl::Seconds(5));
  CHECK(ResolveTimeout(absl::nullopt).value() == absl::Seconds(9));
  env.Set("BRAID_TIMEOUT_SEC", "soon");
  CHECK(ResolveTimeout(absl::Seconds(2)).value() == absl::Seconds(2));  // the environment is not read
  CheckMalformed(ResolveTimeout(absl::nullopt).status(), "BRAID_TIMEOUT_SEC");
}

TEST_CASE("AllEnvKnobs lists every knob linked in, sorted by name", "[base][env]") {
  // Linking //base:logging and //base:deadline is not enough for a static
  // link to keep their objects: use something from each.
  (void)MinLogLevel();
  (void)DefaultTimeout();

  const std::vector<const EnvKnob*> knobs = AllEnvKnobs();
  std::vector<std::string> names;
  for (const EnvKnob* knob : knobs) names.push_back(knob->name());
  CAPTURE(names);
  auto has = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  CHECK(has("BRAID_TIMEOUT_SEC"));
  CHECK(has("BRAID_LOG_LEVEL"));
  CHECK(has("BRAID_TEST_ENV_INT"));
  CHECK(has("BRAID_TEST_ENV_BOOL"));
  CHECK(has("BRAID_TEST_ENV_SECONDS"));
  CHECK(has("BRAID_TEST_ENV_DOUBLE"));
  CHECK(std::is_sorted(names.begin(), names.end()));
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());  // each declared once
  for (const EnvKnob* knob : knobs) {
    CAPTURE(knob->name());
    CHECK(std::string(knob->help()).size() > 0);
    if (std::string(knob->name()) == "BRAID_TIMEOUT_SEC") CHECK(std::string(knob->default_value()) == "600");
  }
}

}  // namespace
}  // namespace braid
