# Sourced by the Python tests, from the runfiles root.
#
# The interpreter: the project's virtualenv (tools/setup.sh installs the
# pinned torch and numpy there; Bazel's @torch points at it), unless
# BRAID_TEST_PYTHON names another. $python is it, and its folder comes first
# on PATH so `python3` in a launched program is the same one.
python=${BRAID_TEST_PYTHON:-$(pwd)/../torch/bin/python3}
export BRAID_TEST_PYTHON=$python
export PATH=$(dirname "$python"):$PATH
export PYTHONDONTWRITEBYTECODE=1

# Under --config=asan or --config=tsan the braid libraries are instrumented
# but the interpreter is not, so the sanitizer's runtime is preloaded (it
# must come first) and Python's own leaks at exit are not reported.
case "${BRAID_SANITIZER:-}" in
  asan)
    export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
    ;;
  tsan)
    export LD_PRELOAD=$(gcc -print-file-name=libtsan.so)
    # torch itself is not instrumented (torch_tsan.supp says why).
    supp=$(pwd)/tests/python/torch_tsan.supp
    if [[ -f $supp ]]; then export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$supp"; fi
    ;;
esac
