#!/usr/bin/env bash
# Installs and checks everything braid needs on Debian 12. Idempotent: a
# second run installs nothing and only re-checks. Fails with one line naming
# what is missing.
#
#   tools/setup.sh            # install (as root, or with sudo) and check
#   tools/setup.sh --check    # check only
set -euo pipefail

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
  python3-matplotlib  # tools/plot_bench: the PNG charts in bench/
  python3-torch     # PyTorch 1.13 (gloo) for /usr/bin/python3: a real DDP script under braidrun
  clang             # clang 14 with libFuzzer: tools/fuzz.sh
  iproute2          # ip netns: the network-partition test
  python3-dev       # Python.h: the braid Python package (python/)
  pybind11-dev      # pybind11 2.10: braid._braid
  libtorch-dev      # libtorch 1.13 and its c10d headers: the torch.distributed backend braid._torch
  python3-numpy     # NumPy arrays through braid's Python API (tests)
  python3-pip       # tools/install_python.sh builds a wheel and pip-installs it
  python3-venv      # ... into a virtualenv that sees Debian's torch (PEP 668)
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

# The toolchain facts the build relies on (../shared/DESIGN.md, "Build").
command -v bazel >/dev/null || fail "bazel not on PATH after installing bazel-bootstrap"
bazel_version=$(dpkg-query -W -f='${Version}' bazel-bootstrap)
[[ "$bazel_version" == 4.2.3* ]] || fail "need Debian's bazel-bootstrap 4.2.3, found $bazel_version"
[[ -f /usr/share/bazel/platforms/WORKSPACE ]] ||
  fail "missing /usr/share/bazel/platforms (the @platforms repository bazel-bootstrap ships)"
gxx_major=$(g++ -dumpversion | cut -d. -f1)
(( gxx_major >= 12 )) || fail "need g++ 12 or newer for C++20, found $(g++ -dumpversion)"
for header in absl/status/status.h catch2/catch.hpp openssl/hmac.h python3.11/Python.h pybind11/pybind11.h \
  torch/csrc/distributed/c10d/ProcessGroup.hpp; do
  [[ -f /usr/include/$header ]] || fail "missing header /usr/include/$header"
done
[[ -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ]] || fail "missing Open MPI headers (libopenmpi-dev)"
command -v mpirun >/dev/null || fail "mpirun not on PATH (openmpi-bin)"
for tool in slurmctld slurmd srun munged; do
  command -v "$tool" >/dev/null || fail "$tool not on PATH (slurmctld, slurmd, slurm-client, munge)"
done
/usr/bin/python3 -c "import torch.distributed" 2>/dev/null ||
  fail "/usr/bin/python3 cannot import torch.distributed (python3-torch)"

# CUDA is optional: only --config=cuda needs it.
if [[ -x /usr/local/cuda/bin/nvcc && -f /usr/local/cuda/include/nccl.h ]]; then
  echo "setup.sh: ok (CUDA $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') found: --config=cuda available)"
else
  echo "setup.sh: ok (no CUDA/NCCL in /usr/local/cuda: --config=cuda unavailable, everything else works)"
fi
