#!/usr/bin/env bash
# Builds braid's libFuzzer targets with Debian's clang (ASan + UBSan +
# libFuzzer) and runs each for a bounded time from its checked-in seed corpus
# (tests/fuzz/corpus/<target>, never modified; new inputs go to a scratch
# copy). A crash, leak or abort fails the run and leaves the reproducer in
# $OUT/<target>/ (printed). CI runs it with 20 s per target.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET]      # default 20
#
# Targets: store (the store server's protocol parser, through a real server,
# with and without a job secret), frame (the transport frame header check),
# flags (braidrun's flag parser). Prints "fuzz: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
OUT=${FUZZ_OUT:-/tmp/braid_fuzz}
mkdir -p "$OUT"
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (tools/setup.sh installs clang)" >&2; exit 1; }

# The system Abseil libraries, as third_party/system/system.BUILD lists them.
absl_libs=$(python3 -c '
import re
s = open("third_party/system/system.BUILD").read()
s = s[s.index("_ABSL_LIBS = ["):]
print(" ".join(re.findall(r"\"(-labsl_[a-z0-9_]+)\"", s[:s.index("]")])))')
# frame.cc names dtypes and ops through tensor/, whose host kernels are built
# per ISA with GCC-only target attributes: link Bazel's (uninstrumented) build.
bazel build //tensor:tensor //tensor:cpu_kernels >/dev/null 2>&1 ||
  { echo "fuzz: bazel build //tensor failed" >&2; exit 1; }
tensor_libs="bazel-out/k8-opt/bin/tensor/libtensor.a $(ls bazel-out/k8-opt/bin/tensor/libcpu_kernels_*.a | tr '\n' ' ')"
base=(base/auth.cc base/deadline.cc base/env.cc base/fd.cc base/socket.cc base/logging.cc base/mutex.cc base/status.cc)
# What braidrun's flag parser is made of (launcher/BUILD.bazel's options).
launcher=(launcher/options.cc launcher/flag_table.cc launcher/slurm_defaults.cc base/slurm_step.cc base/hostlist.cc)
declare -A sources=(
  [store]="tests/fuzz/store_fuzz.cc store/store.cc store/tcp_store_client.cc store/tcp_store_server.cc store/server_requests.cc store/wire.cc ${base[*]}"
  [frame]="tests/fuzz/frame_fuzz.cc collectives/transport/frame.cc ${base[*]} $tensor_libs"
  [flags]="tests/fuzz/flags_fuzz.cc ${launcher[*]} ${base[*]}"
)
flags=(-std=c++20 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -ffunction-sections -fdata-sections -Wl,--gc-sections -Wno-unused-command-line-argument)

passed=0
failed=0
for target in store frame flags; do
  binary="$OUT/${target}_fuzz"
  # shellcheck disable=SC2086
  if ! clang++ "${flags[@]}" ${sources[$target]} -o "$binary" $absl_libs -lcrypto -lpthread 2> "$OUT/$target.build.log"; then
    echo "fuzz: $target: build failed (see $OUT/$target.build.log)"
    tail -5 "$OUT/$target.build.log"
    failed=$((failed + 1))
    continue
  fi
  scratch="$OUT/$target/corpus"
  rm -rf "$OUT/$target" && mkdir -p "$scratch"
  cp tests/fuzz/corpus/$target/* "$scratch/"
  if ASAN_OPTIONS=detect_leaks=1 "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$OUT/$target/" -print_final_stats=1 "$scratch" > "$OUT/$target.log" 2>&1; then
    echo "fuzz: $target: ok ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$OUT/$target.log" | grep -o '[0-9]*$') runs in ${seconds}s)"
    passed=$((passed + 1))
  else
    echo "fuzz: $target: FAILED (log $OUT/$target.log; reproducer: $(ls "$OUT/$target"/crash-* "$OUT/$target"/leak-* "$OUT/$target"/timeout-* 2>/dev/null | head -1))"
    grep -m5 -E "ERROR|SUMMARY|runtime error" "$OUT/$target.log"
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
