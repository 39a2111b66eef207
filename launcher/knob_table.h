// Every environment knob braid declares, known to braidrun without linking the
// layers that read them: //tools:knob_list prints the registry of a binary that
// links them all (base/env.h's AllEnvKnobs), and a genrule compiles its output
// (knobs.inc) in here. DESIGN.md's layer rule forbids the launcher to link
// collectives/ or runtime/; literals are all it takes from them.
//
// Plain data and a formatter; thread-safe, nothing blocks.
#ifndef BRAID_LAUNCHER_KNOB_TABLE_H_
#define BRAID_LAUNCHER_KNOB_TABLE_H_

#include <string>

#include "absl/types/span.h"

namespace braid {

struct KnobInfo {
  const char* name;
  const char* default_value;  // "" when the knob has none
  const char* help;
};

// Every knob in braid, sorted by name (TORCHELASTIC_RUN_ID too, which the
// flight recorder reads).
absl::Span<const KnobInfo> AllKnobInfo();

// What `braidrun --print-env` prints: per knob, "NAME=value" (from this
// process's environment) or "NAME (unset, default X)", then its help indented.
std::string PrintEnvText();

}  // namespace braid

#endif  // BRAID_LAUNCHER_KNOB_TABLE_H_
