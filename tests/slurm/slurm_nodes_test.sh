#!/usr/bin/env bash
# braid under a real multi-node Slurm on one machine: the namespace bed of
# tests/netns/ (3 "hosts", each a network namespace with its own address and
# host name), munged, slurmctld on host 1 and one slurmd per host, each in
# its host's namespace; srun, sinfo and squeue run on host 1 as on a login
# node. Then:
#   (a) srun -N3 braidrun (one agent per node, c10d rendezvous) runs
#       train_mlp --check on 6 ranks with BRAID_ALGO=hierarchical: every rank
#       bit-identical and equal to one process trained on the combined batches;
#   (b) the same job with --restart-policy=replace and train_mlp
#       --recovery=in-place --check: host 3's agent is SIGKILLed mid-training
#       (its workers die with it), the other two nodes miss its heartbeats
#       and go on at 4 ranks without a restart; a new step on host 3 (srun
#       --overlap into the same job, as when a node comes back) takes the lost
#       node's place and the group grows back to 6; at the end rank 0 replays
#       every step at the world size it ran at in one process and the
#       parameters must match (--check), and every step log must show 6, then
#       4, then 6 ranks.
# Skipped (a WARN, counted as a pass) when not root or when Slurm, munge or
# iproute2 is missing (tools/setup.sh installs them). Every wait is bounded;
# the daemons, the jobs and the bed are removed at exit, on failure too.
set -euo pipefail

braidrun=$PWD/$1
train=$PWD/$2
bed=$PWD/$3

test_name=slurm_nodes_test
# shellcheck source=tests/slurm/slurm_common.sh
source "$(dirname "$0")/slurm_common.sh"

require_root_and munged slurmctld slurmd srun scancel sinfo squeue ip nsenter unshare

