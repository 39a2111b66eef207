# What braid's Slurm tests share (sourced): skip and fail, munged, and the
# slurm.conf lines every test's cluster has. The sourcing test sets
# test_name, and dir (its temporary directory) before it calls fail.

skip() {
  echo "WARN: $test_name skipped: $*"
  exit 0
}

fail() {
  echo "$test_name: FAILED: $*" >&2
  for log in "${dir:-/nonexistent}"/*.log; do
    [[ -f $log ]] && { echo "--- $log" >&2; tail -n 25 "$log" >&2; }
  done
  exit 1
}

# Skips unless root and every tool named is installed.
require_root_and() {
  [[ $(id -u) -eq 0 ]] || skip "needs root (slurmd starts jobs as any user)"
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null ||
      skip "$tool is not installed (tools/setup.sh installs slurmctld, slurmd, slurm-client, munge and iproute2)"
  done
}

# munged with its own key, socket and files in $dir (its pid in $dir/munged.pid).
start_munged() {
  head -c 1024 /dev/urandom >"$dir/munge.key"
  chmod 400 "$dir/munge.key"
  munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" || fail "munged did not start"
}

# The slurm.conf lines that do not name hosts, ports or per-node files.
slurm_conf_common() {
  cat <<EOC
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# More CPUs than a 2-core machine has: slurmd believes the configuration, not the hardware.
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
PropagateResourceLimits=NONE
KillWait=5
EOC
}

# Stops the daemons whose pids are in the array pids (newest first), and munged.
stop_daemons() {
  local i pid
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  [[ -f $dir/munged.pid ]] && kill "$(cat "$dir/munged.pid")" 2>/dev/null || true
  for pid in "${pids[@]}"; do timeout 10 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -9 "$pid" 2>/dev/null || true; done
}
