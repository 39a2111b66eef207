#!/usr/bin/env bash
# braid_sim against the namespace bed: the same all-reduces measured on
# HOSTS hosts x 2 ranks (tools/netns_bench.sh, links shaped with tc) and
# predicted by braid_sim over sim/clusters/netns_bed.toml; prints both, the
# ratio predicted / measured, and whether it is within 15 % for the sizes
# where the links, not this VM's scheduling, set the time (FROM bytes on:
# below 2 MiB, 8 processes on 2 cores and TCP's own dynamics, which the
# model leaves out, move the bed's times by 2x).
#
#   tools/sim_validate.sh            # HOSTS=4, ring,tree,rhd,hierarchical, 8 B .. 8 MiB (32 MiB: MAXBYTES)
#   MEASURED=bench/out/netns_bench_h4.rows tools/sim_validate.sh   # reuse a bed run
#
# Knobs: HOSTS (4), ALGOS, MAXBYTES (8M), FROM (2097152), CLUSTER, MEASURED.
# Needs root (the bed); run it with nothing else on the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-4}
ALGOS=${ALGOS:-ring,tree,rhd,hierarchical}
MAXBYTES=${MAXBYTES:-8M}
FROM=${FROM:-2097152}
CLUSTER=${CLUSTER:-sim/clusters/netns_bed.toml}
MEASURED=${MEASURED:-}
out=bench/out/sim_validate
mkdir -p "$out"

if [[ -z "$MEASURED" ]]; then
  HOSTS=$HOSTS MPI=0 MAXBYTES=$MAXBYTES STEP=4 ITERS=${ITERS:-5} WARMUP=${WARMUP:-2} \
    tools/netns_bench.sh "$ALGOS" >&2 || { echo "sim_validate: the bed run failed" >&2; exit 1; }
  MEASURED=bench/out/netns_bench_h$HOSTS.rows
fi
bazel build //sim:braid_sim >&2 || exit 1
sizes=$(awk '{print $2}' "$MEASURED" | sort -n -u | paste -sd,)
bazel-bin/sim/braid_sim --cluster="$CLUSTER" --ranks=$((2 * HOSTS)) --sizes="$sizes" --algorithms="$ALGOS" \
  --csv="$out/predicted.csv" >"$out/predicted.txt" || exit 1

awk -F'[ ,]' -v from="$FROM" '
  FNR == NR { if (FNR > 1) predicted[$3, $2] = $5 * 1e6; next }
  { sub(/^braid\//, "", $1); measured[$1, $2] = $3; if (!($1 in seen)) { seen[$1] = 1; algos[++n] = $1 }
    if (!($2 in seens)) { seens[$2] = 1; sizes[++m] = $2 } }
  END {
    printf "| bytes |"; for (i = 1; i <= n; i++) printf " %s measured (us) | predicted | ratio |", algos[i]; printf "\n|---:|"
    for (i = 1; i <= n; i++) printf "---:|---:|---:|"; printf "\n"
    for (j = 1; j <= m; j++) {
      s = sizes[j]; printf "| %s |", s
      for (i = 1; i <= n; i++) {
        a = algos[i]; r = predicted[a, s] / measured[a, s]
        mark = s + 0 < from ? "" : (r >= 0.85 && r <= 1.15 ? " ok" : " OFF")
        if (s + 0 >= from) { cells++; if (mark == " ok") within++ }
        printf " %.0f | %.0f | %.2f%s |", measured[a, s], predicted[a, s], r, mark
      }
      printf "\n"
    }
    printf "\n%d of %d cells from %d bytes within 15 %%\n", within, cells, from
    exit within == cells ? 0 : 1
  }' "$out/predicted.csv" "$MEASURED"
