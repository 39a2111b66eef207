// Tests of base/flags.h: both value forms, short and long names, '-'/'_'
// spellings, switches, and the one-line errors (unknown flag, missing value,
// a refused value), and --help.
#include "base/flags.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

struct Values {
  int count = 0;
  std::string name = "default";
  bool verbose = false;
  int sets = 0;  // how many times any setter ran
};

std::vector<Flag> TestFlags(Values* v) {
  std::vector<Flag> flags;
  flags.push_back({'n', "count", "N", "how many", [v](absl::string_view s) -> absl::Status {
                     ++v->sets;
                     if (!absl::SimpleAtoi(s, &v->count) || v->count < 0) {
                       return absl::InvalidArgumentError(absl::StrCat("\"", s, "\" is not a count"));
                     }
                     return absl::OkStatus();
                   }});
  flags.push_back({0, "file_name", "NAME", "a name", [v](absl::string_view s) -> absl::Status {
                     ++v->sets;
                     v->name = std::string(s);
                     return absl::OkStatus();
                   }});
  flags.push_back({'v', "verbose", "", "a switch", [v](absl::string_view s) -> absl::Status {
                     ++v->sets;
                     v->verbose = s == "true";
                     return absl::OkStatus();
                   }});
  return flags;
}

// Parses `args` (argv[0] added) into *v.
absl::Status Parse(std::vector<std::string> args, Values* v, bool* help) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ParseFlags(static_cast<int>(args.size()), argv.data(), TestFlags(v), help);
}

TEST_CASE("ParseFlags: no flags keeps the defaults", "[base][flags]") {
  Values v;
  bool help = true;
  REQUIRE(Parse({}, &v, &help).ok());
  CHECK_FALSE(help);
  CHECK(v.count == 0);
  CHECK(v.name == "default");
  CHECK_FALSE(v.verbose);
}

TEST_CASE("ParseFlags: every value form sets the flag", "[base][flags]") {
  const std::vector<std::string> args = GENERATE(as<std::vector<std::string>>{},  //
                                                 std::vector<std::string>{"--count=7"},
                                                 std::vector<std::string>{"--count", "7"},
                                                 std::vector<std::string>{"-n", "7"},
                                                 std::vector<std::string>{"-n7"});
  Values v;
  bool help = false;
  REQUIRE(Parse(args, &v, &help).ok());
  CHECK(v.count == 7);
  CHECK_FALSE(help);
}

TEST_CASE("ParseFlags: '-' and '_' are the same in long names", "[base][flags]") {
  const std::string spelling = GENERATE("--file_name=x", "--file-name=x");
  Values v;
  bool help = false;
  REQUIRE(Parse({spelling}, &v, &help).ok());
  CHECK(v.name == "x");
}

TEST_CASE("ParseFlags: a value may be empty or start with a dash", "[base][flags]") {
  Values v;
  bool help = false;
  REQUIRE(Parse({"--file-name", "-x"}, &v, &help).ok());
  CHECK(v.name == "-x");
  REQUIRE(Parse({"--file-name="}, &v, &help).ok());
  CHECK(v.name.empty());
}

TEST_CASE("ParseFlags: switches", "[base][flags]") {
  Values v;
  bool help = false;
  REQUIRE(Parse({"--verbose"}, &v, &help).ok());
  CHECK(v.verbose);
  REQUIRE(Parse({"--verbose=false"}, &v, &help).ok());
  CHECK_FALSE(v.verbose);
  REQUIRE(Parse({"--verbose=1"}, &v, &help).ok());
  CHECK(v.verbose);
  REQUIRE(Parse({"-v", "-n", "3"}, &v, &help).ok());
  CHECK(v.verbose);
  CHECK(v.count == 3);  // a switch does not swallow the next argument

  absl::Status status = Parse({"--verbose=maybe"}, &v, &help);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "-v/--verbose"));
  CHECK(absl::StrContains(status.message(), "not a boolean"));
  status = Parse({"-vx"}, &v, &help);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "takes no value"));
}

TEST_CASE("ParseFlags: the last of repeated flags wins", "[base][flags]") {
  Values v;
  bool help = false;
  REQUIRE(Parse({"--count=1", "--count=2"}, &v, &help).ok());
  CHECK(v.count == 2);
}

TEST_CASE("ParseFlags: bad command lines are one-line kInvalidArgument", "[base][flags]") {
  struct Case {
    std::vector<std::string> args;
    std::string wanted;
  };
  const Case c = GENERATE(Case{{"--bogus"}, "unknown flag --bogus"},      //
                          Case{{"--bogus=1"}, "unknown flag --bogus"},    //
                          Case{{"-q"}, "unknown flag -q"},                //
                          Case{{"--count"}, "-n/--count needs a value"},  //
                          Case{{"-n"}, "-n/--count needs a value"},       //
                          Case{{"--file-name"}, "--file_name needs a value"},
                          Case{{"--count=abc"}, "-n/--count: \"abc\" is not a count"},
                          Case{{"stray"}, "unexpected argument \"stray\""},
                          Case{{"-"}, "unexpected argument \"-\""});
  Values v;
  bool help = false;
  const absl::Status status = Parse(c.args, &v, &help);
  INFO(status.message());
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), c.wanted));
  CHECK_FALSE(absl::StrContains(status.message(), "\n"));
  CHECK_FALSE(help);
}

TEST_CASE("ParseFlags: -h and --help stop parsing", "[base][flags]") {
  const std::string flag = GENERATE("-h", "--help");
  Values v;
  bool help = false;
  // What follows --help is not parsed (so "--help --bogus" still prints the help).
  REQUIRE(Parse({"--count=4", flag, "--bogus", "--count=5"}, &v, &help).ok());
  CHECK(help);
  CHECK(v.count == 4);
}

TEST_CASE("Usage: one line per flag with its help, and -h", "[base][flags]") {
  Values v;
  const std::string usage = Usage("prog", "does things", TestFlags(&v));
  CHECK(absl::StartsWith(usage, "usage: prog [flags]\ndoes things\n"));
  CHECK(absl::StrContains(usage, "-n, --count N"));
  CHECK(absl::StrContains(usage, "how many"));
  CHECK(absl::StrContains(usage, "    --file_name NAME"));
  CHECK(absl::StrContains(usage, "-v, --verbose "));
  CHECK(absl::StrContains(usage, "-h, --help"));
  CHECK(v.sets == 0);
}

}  // namespace
}  // namespace braid
