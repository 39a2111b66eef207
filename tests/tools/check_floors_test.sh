#!/usr/bin/env bash
# tools/check_floors.py on small git trees made here: a clean one passes; a
# file over 450 lines, a function over 80, a listed entry that grew, one
# that is gone, and a long commit subject each fail it, named.
set -uo pipefail
check=$(realpath "$1")
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
failures=0

lines() { for ((i = 0; i < $1; ++i)); do echo "  x += $i;"; done; }

# A repository whose first commit is tagged as the rule's start.
make_tree() {
  rm -rf "$tree" && mkdir -p "$tree/tools" "$tree/base" "$tree/tests"
  cp "$check" "$tree/tools/check_floors.py"
  { echo "int Small() {"; lines 10; echo "}"; } > "$tree/base/small.cc"
  { echo "void TestHelper() {"; lines 600; echo "}"; } > "$tree/tests/long_test.cc"  # tests are exempt
  { echo "# debt"; echo "90 function base/old.cc int Old() {"; } > "$tree/tools/floors_debt.txt"
  { echo "int Old() {"; lines 88; echo "}"; } > "$tree/base/old.cc"
  git -C "$tree" init -q && git -C "$tree" add -A &&
    git -C "$tree" -c user.name=t -c user.email=t@t commit -qm "start" &&
    sed -i "s/^SUBJECTS_FROM = .*/SUBJECTS_FROM = '$(git -C "$tree" rev-parse HEAD)'/" "$tree/tools/check_floors.py"
}

commit() { git -C "$tree" add -A && git -C "$tree" -c user.name=t -c user.email=t@t commit -qm "$1"; }

expect() {  # what: "ok" or a message the check must print
  local out rc
  out=$(python3 "$tree/tools/check_floors.py" "$tree" 2>&1)
  rc=$?
  if [[ $1 == ok ]]; then
    [[ $rc -eq 0 ]] || { echo "FAIL: a clean tree was refused: $out"; failures=$((failures + 1)); }
  elif [[ $rc -eq 0 || $out != *"$1"* ]]; then
    echo "FAIL: expected the check to fail with '$1'; rc $rc: $out"
    failures=$((failures + 1))
  fi
}

make_tree; commit "a short subject"; expect ok
make_tree; { echo "int Big() {"; lines 81; echo "}"; } > "$tree/base/big.cc"; commit "add"
expect "function base/big.cc int Big() {: 83 lines, over 80"
make_tree; lines 451 > "$tree/base/long.h"; commit "add"; expect "file base/long.h: 451 lines, over 450"
make_tree; { echo "int Old() {"; lines 95; echo "}"; } > "$tree/base/old.cc"; commit "grow"
expect "grew past the 90 listed"
make_tree; rm "$tree/base/old.cc"; commit "remove"; expect "no longer over the limit"
make_tree; commit "$(printf 'x%.0s' {1..72})"; expect "subject of 72 characters, over 71"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "check_floors_test: ok"
