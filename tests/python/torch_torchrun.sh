#!/usr/bin/env bash
# torchrun behind braidrun's command line, for run_python.sh:
#
#   torch_torchrun.sh --standalone --nproc-per-node=N PROGRAM [ARGS...]
#
# runs PROGRAM under torchrun (python3 -m torch.distributed.run, the python
# on PATH: python_env.sh's) as `torchrun --standalone` would, except that the
# rendezvous store gets a free port, not --standalone's fixed 29400, so tests
# running side by side do not meet in one job.
set -euo pipefail
[[ $1 == --standalone && $2 == --nproc-per-node=* ]] || { echo "usage: $0 --standalone --nproc-per-node=N PROGRAM [ARGS...]" >&2; exit 2; }
nproc=${2#--nproc-per-node=}
shift 2
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
exec python3 -m torch.distributed.run --nnodes=1 --nproc_per_node="$nproc" --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="braid-test-$$" --no_python "$@"
