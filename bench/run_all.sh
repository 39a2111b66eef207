#!/usr/bin/env bash
# Regenerates bench/RESULTS.md's measured tables and the charts in bench/plots/:
# 1. all-reduce: braid_bench against the MPI_Allreduce baseline, f32 sum, 8 B .. 64 MiB:
#   - braid over shm and over tcp, algorithms ring, tree, rhd, direct and auto, its
#     workers started by braidrun;
#   - mpi_allreduce_bench under mpirun: the default btl (vader shared memory),
#     the same with glibc told never to unmap or trim (MALLOC_MMAP_MAX_=0
#     MALLOC_TRIM_THRESHOLD_=64 GiB: Open MPI 4.1 allocates a fresh buffer per
#     large call, see ../shared/DESIGN.md), and over tcp (--mca btl tcp,self);
# 2. every other collective (reducescatter, allgather, broadcast, reduce,
#    alltoall, sendrecv): braid_bench -C over shm and tcp (braidrun), and over
#    mpi with -a auto,native under mpirun (native = Open MPI's own collective:
#    the baseline), 8 B .. OTHER_MAXBYTES by x4;
# at every world size in WORLD_SIZES (default "2 4"; above the core count the
# ranks are oversubscribed);
# 3. the reducer's overhead (bench/reducer_bench.sh) and 4. the launcher's
#    start-up (bench/launcher_bench.sh), unless SKIP_REDUCER / SKIP_LAUNCHER;
# 5. PNG charts of every JSON (tools/plot_bench) into bench/plots/;
# 6. issue 29's cells in interleaved pairs against MPI and the memory bound
#    (bench/pairs.sh: its own part of RESULTS.md and bench/plots/pairs.png),
#    unless SKIP_PAIRS.
# Raw tables and JSON go to bench/out/ (gitignored); the markdown summary goes
# to stdout and bench/out/summary.md, and replaces the part of
# bench/RESULTS.md between "<!-- run_all:begin -->" and "<!-- run_all:end -->"
# (UPDATE_RESULTS=0 leaves RESULTS.md and bench/plots/ alone: its charts go
# to bench/out/plots/).
#
#   bench/run_all.sh                      # the full run (about 20 minutes on 2 cores)
#   WORLD_SIZES=2 MAXBYTES=1M OTHER_MAXBYTES=1M SKIP_REDUCER=1 SKIP_LAUNCHER=1 UPDATE_RESULTS=0 bench/run_all.sh
#
# Knobs (environment): BIN_DIR (run the braid_bench, mpi_allreduce_bench and braidrun
# found there instead of building: an earlier commit's, for a before/after pair),
# OUT (bench/out), OTHERS (the other collectives; OTHERS= runs the all-reduce alone),
# WORLD_SIZES, MAXBYTES (64M), ITERS (20), WARMUP (5), LAT_ITERS (5000),
# STEP (2; sizes are multiplied by it), OTHER_MAXBYTES (16M), OTHER_ITERS (10),
# REDUCER_REPS (3), LAUNCHER_REPS (3), BRAID_TIMEOUT_SEC (120).
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
WORLD_SIZES=${WORLD_SIZES:-"2 4"}
MAXBYTES=${MAXBYTES:-64M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
STEP=${STEP:-2}
export BRAID_TIMEOUT_SEC=${BRAID_TIMEOUT_SEC:-120}
SWEEP=(-b 8 -e "$MAXBYTES" -f "$STEP" -n "$ITERS" -w "$WARMUP" -c 1 -d float -o sum)
export LAT_ITERS=${LAT_ITERS:-5000}
LATENCY=(-b 8 -e 8 -n "$LAT_ITERS" -w 200 -c 1 -d float -o sum)
ALGOS=ring,tree,rhd,direct,auto
OTHER_MAXBYTES=${OTHER_MAXBYTES:-16M}
OTHER_ITERS=${OTHER_ITERS:-10}
OTHER_SWEEP=(-b 8 -e "$OTHER_MAXBYTES" -f 4 -n "$OTHER_ITERS" -w 2 -c 1 -d float -o sum)
OTHERS=${OTHERS-"reducescatter allgather broadcast reduce alltoall sendrecv"}
started=$(date +%s)

if [[ $EUID -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

log() { echo "[run_all] $*" >&2; }

# --- build -------------------------------------------------------------------
mkdir -p "$OUT"
if [[ -n "${BIN_DIR:-}" ]]; then
  # Binaries built elsewhere (an earlier commit's, for a before/after pair).
  log "using the binaries in $BIN_DIR"
  BIN=$BIN_DIR
else
  log "building //bench:braid_bench //bench:mpi_allreduce_bench //bench:memory_bound //launcher:braidrun //examples:train_mlp"
  bazel build //bench:braid_bench //bench:mpi_allreduce_bench //bench:memory_bound //launcher:braidrun \
    //examples:train_mlp >&2
  mkdir -p "$OUT/bin"
  # Copies: the bazel-bin symlink follows whatever config the last build used.
  cp -f bazel-out/k8-opt/bin/bench/braid_bench bazel-out/k8-opt/bin/bench/mpi_allreduce_bench \
    bazel-out/k8-opt/bin/bench/memory_bound bazel-out/k8-opt/bin/launcher/braidrun "$OUT/bin/"
  BIN=$OUT/bin
fi
rm -f "$OUT"/*.txt "$OUT"/*.json "$OUT"/*.log "$OUT"/*.md

# N braid workers on this host under braidrun; rank 0's lines (prefixed
# "[rank 0]: ") go to OUTFILE, braidrun's own and every rank's stderr to
# OUTFILE's .log.
run_braid_workers() {
  local n=$1 outfile=$2
  shift 2
  "$BIN/braidrun" --standalone --nproc-per-node="$n" --local-ranks-filter=0 "$@" \
    > "$outfile" 2> "${outfile%.txt}.log"
}

status=0
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for n in $WORLD_SIZES; do
  # The sweep, then 8-byte latency on its own (LAT_ITERS iterations): the
  # sweep's 8-byte row is ITERS calls of a microsecond or two, where one
  # hiccup moves it 5x. Likewise for each MPI variant below.
  for kind in sweep lat; do
    for transport in shm tcp; do
      if [[ $kind == sweep ]]; then name=braid_${transport}_n$n; args=("${SWEEP[@]}"); else name=braid_lat_${transport}_n$n; args=("${LATENCY[@]}"); fi
      log "$name: braid_bench -t $transport -a $ALGOS ${args[*]}"
      if ! run_braid_workers "$n" "$OUT/$name.txt" \
          "$BIN/braid_bench" -t "$transport" -a "$ALGOS" "${args[@]}" --json "$OUT/$name.json"; then
        log "$name FAILED (see $OUT/$name.log)"
        status=1
      fi
    done
  done

  mpi_variants=(vader vader_nofree tcp)
  for variant in "${mpi_variants[@]}"; do
    case $variant in
      vader) extra=() ;;
      vader_nofree) extra=(-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736) ;;
      tcp) extra=(--mca btl tcp,self) ;;
    esac
    for kind in sweep lat; do
      if [[ $kind == sweep ]]; then name=mpi_${variant}_n$n; args=("${SWEEP[@]}"); else name=mpi_lat_${variant}_n$n; args=("${LATENCY[@]}"); fi
      log "$name: mpirun --oversubscribe -np $n ${extra[*]} mpi_allreduce_bench ${args[*]}"
      if ! mpirun --oversubscribe -np "$n" "${extra[@]}" \
          "$BIN/mpi_allreduce_bench" "${args[@]}" --json "$OUT/$name.json" \
          > "$OUT/$name.txt" 2> "$OUT/$name.log"; then
        log "$name FAILED (see $OUT/$name.log)"
        status=1
      fi
    done
  done

  for coll in $OTHERS; do
    for transport in shm tcp; do
      name=braid_${coll}_${transport}_n$n
      log "$name: braid_bench -C $coll -t $transport ${OTHER_SWEEP[*]}"
      if ! run_braid_workers "$n" "$OUT/$name.txt" \
          "$BIN/braid_bench" -C "$coll" -t "$transport" "${OTHER_SWEEP[@]}" --json "$OUT/$name.json"; then
        log "$name FAILED (see $OUT/$name.log)"
        status=1
      fi
    done
    name=braid_${coll}_mpi_n$n
    algos=auto,native
    [[ $coll == sendrecv ]] && algos=auto
    log "$name: mpirun -np $n braid_bench -C $coll -t mpi -a $algos ${OTHER_SWEEP[*]}"
    if ! mpirun --oversubscribe -np "$n" "$BIN/braid_bench" -C "$coll" -t mpi -a "$algos" "${OTHER_SWEEP[@]}" \
        --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log"; then
      log "$name FAILED (see $OUT/$name.log)"
      status=1
    fi
  done
done
collectives_done=$(date +%s)

# --- the reducer and the launcher ---------------------------------------------
if [[ -z "${SKIP_REDUCER:-}" ]]; then
  log "reducer: bench/reducer_bench.sh (REPS=${REDUCER_REPS:-3})"
  REPS=${REDUCER_REPS:-3} TRAIN_MLP=bazel-out/k8-opt/bin/examples/train_mlp bench/reducer_bench.sh \
    > "$OUT/reducer.md" 2> "$OUT/reducer.log" || { log "reducer_bench FAILED (see $OUT/reducer.log)"; status=1; }
fi
if [[ -z "${SKIP_LAUNCHER:-}" ]]; then
  log "launcher: bench/launcher_bench.sh ${LAUNCHER_REPS:-3}"
  bench/launcher_bench.sh "${LAUNCHER_REPS:-3}" > "$OUT/launcher.md" 2> "$OUT/launcher.log" ||
    { log "launcher_bench FAILED (see $OUT/launcher.log)"; status=1; }
fi

# --- charts ----------------------------------------------------------------------
PLOTS=bench/plots
[[ ${UPDATE_RESULTS:-1} == 0 ]] && PLOTS=$OUT/plots
log "charts: tools/plot_bench -> $PLOTS/"
mkdir -p "$PLOTS"
rm -f "$PLOTS"/*.png
tools/plot_bench -o "$PLOTS" "$OUT"/*.json > "$OUT/plots.txt" || { log "plot_bench FAILED"; status=1; }

# --- issue 29's cells in interleaved pairs (after the charts: its own goes beside them)
if [[ -z "${SKIP_PAIRS:-}" ]]; then
  log "pairs: bench/pairs.sh (PAIRS=${PAIRS:-5})"
  BIN_DIR=$BIN OUT=$OUT/pairs UPDATE_RESULTS=${UPDATE_RESULTS:-1} bench/pairs.sh > "$OUT/pairs.md" 2> "$OUT/pairs.log" ||
    { log "pairs FAILED (see $OUT/pairs.log)"; status=1; }
fi

# --- summary -----------------------------------------------------------------
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
finished=$(date +%s)
python3 - "$OUT" "$WORLD_SIZES" "$load_start" "$load_end" "$started" "$collectives_done" "$finished" \
  "$OTHERS" > "$OUT/summary.md" <<'PYTHON'
import datetime, json, os, sys

out, world_sizes = sys.argv[1], [int(n) for n in sys.argv[2].split()]
load_start, load_end = sys.argv[3], sys.argv[4]
started, collectives_done, finished = (int(x) for x in sys.argv[5:8])
others = sys.argv[8].split()
SIZES = [(8, "8 B"), (64 << 10, "64 KiB"), (1 << 20, "1 MiB"), (16 << 20, "16 MiB"), (64 << 20, "64 MiB")]
ALGOS = ("ring", "tree", "rhd", "direct", "auto")
BRAID = [(t, a) for t in ("shm", "tcp") for a in ALGOS]
MPI = [("vader", "MPI vader"), ("vader_nofree", "MPI vader, no free"), ("tcp", "MPI tcp")]

def load(name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)

def rows_by(report, algorithm=None):
    """{size: out-of-place measurement} for one algorithm section."""
    table = {}
    for row in report["rows"] if report else []:
        if algorithm is None or row["algorithm"] == algorithm:
            table[row["size"]] = row["out_of_place"]
    return table

def fmt(value, digits=2):
    return "–" if value is None else f"{value:.{digits}f}"

def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b

failures = []
latency = {}
print(f"### All-reduce: braid_bench vs MPI_Allreduce, float sum, out-of-place busbw (GB/s)\n")
machine = None
for n in world_sizes:
    columns = {}
    for transport, algorithm in BRAID:
        report = load(f"braid_{transport}_n{n}")
        machine = machine or (report or {}).get("machine")
        if report and report.get("out_of_bounds_values", 0) != 0:
            failures.append(f"braid {transport} n={n}")
        columns[f"{transport} {algorithm}"] = rows_by(report, algorithm)
    for key, label in MPI:
        report = load(f"mpi_{key}_n{n}")
        if report and report.get("out_of_bounds_values", 0) != 0:
            failures.append(f"{label} n={n}")
        columns[label] = rows_by(report)

    def busbw(column, size):
        m = columns[column].get(size)
        return None if m is None else m["busbw_gbps"]

    header = list(columns) + ["best shm / best MPI", "best tcp / MPI tcp"]
    print(f"#### {n} ranks{' (oversubscribed)' if machine and n > machine['nproc'] else ''}\n")
    print("| size | " + " | ".join(header) + " |")
    print("|---:|" + "---:|" * len(header))
    for size, label in SIZES:
        values = [busbw(c, size) for c in columns]
        shm = [busbw(f"shm {a}", size) for a in ALGOS]
        tcp = [busbw(f"tcp {a}", size) for a in ALGOS]
        mpi = [busbw(l, size) for _, l in MPI]
        best = lambda xs: max([x for x in xs if x is not None], default=None)
        digits = 4 if size < 4096 else 2
        cells = [fmt(v, digits) for v in values]
        cells.append(fmt(ratio(best(shm), best(mpi))))
        cells.append(fmt(ratio(best(tcp), busbw("MPI tcp", size))))
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    # The dedicated 8-byte runs (LAT_ITERS iterations), else the sweep's row.
    lat = {}
    for transport, algorithm in BRAID:
        lat[f"{transport} {algorithm}"] = rows_by(load(f"braid_lat_{transport}_n{n}"), algorithm)
    for key, label in MPI:
        lat[label] = rows_by(load(f"mpi_lat_{key}_n{n}"))
    latency[n] = {c: ((lat.get(c) or {}).get(8) or columns[c].get(8) or {}).get("time_us") for c in columns}

print(f"#### All-reduce 8-byte latency (us, out-of-place time, max over ranks, {os.environ.get('LAT_ITERS', '5000')} iterations)\n")
names = list(next(iter(latency.values())).keys()) if latency else []
print("| ranks | " + " | ".join(names) + " |")
print("|---:|" + "---:|" * len(names))
for n, row in latency.items():
    print(f"| {n} | " + " | ".join(fmt(row[c]) for c in names) + " |")
print()

# Every other collective: braid over shm, tcp and mpi against Open MPI's own call (native).
OTHER_SIZES = [(128, "128 B"), (8 << 10, "8 KiB"), (512 << 10, "512 KiB"), (8 << 20, "8 MiB")]
print("### The other collectives: out-of-place busbw (GB/s), nccl-tests factors\n")
print("braid = `-a auto` over each transport; MPI native = Open MPI's own collective through braid's mpi")
print("transport (`-a native`; send/recv has none). Size = nccl-tests' size column (all ranks' data for")
print("reducescatter/allgather/alltoall). #wrong = every row of the run, both columns.\n")
for n in world_sizes:
    print(f"#### {n} ranks\n")
    print("| collective | size | shm | tcp | mpi | MPI native | #wrong |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for coll in others:
        reports = {t: load(f"braid_{coll}_{t}_n{n}") for t in ("shm", "tcp", "mpi")}
        wrong = 0
        for t, r in reports.items():
            if r is None:
                failures.append(f"{coll} {t} n={n} (no report)")
                continue
            wrong += r.get("out_of_bounds_values", 0)
            if r.get("out_of_bounds_values", 0) != 0:
                failures.append(f"{coll} {t} n={n}")
        cols = [rows_by(reports["shm"], "auto"), rows_by(reports["tcp"], "auto"), rows_by(reports["mpi"], "auto"),
                rows_by(reports["mpi"], "native")]
        for i, (size, label) in enumerate(OTHER_SIZES):
            cells = [fmt((c.get(size) or {}).get("busbw_gbps"), 4 if size < 4096 else 2) for c in cols]
            print(f"| {coll if i == 0 else ''} | {label} | " + " | ".join(cells) + f" | {wrong if i == 0 else ''} |")
    print()

for name, title in (("reducer", "The reducer: train_mlp step time, synced against NoSync (bench/reducer_bench.sh)"),
                    ("launcher", "Launcher start-up and restart (bench/launcher_bench.sh)")):
    path = os.path.join(out, name + ".md")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        print(f"### {title}\n")
        with open(path) as f:
            print(f.read().strip())
        print()

plots = os.path.join(out, "plots.txt")
if os.path.exists(plots):
    print("### Charts (tools/plot_bench)\n")
    for line in open(plots):
        png = line.strip()
        if png:
            print(f"![{os.path.basename(png)}]({os.path.relpath(png, 'bench')})")
    print()

if machine:
    print(f"Machine: {machine['hostname']}, {machine['nproc']} CPUs, {machine['cpu_model']}, {machine['date']}.")
print(f"Run time: {datetime.timedelta(seconds=finished - started)} in all "
      f"(collectives {datetime.timedelta(seconds=collectives_done - started)}).")
# Other work on the machine skews every figure (ranks are descheduled): say how busy it was.
print(f"Load average (1/5/15 min) at start: {load_start}; at end: {load_end}.")
print("\"no free\" = MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 exported to the MPI ranks.")
print("Ratios use busbw; best = the highest over the algorithms (braid) or the MPI variants.")
if failures:
    print("\n**Wrong values (#wrong > 0) in: " + ", ".join(failures) + "**")
PYTHON
cat "$OUT/summary.md"
if [[ "${UPDATE_RESULTS:-1}" == 1 ]] && grep -q '<!-- run_all:begin -->' bench/RESULTS.md; then
  python3 - "$OUT/summary.md" bench/RESULTS.md <<'PYTHON'
import sys
summary, results = open(sys.argv[1]).read(), open(sys.argv[2]).read()
begin, end = "<!-- run_all:begin -->", "<!-- run_all:end -->"
head, rest = results.split(begin, 1)
_, tail = rest.split(end, 1)
open(sys.argv[2], "w").write(head + begin + "\n" + summary.strip() + "\n" + end + tail)
PYTHON
  log "bench/RESULTS.md updated between the run_all markers"
fi
if grep -q "FAILED" "$OUT"/*.txt 2>/dev/null; then
  log "some table reports FAILED (wrong values): see $OUT/*.txt"
  status=1
fi
exit $status
