#!/usr/bin/env bash
# braid under a real Slurm, started by this test on this machine: munged (its
# own key and socket), slurmctld and slurmd (one node named after this host,
# 4 CPUs whatever the machine has), all state in one temporary directory.
# Then, through srun:
#   (a) srun -N1 -n1 braidrun --nproc-per-node=2 probe_worker: the agent takes
#       its defaults from SLURM_* (the run id is the job id) and both workers
#       all-reduce and check the sum;
#   (b) srun -n3 probe_worker: three tasks with no agent join from SLURM_PROCID,
#       SLURM_NTASKS and the node list, and check the sum;
#   (c) scancel --signal=USR1 (Slurm's preemption warning) to a braidrun step
#       with --signals-to-handle=SIGUSR1: rank 0 traps and records it, rank 1
#       ignores it and is SIGKILLed --shutdown-timeout later; braidrun exits
#       128+SIGUSR1.
# Skipped (a WARN, counted as a pass) when not root or when Slurm or munge is
# not installed (tools/setup.sh installs them). Every wait is bounded, and the
# daemons are stopped at exit, on failure too.
set -euo pipefail

braidrun=$PWD/$1
probe=$PWD/$2

test_name=slurm_test
# shellcheck source=tests/slurm/slurm_common.sh
source "$(dirname "$0")/slurm_common.sh"

require_root_and munged slurmctld slurmd srun scancel sinfo squeue python3

# Short: munge's and slurmd's Unix sockets live here (108-byte path limit).
dir=$(mktemp -d /tmp/braid-slurm.XXXXXX)
chmod 755 "$dir"  # munged refuses a socket in a directory others cannot enter
pids=()
cleanup() {
  # Jobs first (their slurmstepd outlive slurmd), then the daemons, newest first.
  scancel --quiet --user=root >/dev/null 2>&1 || true
  for _ in $(seq 1 50); do
    [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.1
  done
  stop_daemons
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

mkdir -p "$dir/state" "$dir/spool" "$dir/signals"
start_munged

# The node list names this host, as on a real cluster; a name that does not
# resolve would leave the workers no MASTER_ADDR to reach, so then localhost.
host=$(hostname -s)
getent hosts "$host" >/dev/null || host=localhost
cat >"$dir/slurm.conf" <<EOF
ClusterName=braidtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmdSpoolDir=$dir/spool
SlurmdPidFile=$dir/slurmd.pid
SlurmdLogFile=$dir/slurmd.log
$(slurm_conf_common)
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=5 State=UP
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >"$dir/slurmctld.out.log" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >"$dir/slurmd.out.log" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 1 150); do
  state=$(sinfo -h -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.2
done
[[ $state == idle ]] || fail "the node did not become idle within 30 s (sinfo says '$state')"

# The test's own launch contract must not leak into the jobs (srun exports the environment).
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT BRAID_STORE_ADDR BRAID_STORE_PREFIX
run_srun() { timeout 90 srun --time=1 --quit-on-interrupt "$@"; }

# (a) one braidrun agent per node; its run id comes from SLURM_JOB_ID.
out=$(run_srun -N1 -n1 --job-name=agent /bin/sh -c 'echo "job $SLURM_JOB_ID"; exec "$@"' sh \
  "$braidrun" --nproc-per-node=2 "$probe" --env --allreduce 2>&1) || fail "(a) srun braidrun: exit $?: $out"
job=$(sed -n 's/^job \([0-9]*\)$/\1/p' <<<"$out")
for r in 0 1; do
  grep -q "^\[rank $r\]: all-reduce ok: rank $r of 2 " <<<"$out" || fail "(a) rank $r did not all-reduce: $out"
done
grep -q "^\[rank 1\]: TORCHELASTIC_RUN_ID=$job\$" <<<"$out" || fail "(a) run id is not the job id $job: $out"
grep -q "^\[rank 1\]: LOCAL_WORLD_SIZE=2\$" <<<"$out" || fail "(a) LOCAL_WORLD_SIZE: $out"
echo "(a) srun braidrun --nproc-per-node=2: both ranks all-reduced, run id = job $job"

# (b) three tasks started by srun directly, no agent.
out=$(run_srun -n3 --job-name=direct "$probe" --allreduce 2>&1) || fail "(b) srun -n3 probe_worker: exit $?: $out"
for r in 0 1 2; do
  grep -q "^all-reduce ok: rank $r of 3 " <<<"$out" || fail "(b) rank $r did not all-reduce: $out"
done
echo "(b) srun -n3 probe_worker: ranks 0-2 of 3 all-reduced"

# (c) Slurm's preemption warning through braidrun.
signals=$dir/signals
run_srun -N1 -n1 --job-name=preempt "$braidrun" --nproc-per-node=2 --signals-to-handle=SIGUSR1,SIGTERM \
  --shutdown-timeout=3 "$probe" --trap=USR1 --signal-dir="$signals" --pid-dir="$signals" --ignore-rank=1 \
  --sleep=60 >"$dir/preempt.log" 2>&1 &
srun_pid=$!
for _ in $(seq 1 300); do
  [[ -f $signals/0.pid && -f $signals/1.pid ]] && break
  sleep 0.1
done
[[ -f $signals/0.pid && -f $signals/1.pid ]] || fail "(c) the workers did not start within 30 s: $(cat "$dir/preempt.log")"
job=$(squeue -h -n preempt -o %i)
[[ -n $job ]] || fail "(c) squeue does not list the preempt job"
sent=$(date +%s.%N)
scancel --signal=USR1 "$job" || fail "(c) scancel --signal=USR1 $job failed"
code=0
wait "$srun_pid" || code=$?
took=$(python3 -c "import time; print(f'{time.time() - $sent:.1f}')")
log=$(cat "$dir/preempt.log")
[[ $(cat "$signals/0.signal") == SIGUSR1 ]] || fail "(c) rank 0 did not record SIGUSR1: $log"
[[ ! -f $signals/1.signal ]] || fail "(c) rank 1 (ignoring SIGUSR1) wrote $signals/1.signal: $log"
grep -q "received SIGUSR1: forwarding it to the workers" <<<"$log" || fail "(c) braidrun did not forward SIGUSR1: $log"
[[ $code -eq $((128 + 10)) ]] || fail "(c) srun exited $code, not 138 (braidrun's 128+SIGUSR1): $log"
python3 -c "import sys; sys.exit(0 if 3 <= $took < 20 else 1)" ||
  fail "(c) took ${took}s: rank 1 should live until the 3 s --shutdown-timeout, then die of SIGKILL: $log"
echo "(c) scancel --signal=USR1: rank 0 trapped it, rank 1 was SIGKILLed after ${took}s, srun exit $code"
echo "slurm_test: ok"
