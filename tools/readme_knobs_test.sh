#!/usr/bin/env bash
# Fails when README.md's knob table (between <!-- knobs:begin --> and
# <!-- knobs:end -->) differs from what //tools:knob_list --markdown prints
# now, that is from the knobs really declared in the code.
set -euo pipefail
knob_list=$1
readme=$2
[[ -x "$knob_list" && -f "$readme" ]] || { echo "usage: readme_knobs_test.sh KNOB_LIST README.md" >&2; exit 2; }
want=$(mktemp)
have=$(mktemp)
trap 'rm -f "$want" "$have"' EXIT
"$knob_list" --markdown > "$want"
awk '/<!-- knobs:end -->/ { inside = 0 } inside { print } /<!-- knobs:begin -->/ { inside = 1; n++ }
     END { if (n != 1) exit 1 }' "$readme" > "$have" || {
  echo "README.md has no (or more than one) <!-- knobs:begin --> ... <!-- knobs:end --> block" >&2
  exit 1
}
if ! diff -u "$have" "$want"; then
  echo >&2
  echo "README.md's knob table is out of date (- README, + the knobs in the code)." >&2
  echo "Regenerate it with: tools/update_readme_knobs.sh" >&2
  exit 1
fi
echo "README.md's knob table matches the $(grep -c '^| `' "$want") knobs in the code"
