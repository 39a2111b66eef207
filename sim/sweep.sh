#!/usr/bin/env bash
# braid_sim over the example clusters, 8 to 16,384 ranks (65,536 for the
# hierarchical schedule, at 8 B and 64 KiB: its ring across 8,192 hosts
# sends a billion messages from 128 KiB on), the tables in $OUT, plots in
# sim/plots/.
#   sim/sweep.sh [BRAID_SIM]     (default bazel-bin/sim/braid_sim)
set -euo pipefail
cd "$(dirname "$0")/.."
sim=${1:-bazel-bin/sim/braid_sim}
out=${OUT:-bench/out/sim}
mkdir -p "$out" sim/plots
sizes=8,64K,1M,64M,1G
for cluster in cpu_fat_tree gpu_rails; do
  file=sim/clusters/$cluster.toml
  "$sim" --cluster="$file" --ranks=8,64,512,4096 --sizes=$sizes --algorithms=ring,tree,rhd,hierarchical,auto \
    --csv="$out/$cluster.csv" --table="$out/$cluster.rows" | tee "$out/$cluster.txt"
  # 16,384 ranks: a ring sends 2 n (n - 1) messages (537 million); rhd and hierarchical.
  "$sim" --cluster="$file" --ranks=16384 --sizes=$sizes --algorithms=rhd,hierarchical,auto \
    --csv="$out/$cluster.16k.csv" | tee -a "$out/$cluster.txt"
  "$sim" --cluster="$file" --ranks=65536 --sizes=8,64K --algorithms=hierarchical \
    --csv="$out/$cluster.64k.csv" | tee -a "$out/$cluster.txt"
  (head -1 "$out/$cluster.csv"; tail -q -n +2 "$out/$cluster.csv" "$out/$cluster.16k.csv" "$out/$cluster.64k.csv") \
    >"$out/$cluster.all.csv"
  /usr/bin/python3 sim/plot_sim.py "$out/$cluster.all.csv" "sim/plots/$cluster.png" "braid_sim: all-reduce on $cluster"
done
