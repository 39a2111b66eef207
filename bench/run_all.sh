#!/usr/bin/env bash
# braid_bench against the MPI_Allreduce baseline on this host, f32 sum, 8 B .. 64 MiB:
#   - braid over shm and over tcp, algorithms ring, tree, rhd and auto, its
#     workers started by braidrun;
#   - mpi_allreduce_bench under mpirun: the default btl (vader shared memory),
#     the same with glibc told never to unmap or trim (MALLOC_MMAP_MAX_=0
#     MALLOC_TRIM_THRESHOLD_=64 GiB: Open MPI 4.1 allocates a fresh buffer per
#     large call, see ../shared/DESIGN.md), and over tcp (--mca btl tcp,self);
# at every world size in WORLD_SIZES (default "2 4"; above the core count the
# ranks are oversubscribed). Raw tables and JSON go to bench/out/ (gitignored);
# a markdown summary goes to stdout and bench/out/summary.md.
#
#   bench/run_all.sh                      # the full run (about 10 minutes on 2 cores)
#   WORLD_SIZES=2 MAXBYTES=1M bench/run_all.sh   # a quick look
#
# Knobs (environment): WORLD_SIZES, MAXBYTES (64M), ITERS (20), WARMUP (5),
# STEP (2; sizes are multiplied by it), BRAID_TIMEOUT_SEC (120).
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=bench/out
WORLD_SIZES=${WORLD_SIZES:-"2 4"}
MAXBYTES=${MAXBYTES:-64M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
STEP=${STEP:-2}
export BRAID_TIMEOUT_SEC=${BRAID_TIMEOUT_SEC:-120}
SWEEP=(-b 8 -e "$MAXBYTES" -f "$STEP" -n "$ITERS" -w "$WARMUP" -c 1 -d float -o sum)
ALGOS=ring,tree,rhd,auto

if [[ $EUID -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

log() { echo "[run_all] $*" >&2; }

# --- build -------------------------------------------------------------------
log "building //bench:braid_bench //bench:mpi_allreduce_bench //launcher:braidrun"
bazel build //bench:braid_bench //bench:mpi_allreduce_bench //launcher:braidrun >&2
mkdir -p "$OUT/bin"
# Copies: the bazel-bin symlink follows whatever config the last build used.
cp -f bazel-out/k8-opt/bin/bench/braid_bench bazel-out/k8-opt/bin/bench/mpi_allreduce_bench \
  bazel-out/k8-opt/bin/launcher/braidrun "$OUT/bin/"
BIN=$OUT/bin
rm -f "$OUT"/*.txt "$OUT"/*.json "$OUT"/*.log

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
  for transport in shm tcp; do
    name=braid_${transport}_n$n
    log "$name: braid_bench -t $transport -a $ALGOS ${SWEEP[*]}"
    if ! run_braid_workers "$n" "$OUT/$name.txt" \
        "$BIN/braid_bench" -t "$transport" -a "$ALGOS" "${SWEEP[@]}" --json "$OUT/$name.json"; then
      log "$name FAILED (see $OUT/$name.log)"
      status=1
    fi
  done

  mpi_variants=(vader vader_nofree tcp)
  for variant in "${mpi_variants[@]}"; do
    name=mpi_${variant}_n$n
    case $variant in
      vader) extra=() ;;
      vader_nofree) extra=(-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736) ;;
      tcp) extra=(--mca btl tcp,self) ;;
    esac
    log "$name: mpirun --oversubscribe -np $n ${extra[*]} mpi_allreduce_bench ${SWEEP[*]}"
    if ! mpirun --oversubscribe -np "$n" "${extra[@]}" \
        "$BIN/mpi_allreduce_bench" "${SWEEP[@]}" --json "$OUT/$name.json" \
        > "$OUT/$name.txt" 2> "$OUT/$name.log"; then
      log "$name FAILED (see $OUT/$name.log)"
      status=1
    fi
  done
done

# --- summary -----------------------------------------------------------------
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$OUT" "$WORLD_SIZES" "$load_start" "$load_end" > "$OUT/summary.md" <<'PYTHON'
import json, os, sys

out, world_sizes = sys.argv[1], [int(n) for n in sys.argv[2].split()]
load_start, load_end = sys.argv[3], sys.argv[4]
SIZES = [(8, "8 B"), (64 << 10, "64 KiB"), (1 << 20, "1 MiB"), (16 << 20, "16 MiB"), (64 << 20, "64 MiB")]
BRAID = [(t, a) for t in ("shm", "tcp") for a in ("ring", "tree", "rhd", "auto")]
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
print(f"# braid_bench vs MPI_Allreduce, float sum, out-of-place busbw (GB/s)\n")
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
    print(f"## {n} ranks{' (oversubscribed)' if machine and n > machine['nproc'] else ''}\n")
    print("| size | " + " | ".join(header) + " |")
    print("|---:|" + "---:|" * len(header))
    for size, label in SIZES:
        values = [busbw(c, size) for c in columns]
        shm = [busbw(f"shm {a}", size) for a in ("ring", "tree", "rhd", "auto")]
        tcp = [busbw(f"tcp {a}", size) for a in ("ring", "tree", "rhd", "auto")]
        mpi = [busbw(l, size) for _, l in MPI]
        best = lambda xs: max([x for x in xs if x is not None], default=None)
        digits = 4 if size < 4096 else 2
        cells = [fmt(v, digits) for v in values]
        cells.append(fmt(ratio(best(shm), best(mpi))))
        cells.append(fmt(ratio(best(tcp), busbw("MPI tcp", size))))
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    latency[n] = {c: (columns[c].get(8) or {}).get("time_us") for c in columns}

print("## 8-byte latency (us, out-of-place time, max over ranks)\n")
names = list(next(iter(latency.values())).keys()) if latency else []
print("| ranks | " + " | ".join(names) + " |")
print("|---:|" + "---:|" * len(names))
for n, row in latency.items():
    print(f"| {n} | " + " | ".join(fmt(row[c]) for c in names) + " |")
print()
if machine:
    print(f"Machine: {machine['hostname']}, {machine['nproc']} CPUs, {machine['cpu_model']}, {machine['date']}.")
# Other work on the machine skews every figure (ranks are descheduled): say how busy it was.
print(f"Load average (1/5/15 min) at start: {load_start}; at end: {load_end}.")
print("\"no free\" = MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 exported to the MPI ranks.")
print("Ratios use busbw; best = the highest over the algorithms (braid) or the MPI variants.")
if failures:
    print("\n**Wrong values (#wrong > 0) in: " + ", ".join(failures) + "**")
PYTHON
cat "$OUT/summary.md"
if grep -q "FAILED" "$OUT"/*.txt 2>/dev/null; then
  log "some table reports FAILED (wrong values): see $OUT/*.txt"
  status=1
fi
exit $status
