#!/usr/bin/env bash
# Installs and checks everything braid needs on Debian 12. Idempotent: a
# second run installs nothing and only re-checks. Fails with one line naming
# what is missing.
#
#   tools/setup.sh            # install (as root, or with sudo) and check
#   tools/setup.sh --check    # check only
#
# Python: a virtualenv of Debian's python3 with tools/requirements.txt (torch
# from PyPI, pinned there) at ~/.cache/braid/venv-<hash of the requirements>,
# shared by every checkout, linked as .venv here ($BRAID_VENV names another).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  bazel-bootstrap   # Bazel 4.2.3, runs offline with the stand-ins in third_party/
  g++               # GCC 12
  libabsl-dev       # Abseil 20220623
  catch2            # Catch2 2.13
  libopenmpi-dev    # Open MPI 4.1: the mpi transport and the MPI baselines
  openmpi-bin       # mpirun
  libssl-dev        # libcrypto: HMAC-SHA256 for authenticated rendezvous
  python3           # small tools and the bench plots
  procps            # ps/pkill used by the launcher tests
  libopenblas-serial-dev  # single-threaded OpenBLAS for examples/train_mlp
  python3-matplotlib  # tools/plot_bench, sim/plot_sim.py: the PNG charts
  python3-yaml      # tools/k8s_pod_env.py: the Kubernetes example's contract test
  clang             # clang 14 with libFuzzer: tools/fuzz.sh
  iproute2          # ip netns: the network-partition test
  python3-dev       # Python.h: the braid Python package (python/)
  pybind11-dev      # pybind11 2.10: braid._braid
  python3-numpy     # NumPy arrays through braid's Python API (tests)
  python3-pip       # pip installs braid's Python packages (tools/requirements.txt) ...
  python3-venv      # ... into a virtualenv (Debian's python refuses pip installs: PEP 668)
  python3-setuptools
  python3-wheel
  slurmctld         # Slurm 22.05's controller ...
  slurmd            # ... and node daemon: tests/slurm starts its own one-node cluster
  slurm-client      # srun, scancel, sinfo, squeue
  munge             # Slurm's authentication (the test runs its own munged)
)

fail() {
  echo "setup.sh: $*" >&2
  exit 1
}

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done

if [[ ${#missing[@]} -gt 0 ]]; then
  [[ "${1:-}" == "--check" ]] && fail "missing Debian packages: ${missing[*]} (run tools/setup.sh without --check)"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || fail "need root (or sudo) to install: ${missing[*]}"
    SUDO="sudo"
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q || fail "apt-get update failed (no access to Debian's package archive?)"
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    fail "apt-get install failed for: ${missing[*]}"
fi

# The toolchain facts the build relies on (ARCHITECTURE.md, "Build").
command -v bazel >/dev/null || fail "bazel not on PATH after installing bazel-bootstrap"
bazel_version=$(dpkg-query -W -f='${Version}' bazel-bootstrap)
[[ "$bazel_version" == 4.2.3* ]] || fail "need Debian's bazel-bootstrap 4.2.3, found $bazel_version"
[[ -f /usr/share/bazel/platforms/WORKSPACE ]] ||
  fail "missing /usr/share/bazel/platforms (the @platforms repository bazel-bootstrap ships)"
gxx_major=$(g++ -dumpversion | cut -d. -f1)
(( gxx_major >= 12 )) || fail "need g++ 12 or newer for C++20, found $(g++ -dumpversion)"
for header in absl/status/status.h catch2/catch.hpp openssl/hmac.h python3.11/Python.h pybind11/pybind11.h; do
  [[ -f /usr/include/$header ]] || fail "missing header /usr/include/$header"
done
[[ -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ]] || fail "missing Open MPI headers (libopenmpi-dev)"
command -v mpirun >/dev/null || fail "mpirun not on PATH (openmpi-bin)"
for tool in slurmctld slurmd srun munged; do
  command -v "$tool" >/dev/null || fail "$tool not on PATH (slurmctld, slurmd, slurm-client, munge)"
done

# The virtualenv: torch 2.x and the rest from PyPI. Made once per requirements file.
requirements=tools/requirements.txt
if [[ -n ${BRAID_VENV:-} ]]; then
  venv=$BRAID_VENV
else
  key=$( (cat "$requirements"; /usr/bin/python3 --version) | sha256sum | cut -c1-12)
  venv=${XDG_CACHE_HOME:-$HOME/.cache}/braid/venv-$key
fi
if ! "$venv/bin/python" -c "import torch.distributed, numpy, pybind11" 2>/dev/null; then
  [[ "${1:-}" == "--check" ]] && fail "no virtualenv with torch at $venv (run tools/setup.sh without --check)"
  echo "setup.sh: making the virtualenv $venv (torch from PyPI: a few GB, a few minutes)"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv" || fail "python3 -m venv $venv failed (python3-venv)"
  "$venv/bin/python" -m pip install --quiet --upgrade pip || fail "pip upgrade in $venv failed"
  "$venv/bin/python" -m pip install --quiet -r "$requirements" || fail "pip install -r $requirements failed (PyPI)"
fi
if [[ -z ${BRAID_VENV:-} && "$(readlink .venv 2>/dev/null)" != "$venv" ]]; then
  [[ -e .venv && ! -L .venv ]] && fail ".venv exists and is not setup.sh's link: move it away or set BRAID_VENV"
  ln -sfn "$venv" .venv
fi
torch_version=$("$venv/bin/python" -c "import torch; print(torch.__version__)" 2>/dev/null)

# CUDA is optional: only --config=cuda needs it.
if [[ -x /usr/local/cuda/bin/nvcc && -f /usr/local/cuda/include/nccl.h ]]; then
  echo "setup.sh: ok (torch $torch_version; CUDA $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') found: --config=cuda available)"
else
  echo "setup.sh: ok (torch $torch_version; no CUDA/NCCL in /usr/local/cuda: --config=cuda unavailable, everything else works)"
fi
