#!/usr/bin/env bash
# torchrun behind braidrun's command line, for run_python.sh:
#
#   torch_torchrun.sh --standalone --nproc-per-node=N PROGRAM [ARGS...]
#
# runs PROGRAM under Debian's torchrun (torch 1.13) as `torchrun --standalone`
# would, with two differences, both for this machine:
#   - the rendezvous store gets a free port, not --standalone's fixed 29400,
#     so tests running side by side do not meet in one job;
#   - --redirects and --tee name a local rank that does not exist: on
#     Python 3.11 torch 1.13 cannot parse their default "0" (IntFlag no
#     longer lists NONE) and torchrun fails before starting a worker; a
#     mapping for rank 9 leaves every real rank at "no redirect".
set -euo pipefail
[[ $1 == --standalone && $2 == --nproc-per-node=* ]] || { echo "usage: $0 --standalone --nproc-per-node=N PROGRAM [ARGS...]" >&2; exit 2; }
nproc=${2#--nproc-per-node=}
shift 2
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
exec /usr/bin/torchrun --nnodes=1 --nproc_per_node="$nproc" --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="braid-test-$$" --redirects 9:1 --tee 9:1 --no_python "$@"
