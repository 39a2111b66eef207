#!/usr/bin/env python3
"""Compares bench/run_all.sh all-reduce runs side by side, as braid/MPI ratios.

    bench/compare_runs.py bench/out/before1 bench/out/after1 bench/out/before2 bench/out/after2

Each DIR is one run_all.sh OUT folder (OTHERS= is enough). Per world size,
transport and size: braid's out-of-place bus bandwidth (auto, and the best
algorithm section) over the better of the MPI baselines measured in the same
run (shm: vader and vader without free; tcp: MPI over tcp), and 8-byte
latency as MPI's time over braid's (above 1: braid faster). Prints markdown.
"""
import json
import os
import sys

SIZES = [(64 << 10, "64 KiB"), (1 << 20, "1 MiB"), (16 << 20, "16 MiB"), (64 << 20, "64 MiB")]
MPI_FOR = {"shm": ("vader", "vader_nofree"), "tcp": ("tcp",)}


def load(folder, name):
    path = os.path.join(folder, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def busbw(report, size, algorithm=None):
    best = None
    for row in report["rows"] if report else []:
        if row["size"] != size or (algorithm is not None and row["algorithm"] != algorithm):
            continue
        value = row["out_of_place"]["busbw_gbps"]
        best = value if best is None else max(best, value)
    return best


def time_us(report, algorithm=None):
    best = None
    for row in report["rows"] if report else []:
        if row["size"] != 8 or (algorithm is not None and row["algorithm"] != algorithm):
            continue
        value = row["out_of_place"]["time_us"]
        best = value if best is None else min(best, value)
    return best


def ratios(folder):
    """{(n, transport, what): ratio}"""
    out = {}
    for n in (2, 4):
        for transport, variants in MPI_FOR.items():
            braid = load(folder, f"braid_{transport}_n{n}")
            mpis = [load(folder, f"mpi_{v}_n{n}") for v in variants]
            for size, label in SIZES:
                mpi = max((busbw(m, size) or 0) for m in mpis) or None
                for which, algorithm in (("auto", "auto"), ("best", None)):
                    b = busbw(braid, size, algorithm)
                    out[(n, transport, f"{label} {which}")] = None if b is None or mpi is None else b / mpi
            lat_braid = load(folder, f"braid_lat_{transport}_n{n}")
            lat_mpi = [load(folder, f"mpi_lat_{v}_n{n}") for v in variants]
            m = min((time_us(r) for r in lat_mpi if time_us(r) is not None), default=None)
            b = time_us(lat_braid, "auto")
            out[(n, transport, "8 B latency")] = None if b is None or m is None else m / b
    return out


def main(folders):
    runs = [ratios(f) for f in folders]
    names = [os.path.basename(os.path.normpath(f)) for f in folders]
    order = ["8 B latency"] + [f"{label} {which}" for _, label in SIZES for which in ("auto", "best")]
    keys = sorted(runs[0].keys(), key=lambda k: (k[0], k[1], order.index(k[2])))
    print("| ranks | transport | cell | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for key in keys:
        cells = []
        for run in runs:
            value = run.get(key)
            cells.append("–" if value is None else f"{value:.2f}")
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
