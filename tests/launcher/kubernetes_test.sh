#!/usr/bin/env bash
# The Kubernetes contract: what each pod of examples/kubernetes' Indexed Job
# gets (tools/k8s_pod_env.py renders it from the manifest), checked as data,
# then run: one braidrun agent per pod with exactly that environment and the
# manifest's command, except what needs a cluster (pod 0's DNS name becomes
# 127.0.0.1, its port a free one, the mounted secret a file here).
#   kubernetes_test.sh MANIFEST RENDER BRAIDRUN TRAIN_MLP
set -euo pipefail
manifest=$1 render=$2 braidrun=$3 train_mlp=$4
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }

pods=$(/usr/bin/python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d.get("kind") == "Job": print(d["spec"]["completions"])' "$manifest")
[[ $pods -ge 2 ]] || fail "the example should span nodes, has $pods pods"
mapfile -t argv < <(/usr/bin/python3 "$render" "$manifest" 0 argv)
[[ ${argv[0]} == braidrun ]] || fail "the pod runs ${argv[0]}, not braidrun"

# The contract, as data.
for ((i = 0; i < pods; i++)); do
  /usr/bin/python3 "$render" "$manifest" "$i" env >"$tmp/pod$i.env"
  cat "$tmp/pod$i.env"
  get() { grep "^$1=" "$tmp/pod$i.env" | cut -d= -f2-; }
  [[ $(get PET_NODE_RANK) == "$i" ]] || fail "pod $i: PET_NODE_RANK=$(get PET_NODE_RANK)"
  [[ $(get JOB_COMPLETION_INDEX) == "$i" ]] || fail "pod $i: JOB_COMPLETION_INDEX"
  [[ $(get PET_NNODES) == "$pods" ]] || fail "pod $i: PET_NNODES=$(get PET_NNODES), the job has $pods pods"
  [[ $(get PET_MASTER_ADDR) == braid-train-0.braid-train ]] || fail "pod $i: PET_MASTER_ADDR is not pod 0's name"
  [[ $(get PET_MASTER_PORT) =~ ^[0-9]+$ ]] || fail "pod $i: PET_MASTER_PORT"
  [[ -n $(get PET_RDZV_ID) && -n $(get BRAID_JOB_SECRET_FILE) ]] || fail "pod $i: no run id or secret"
done

# Run it: the manifest's command, braidrun and train_mlp from this build.
port=$(/usr/bin/python3 -c 'import socket
for p in range(20000, 60000, 7):
    try:
        for q in (p, p + 1):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
        print(p); break
    except OSError: pass')
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/secret"
pids=()
for ((i = 0; i < pods; i++)); do
  cmd=("$braidrun")
  for arg in "${argv[@]:1}"; do [[ $arg == train_mlp ]] && cmd+=("$train_mlp") || cmd+=("$arg"); done
  (
    while IFS= read -r line; do export "$line"; done <"$tmp/pod$i.env"
    export PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=$port BRAID_JOB_SECRET_FILE=$tmp/secret
    exec timeout 120 "${cmd[@]}"
  ) >"$tmp/pod$i.out" 2>"$tmp/pod$i.err" &
  pids+=($!)
done
status=0
for ((i = 0; i < pods; i++)); do
  wait "${pids[$i]}" || { status=1; echo "pod $i exited non-zero"; }
  sed "s/^/pod $i: /" "$tmp/pod$i.out" "$tmp/pod$i.err"
done
[[ $status -eq 0 ]] || fail "the job failed"
world=$((pods * 2))
grep -hq "\[rank 0\]: check: $world ranks" "$tmp"/pod*.out || fail "rank 0 did not see a world of $world"
grep -hq "\[rank 0\]: check: PASSED" "$tmp"/pod*.out || fail "train_mlp --check did not pass"
echo "kubernetes_test: ok ($pods pods, $world ranks)"