hosts=3
name=bn$$x9  # netns_bed.sh reap removes the bed if this script is SIGKILLed
dir=$(mktemp -d /tmp/braid-slurmn.XXXXXX)
chmod 755 "$dir"  # munged refuses a socket in a directory others cannot enter
pids=()
on() { # on N CMD...: CMD on host N
  local n=$1
  shift
  "$bed" exec "$name" "$n" "$@"
}
cleanup() {
  on 1 scancel --quiet --user=root >/dev/null 2>&1 || true
  for _ in $(seq 1 50); do
    [[ -z $(on 1 squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.1
  done
  stop_daemons
  "$bed" down "$name" >/dev/null 2>&1 || true
  for ((n = 1; n <= hosts; n++)); do rm -rf "/etc/netns/${name}_h$n"; done
  rm -rf "$dir"
}
trap cleanup EXIT

"$bed" reap
"$bed" up "$name" "$hosts" >"$dir/bed.log" 2>&1 || fail "the namespace bed did not come up: $(cat "$dir/bed.log")"
# Each host resolves every host's name (ip netns exec binds /etc/netns/NS/hosts over /etc/hosts).
for ((n = 1; n <= hosts; n++)); do
  mkdir -p "/etc/netns/${name}_h$n"
  {
    echo "127.0.0.1 localhost"
    for ((m = 1; m <= hosts; m++)); do echo "10.78.0.$m host$m"; done
  } >"/etc/netns/${name}_h$n/hosts"
done

# One munged for every host: its socket is a file, and the hosts share the file system.
start_munged

mkdir -p "$dir/state" "$dir/steps_b" "$dir/signals"
cat >"$dir/slurm.conf" <<EOF
ClusterName=braidnodes
SlurmctldHost=host1(10.78.0.1)
SlurmctldPort=6817
SlurmdPort=6818
SlurmdSpoolDir=$dir/spool.%n
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmdLogFile=$dir/slurmd.%n.log
$(slurm_conf_common)
NodeName=host1 NodeAddr=10.78.0.1 CPUs=4 State=UNKNOWN
NodeName=host2 NodeAddr=10.78.0.2 CPUs=4 State=UNKNOWN
NodeName=host3 NodeAddr=10.78.0.3 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=host[1-3] Default=YES MaxTime=10 State=UP
EOF
export SLURM_CONF=$dir/slurm.conf
on 1 slurmctld -D -i -f "$SLURM_CONF" >"$dir/slurmctld.out.log" 2>&1 &
pids+=($!)
# slurmd enters its host's network namespace with nsenter, not ip netns
# exec: the latter mounts a fresh /sys, without the cgroup file systems that
# slurmd's cgroup plugin insists on. Its own host name, as on a real node.
for ((n = 1; n <= hosts; n++)); do
  mkdir -p "$dir/spool.host$n"
  nsenter --net="/run/netns/${name}_h$n" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "host$n" \
    slurmd -D -f "$SLURM_CONF" -N "host$n" >"$dir/slurmd.host$n.out.log" 2>&1 &
  pids+=($!)
done
state=""
for _ in $(seq 1 200); do
  state=$(on 1 sinfo -h -o %T 2>/dev/null | sort -u | tr '\n' ' ' || true)
  [[ $state == "idle " ]] && break
  sleep 0.2
done
[[ $state == "idle " ]] || fail "the $hosts nodes did not become idle within 40 s (sinfo says '$state')"
echo "slurm: slurmctld on host1, slurmd on host1-host$hosts, all idle"

# The test's own launch contract must not leak into the jobs (srun exports the environment).
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT BRAID_STORE_ADDR BRAID_STORE_PREFIX
export BRAID_JOB_SECRET=slurm-nodes-secret BRAID_ALGO=hierarchical BRAID_TIMEOUT_SEC=30
agent_flags=(--nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=10.78.0.1:29470)

# (a) srun -N3: one agent per node, 6 ranks, --check.
out=$(timeout 240 "$bed" exec "$name" 1 srun --time=4 -N3 --ntasks-per-node=1 --job-name=check \
  "$braidrun" "${agent_flags[@]}" --rdzv-id=check "$train" --check --check-steps=5 2>&1) ||
  fail "(a) srun braidrun train_mlp --check: exit $?: $out"
grep -q "check: 6 ranks, 5 steps" <<<"$out" || fail "(a) not 6 ranks: $out"
grep -q "check: PASSED" <<<"$out" || fail "(a) the check did not pass: $out"
echo "(a) srun -N3 braidrun train_mlp --check: 6 ranks on 3 nodes, hierarchical, check PASSED"

# (b) a node lost mid-training and back.
steps=$dir/steps_b
in_place=(--recovery=in-place --check --epochs=10 --samples=2048 --batch-size=16 --step-sleep-ms=40
  --step-log="$steps" --verify-steps)
replace=(--restart-policy=replace --max-restarts=4 --rdzv-id=inplace --nnodes=2:3
  --rdzv-conf=keep_alive_interval=0.5,keep_alive_max_attempt=3,last_call_timeout=5)
timeout 300 "$bed" exec "$name" 1 srun --time=8 -N3 --ntasks-per-node=1 --cpus-per-task=1 --job-name=inplace \
  "$braidrun" "${agent_flags[@]}" "${replace[@]}" "$train" "${in_place[@]}" >"$dir/inplace.log" 2>&1 &
srun_pid=$!
# Steps finished by the process of the steps file $1 (one process, one file).
file_steps() { [[ -f $1 ]] && wc -l <"$1" || echo 0; }
# A rank that runs on host1 (it survives): the RANK of a train_mlp there.
survivor=""
for _ in $(seq 1 600); do
  for pid in $(pgrep -x train_mlp); do
    env_of=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
    grep -qx "SLURMD_NODENAME=host1" <<<"$env_of" && survivor=$(sed -n 's/^RANK=//p' <<<"$env_of") && break
  done
  [[ -n $survivor ]] && break
  sleep 0.1
done
[[ -n $survivor ]] || fail "(b) no worker started on host1 within 60 s: $(cat "$dir/inplace.log")"
survivor_log=""
for _ in $(seq 1 900); do
  survivor_log=$(ls "$steps/$survivor".*.steps 2>/dev/null | head -n 1 || true)
  [[ -n $survivor_log ]] && (($(file_steps "$survivor_log") >= 30)) && break
  kill -0 "$srun_pid" 2>/dev/null || break
  sleep 0.1
done
(($(file_steps "$survivor_log") >= 30)) || fail "(b) rank $survivor did not finish 30 steps: $(cat "$dir/inplace.log")"
# host 3's agent: the braidrun whose environment names that node.
victim=""
for pid in $(pgrep -x braidrun); do
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURMD_NODENAME=host3" && grep -q inplace "/proc/$pid/cmdline" &&
    victim=$pid
done
[[ -n $victim ]] || fail "(b) no braidrun of the inplace job on host3"
job=$(on 1 squeue -h -n inplace -o %i)
kill -9 "$victim"
echo "(b) SIGKILLed host3's agent (pid $victim) after step $(file_steps "$survivor_log") of rank $survivor (on host1)"
# The survivors go on at 4 ranks: ten steps at world size 4.
at_four() { awk '$2 == 4' "$survivor_log" | wc -l; }
for _ in $(seq 1 600); do
  (($(at_four) >= 10)) && break
  sleep 0.1
done
(($(at_four) >= 10)) || fail "(b) the survivors did not go on at 4 ranks: $(cat "$dir/inplace.log")"
echo "(b) the survivors go on at 4 ranks"
# The node comes back: a new agent on host3, in the same job.
timeout 240 "$bed" exec "$name" 1 srun --jobid="$job" --overlap -N1 -n1 -w host3 --cpus-per-task=1 \
  "$braidrun" "${agent_flags[@]}" "${replace[@]}" "$train" "${in_place[@]}" >"$dir/rejoin.log" 2>&1 ||
  fail "(b) the agent back on host3 failed: exit $?: $(cat "$dir/rejoin.log")"
code=0
wait "$srun_pid" || code=$?
log=$(cat "$dir/inplace.log" "$dir/rejoin.log")
grep -q "check: PASSED" <<<"$log" || fail "(b) the replay check did not pass (srun exit $code): $log"
grep -q "missed 3 heartbeats" <<<"$log" || fail "(b) no agent declared host3's node lost: $log"
grep -q "6 -> 4 ranks" <<<"$log" || fail "(b) no shrink from 6 to 4 ranks: $log"
# (The new group's rank 0 reports a regroup; after the growth that may be a newcomer, which says it joined.)
(($(grep -c "joined the running group at step [0-9]* (epoch [0-9]* of the group, 6 ranks)" <<<"$log") == 2)) ||
  fail "(b) host3's two workers did not join a group of 6: $log"
grep -q "this agent takes its place" "$dir/rejoin.log" || fail "(b) the new agent did not take the lost node's slot: $log"
grep -q "restarting the workers" <<<"$log" && fail "(b) a restart happened: $log"
# The survivor's world sizes, step by step: 6 ..., 4 ..., 6 ... (and nothing else).
worlds=$(awk '{print $2}' "$survivor_log" | uniq | tr '\n' ' ')
[[ $worlds == "6 4 6 " ]] || fail "(b) rank $survivor's world sizes ran '$worlds', not '6 4 6 ': $log"
grep "check: .* steps replayed" <<<"$log" | sed 's/^/(b) /'
echo "(b) host3 lost and back: 6 -> 4 -> 6 ranks without a restart, replay check PASSED (srun exit $code)"
echo "slurm_nodes_test: ok"
