// Command-line flags for every braid binary, getopt_long style: "-b 8", "-b8",
// "--minbytes 8", "--minbytes=8". A binary lists its flags as a vector of
// `Flag` (name, value name, help, and a setter that parses and stores the
// value), calls ParseFlags once in main and prints Usage for -h / --help.
// Long names match with '-' and '_' interchangeable ("--batch-size" and
// "--batch_size" are the same flag). A switch (a flag with no value name) is
// "--x", or "--x=true|false" (1/0, yes/no, t/f, y/n) spelt out.
//
// The convention every binary follows: a bad flag prints one line on stderr
// ("program: <message>") and exits 2; --help prints Usage on stdout and exits 0.
//
// Plain single-threaded code; nothing blocks.
#ifndef BRAID_BASE_FLAGS_H_
#define BRAID_BASE_FLAGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace braid {

struct Flag {
  char short_name = 0;     // 0: long form only
  std::string long_name;   // without the dashes
  std::string value_name;  // empty: a switch
  std::string help;
  // Parses and stores the value (a switch gets "true" or "false");
  // kInvalidArgument with a message that does not repeat the flag's name
  // (ParseFlags adds it).
  std::function<absl::Status(absl::string_view)> set;
};

// Applies argv[1..] to `flags`, in order. -h / --help sets *help and stops.
// Errors are kInvalidArgument with one line naming the flag
// ("-e/--maxbytes: ..."): an unknown flag, a missing value, a value given to a
// short switch, an argument that is not a flag, or what the setter refused.
absl::Status ParseFlags(int argc, char** argv, const std::vector<Flag>& flags, bool* help);
// "usage: <program> [flags]", the summary, and one line per flag.
std::string Usage(absl::string_view program, absl::string_view summary, const std::vector<Flag>& flags);

}  // namespace braid

#endif  // BRAID_BASE_FLAGS_H_
