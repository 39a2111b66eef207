#!/usr/bin/env bash
# The full conformance matrix (too slow for CI): every collective x algorithm
# x transport x dtype x op at 1-8 ranks, sizes up to 1 MiB + 3 elements, plus
# the transports' own suite, subgroups and the hierarchical path (every
# dtype x op), braidrun with 1-8 workers and the MPI suite at
# 1-6 ranks, optionally under a sanitizer config.
#
# Takes over an hour on 2 cores (collectives_test alone: 54 minutes).
#
#   tools/test_matrix.sh              # plain build
#   tools/test_matrix.sh --config=asan
#   tools/test_matrix.sh --sanitized-rest   # what CI runs only plain, under ASan and TSan
#   tools/test_matrix.sh --torch-conformance  # PyTorch's whole distributed suite, gloo beside braid, 2 and 4 ranks
#   tools/test_matrix.sh --torch-versions     # the backend pip-installed against torch 2.11 (the GPU machine's)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--torch-conformance" ]]; then
  tools/torch_conformance.sh 2
  exec tools/torch_conformance.sh 4
fi
if [[ "${1:-}" == "--torch-versions" ]]; then
  exec tools/torch_version_check.sh 2.11.0
fi
if [[ "${1:-}" == "--sanitized-rest" ]]; then
  rest=(//tests/python/... //tests/netns/... //tests/slurm/... //tests/bench/... //tests/tools/...)
  bazel test --config=asan "${rest[@]}"
  exec bazel test --config=tsan "${rest[@]}"
fi
bazel test "$@" --test_env=BRAID_TEST_MATRIX=full --test_timeout=7200 \
  //tests/collectives:collectives_test //tests/collectives/transport:transport_test \
  //tests/collectives:subgroups_test \
  //tests/launcher:braidrun_test //tests/collectives/transport/mpi:mpi_test
