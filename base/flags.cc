#include "base/flags.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace braid {
namespace {

const Flag* FindShort(const std::vector<Flag>& flags, char c) {
  for (const Flag& flag : flags) {
    if (flag.short_name == c) return &flag;
  }
  return nullptr;
}

// '-' and '_' are the same character in long names.
std::string Canonical(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

const Flag* FindLong(const std::vector<Flag>& flags, absl::string_view name) {
  const std::string wanted = Canonical(name);
  for (const Flag& flag : flags) {
    if (Canonical(flag.long_name) == wanted) return &flag;
  }
  return nullptr;
}

std::string FlagName(const Flag& flag) {
  if (flag.short_name == 0) return absl::StrCat("--", flag.long_name);
  return absl::StrCat("-", std::string(1, flag.short_name), "/--", flag.long_name);
}

absl::Status Apply(const Flag& flag, absl::string_view value) {
  absl::Status status = flag.set(value);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(FlagName(flag), ": ", status.message()));
}

// A switch's spelt-out value, as "true" or "false".
absl::Status ApplySwitch(const Flag& flag, absl::string_view value) {
  bool on = false;
  if (absl::SimpleAtob(value, &on)) return Apply(flag, on ? "true" : "false");
  return absl::InvalidArgumentError(
      absl::StrCat(FlagName(flag), ": \"", value, "\" is not a boolean (true/false, 1/0, yes/no)"));
}

}  // namespace

absl::Status ParseFlags(int argc, char** argv, const std::vector<Flag>& flags, bool* help) {
  *help = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    const Flag* flag = nullptr;
    absl::string_view value;
    bool has_value = false;
    bool short_form = false;
    if (arg == "-h" || arg == "--help") {
      *help = true;
      return absl::OkStatus();
    }
    if (absl::StartsWith(arg, "--") && arg.size() > 2) {
      absl::string_view name = arg.substr(2);
      const size_t eq = name.find('=');
      if (eq != absl::string_view::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      flag = FindLong(flags, name);
      if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    } else if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      short_form = true;
      flag = FindShort(flags, arg[1]);
      if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg.substr(0, 2), " (see --help)"));
      if (arg.size() > 2) {
        value = arg.substr(2);
        has_value = true;
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\" (flags only; see --help)"));
    }
    if (flag->value_name.empty()) {
      absl::Status status;
      if (!has_value) {
        status = Apply(*flag, "true");
      } else if (short_form) {
        // "-xyz" would read as bundled switches to a getopt user: refuse it rather than guess.
        status = absl::InvalidArgumentError(absl::StrCat(FlagName(*flag), " takes no value"));
      } else {
        status = ApplySwitch(*flag, value);
      }
      if (!status.ok()) return status;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(FlagName(*flag), " needs a value"));
      value = argv[++i];
    }
    absl::Status status = Apply(*flag, value);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::string Usage(absl::string_view program, absl::string_view summary, const std::vector<Flag>& flags) {
  std::string out = absl::StrCat("usage: ", program, " [flags]\n", summary, "\n\nflags:\n");
  for (const Flag& flag : flags) {
    std::string name = flag.short_name != 0 ? absl::StrCat("-", std::string(1, flag.short_name), ", --", flag.long_name)
                                            : absl::StrCat("    --", flag.long_name);
    if (!flag.value_name.empty()) absl::StrAppend(&name, " ", flag.value_name);
    absl::StrAppend(&out, absl::StrFormat("  %-30s %s\n", name, flag.help));
  }
  absl::StrAppend(&out, "  -h, --help                     this text\n");
  return out;
}

}  // namespace braid
