#!/usr/bin/env bash
# Rewrites README.md's knob table (between <!-- knobs:begin --> and
# <!-- knobs:end -->) from //tools:knob_list --markdown, the registry of every
# BRAID_ENV_KNOB linked into braid. Run it after adding, removing or changing
# a knob; //tools:readme_knobs_test fails until README matches.
#
#   tools/update_readme_knobs.sh            (from anywhere in the checkout)
#   BAZEL_FLAGS="--jobs=1" tools/update_readme_knobs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC2086
bazel build ${BAZEL_FLAGS:-} //tools:knob_list >&2
table=$(mktemp)
trap 'rm -f "$table" "$table.readme"' EXIT
bazel-bin/tools/knob_list --markdown > "$table"
awk -v table="$table" '
  /<!-- knobs:begin -->/ { print; while ((getline line < table) > 0) print line; skipping = 1; found++; next }
  /<!-- knobs:end -->/ { skipping = 0 }
  !skipping { print }
  END { if (found != 1) { print "update_readme_knobs: README.md needs exactly one <!-- knobs:begin --> marker" > "/dev/stderr"; exit 1 } }
' README.md > "$table.readme"
cat "$table.readme" > README.md
echo "update_readme_knobs: README.md's knob table is up to date" >&2
