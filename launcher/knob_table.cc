#include "launcher/knob_table.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace braid {
namespace {

constexpr KnobInfo kKnobs[] = {
#include "launcher/knobs.inc"
};

}  // namespace

absl::Span<const KnobInfo> AllKnobInfo() { return kKnobs; }

std::string PrintEnvText() {
  std::string text;
  for (const KnobInfo& knob : kKnobs) {
    const char* value = std::getenv(knob.name);
    if (value != nullptr) {
      absl::StrAppend(&text, knob.name, "=", value, "\n");
    } else if (*knob.default_value != '\0') {
      absl::StrAppend(&text, knob.name, " (unset, default ", knob.default_value, ")\n");
    } else {
      absl::StrAppend(&text, knob.name, " (unset, no default)\n");
    }
    absl::StrAppend(&text, "    ", knob.help, "\n");
  }
  return text;
}

}  // namespace braid
