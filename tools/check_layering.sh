#!/usr/bin/env bash
# The layering check (ARCHITECTURE.md, "Layers"): fails when a file or a
# Bazel target reaches a floor it may not use.
#
#   base                   uses nothing of braid
#   tensor                 base only (it knows no processes)
#   store                  base only
#   collectives/transport  base, tensor (never the algorithms or the communicator)
#   collectives            base, tensor, collectives/transport (never runtime, the store or the launcher)
#   runtime                base, tensor, store, collectives
#   launcher               base, store (it links no collectives, no runtime)
#   capi                   everything but the launcher (braid's C API over the runtime)
#   python                 capi only (the bindings link libbraid.so, never braid's C++)
#   bench, examples        everything but the launcher (and never the tests)
#   sim                    base, tensor, collectives (the Plans and the selector; no transport)
#
# Two checks: every #include "..." in the floor's sources, and (unless
# --includes-only, or without bazel) every target's dependencies from
# `bazel query --notool_deps` (a build-time tool, e.g. braidrun's knob list
# generator, may link more: it is not linked into the target).
#
#   tools/check_layering.sh                  # from the checkout: both checks
#   tools/check_layering.sh --includes-only [ROOT]
set -euo pipefail

includes_only=0
if [[ "${1:-}" == "--includes-only" ]]; then
  includes_only=1
  shift
fi
root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
cd "$root"

# floor | folders it must not include from (prefixes of workspace paths) | prefixes
# within those it may (its own folder inside a forbidden one)
rules=(
  "base|tensor/ store/ collectives/ runtime/ launcher/ capi/ python/ bench/ examples/ tests/ tools/"
  "tensor|store/ collectives/ runtime/ launcher/ capi/ python/ bench/ examples/ tests/"
  "store|tensor/ collectives/ runtime/ launcher/ capi/ python/ bench/ examples/ tests/"
  "collectives/transport|collectives/ runtime/ store/ launcher/ capi/ python/ bench/ examples/ tests/|collectives/transport/"
  "collectives|runtime/ store/ launcher/ capi/ python/ bench/ examples/ tests/"
  "runtime|launcher/ capi/ python/ bench/ examples/ tests/"
  "launcher|collectives/ runtime/ tensor/ capi/ python/ bench/ examples/ tests/"
  "capi|launcher/ python/ bench/ examples/ tests/"
  "python|base/ tensor/ store/ collectives/ runtime/ launcher/ bench/ examples/ tests/"
  "bench|launcher/ tests/"
  "examples|launcher/ tests/"
  "sim|runtime/ store/ launcher/ capi/ python/ bench/ examples/ tests/ collectives/transport/|collectives/transport/frame.h"
)

violations=0
report() {
  echo "check_layering: $*" >&2
  violations=$((violations + 1))
}

floors=()
for rule in "${rules[@]}"; do floors+=("${rule%%|*}"); done

for rule in "${rules[@]}"; do
  IFS='|' read -r floor forbidden allowed <<<"$rule"
  [[ -d "$floor" ]] || continue
  files=$(find "$floor" \( -name '*.h' -o -name '*.cc' -o -name '*.inc' -o -name '*.cu' \) -print | sort)
  # A floor inside this one (collectives/transport in collectives) has its own rule.
  for other in "${floors[@]}"; do
    if [[ "$other" == "$floor"/* ]]; then files=$(grep -v "^$other/" <<<"$files" || true); fi
  done
  for prefix in $forbidden; do
    while IFS= read -r hit; do
      [[ -n "$hit" ]] || continue
      included=$(sed -E 's/^[^"]*"([^"]*)".*$/\1/' <<<"${hit#*:*:}")
      permitted=0
      for allow in $allowed; do
        if [[ "$included" == "$allow"* ]]; then permitted=1; fi
      done
      [[ $permitted -eq 1 ]] || report "$floor may not use $prefix: $hit"
    done < <(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"${prefix}" $files /dev/null 2>/dev/null || true)
  done
done

# Bazel targets: what each floor's targets link (tools excluded).
if [[ $includes_only -eq 0 ]] && command -v bazel >/dev/null && [[ -f WORKSPACE ]]; then
  query_rules=(
    "//base/...|//tensor/... + //store/... + //collectives/... + //runtime/... + //launcher/..."
    "//tensor/...|//store/... + //collectives/... + //runtime/... + //launcher/..."
    "//store/...|//tensor/... + //collectives/... + //runtime/... + //launcher/..."
    "//collectives/transport/...|//collectives:* + //collectives/device/... + //collectives/programs/... + //runtime/... + //store/... + //launcher/..."
    "//collectives:*|//runtime/... + //store/... + //launcher/..."
    "//collectives/device/...|//runtime/... + //store/... + //launcher/..."
    "//collectives/programs/...|//runtime/... + //store/... + //launcher/..."
    "//runtime/...|//launcher/..."
    "//launcher/...|//collectives/... + //runtime/... + //tensor/..."
    "//capi/...|//launcher/... + //python/..."
    "//bench/...|//launcher/... + //tests/..."
    "//examples/...|//launcher/... + //tests/..."
    "//sim/...|//runtime/... + //store/... + //launcher/... + //capi/... + //python/... + //collectives:communicator"
    # The bindings reach braid only through libbraid.so, which links everything: their own edges count.
    "//python/...|//base/... + //tensor/... + //store/... + //collectives/... + //runtime/... + //capi:capi|1"
  )
  for rule in "${query_rules[@]}"; do
    IFS='|' read -r from to depth <<<"$rule"
    edges=$(bazel query --noshow_progress --notool_deps "deps($from${depth:+, $depth}) intersect ($to)" 2>/dev/null) ||
      { report "bazel query failed for $from"; continue; }
    while IFS= read -r target; do
      [[ -n "$target" ]] || continue
      report "a target under $from depends on $target"
    done <<<"$edges"
  done
fi

if [[ $violations -gt 0 ]]; then
  echo "check_layering: $violations forbidden edge(s); see ARCHITECTURE.md, \"Layers\"" >&2
  exit 1
fi
echo "check_layering: ok"
