#!/usr/bin/env bash
# braid_sim's command line: a sweep over a cluster file prints every cell
# and the selector's choice, writes CSV and selector table rows; bad input
# exits 2 with one line naming it.
set -euo pipefail
sim=sim/braid_sim
out=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }

"$sim" --cluster=sim/clusters/cpu_fat_tree.toml --ranks=16,64 --sizes=8,1M,16M \
  --algorithms=ring,rhd,hierarchical,auto --csv="$out/cells.csv" --table="$out/rows.txt" >"$out/table.txt"
cat "$out/table.txt"
grep -q "^# braid_sim: allreduce over sim/clusters/cpu_fat_tree.toml (fat-tree, 8 ranks per host" "$out/table.txt" ||
  fail "no header"
rows=$(grep -cE '^ +(16|64) +[0-9]+ ' "$out/table.txt")
[[ $rows -eq 6 ]] || fail "expected 6 rows, got $rows"
# Every cell ran: 6 rows x 4 algorithms, with a time above zero.
cells=$(tail -n +2 "$out/cells.csv" | awk -F, '$5 > 0' | wc -l)
[[ $cells -eq 24 ]] || fail "expected 24 cells in the CSV, got $cells"
# The table rows: transport, ranks, bound, an algorithm the selector knows; the last row unbounded.
grep -vq '^#' "$out/rows.txt" || fail "no table rows"
while read -r transport ranks bound algorithm; do
  [[ $transport == "#" ]] && continue
  [[ $transport == tcp && ($ranks == 16 || $ranks == 64) && $bound =~ ^[0-9]+$ ]] || fail "bad row: $transport $ranks $bound"
  [[ $algorithm =~ ^(ring|rhd|hierarchical)$ ]] || fail "bad algorithm in row: $algorithm"
done <"$out/rows.txt"
for n in 16 64; do
  [[ $(grep "^tcp $n " "$out/rows.txt" | tail -1 | cut -d' ' -f3) == 0 ]] || fail "rows for $n do not end unbounded"
done

set +e
"$sim" --ranks=16 --sizes=12Q >"$out/bad.txt" 2>&1
code=$?
set -e
[[ $code -eq 2 ]] || fail "a bad size exited $code"
grep -q "^braid_sim: --sizes: 12Q$" "$out/bad.txt" || fail "bad size message: $(cat "$out/bad.txt")"
printf 'ranks_per_host = 2\nnic_speed = 1\n' >"$out/bad.toml"
set +e
"$sim" --cluster="$out/bad.toml" >"$out/bad.txt" 2>&1
code=$?
set -e
[[ $code -eq 2 ]] || fail "a bad cluster file exited $code"
grep -q "bad.toml: cluster line 2: unknown key nic_speed" "$out/bad.txt" || fail "bad cluster message: $(cat "$out/bad.txt")"
echo "braid_sim_test: ok"
