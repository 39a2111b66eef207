"""bench/pairs.sh's table: each cell's braid and anchor medians and ranges
over the pairs, and the ratio taken inside each pair (median and range).

usage: pairs_table.py OUT PAIRS "WORLD SIZES" STARTED LOAD_START LOAD_END CPU [PLOT.png]

With PLOT.png (needs matplotlib): braid's busbw against MPI's, per size, in
and out of place, one panel per world size; the bars span the pairs' range.
"""
import json
import os
import statistics
import sys

out, pairs, world_sizes = sys.argv[1], int(sys.argv[2]), [int(n) for n in sys.argv[3].split()]
started, load_start, load_end, cpu = sys.argv[4:8]
plot_path = sys.argv[8] if len(sys.argv) > 8 else None
MIB = 1 << 20
series = {}  # (ranks, placement) -> [(size, median, min, max)] of busbw ratios against MPI


def rows(name):
    """{size: row} of one run's JSON, or {} when it failed."""
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {row["size"]: row for row in json.load(f)["rows"]}


def bound(n, p):
    """{size: bound_gbps} of one pair's memory_bound run."""
    path = os.path.join(out, f"bound_n{n}_p{p}.txt")
    table = {}
    if os.path.exists(path):
        for line in open(path):
            fields = line.split()
            table[int(fields[1])] = float(fields[5])
    return table


def size_name(size):
    if size >= MIB:
        return f"{size // MIB} MiB"
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def spread(values, digits=2):
    """'median (min-max)' of the values, '–' if none."""
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def value(row, place, key):
    return row[place][key] if row and row.get(place) else None


def ratio(a, b):
    return a / b if a is not None and b else None


def verdict(values, target, higher_is_better=True):
    values = [v for v in values if v is not None]
    if not values or target is None:
        return ""
    med = statistics.median(values)
    met = med >= target if higher_is_better else med <= target
    return "yes" if met else "no"


lines = [
    f"Run {started} on {cpu} ({os.cpu_count()} cores), {pairs} pairs, load average "
    f"{load_start} at the start and {load_end} at the end. Each cell: median (min-max) over the pairs; "
    "ratios are taken inside each pair (braid and its anchor back to back), then summarized.",
    "",
    "| ranks | cell | placement | braid | anchor | ratio (braid / anchor) | target | met |",
    "|---:|---|---|---:|---:|---:|---:|---|",
]


def add(n, cell, placement, braid_values, anchor_values, ratios, target, digits=2, higher=True):
    target_text = "" if target is None else (f">= {target}" if higher else f"<= {target}")
    lines.append(f"| {n} | {cell} | {placement} | {spread(braid_values, digits)} | {spread(anchor_values, digits)} | "
                 f"{spread(ratios)} | {target_text} | {verdict(ratios, target, higher)} |")


for n in world_sizes:
    pair_ids = range(1, pairs + 1)
    for kind, anchor_name, cell in (("lat", "MPI vader", "8 B latency (us)"), ("tcplat", "MPI tcp", "8 B latency over tcp (us)")):
        runs = [(rows(f"braid_{kind}_n{n}_p{p}").get(8), rows(f"mpi_{kind}_n{n}_p{p}").get(8)) for p in pair_ids]
        if not any(b or a for b, a in runs):
            continue
        for place in ("out_of_place", "in_place"):
            braid = [value(b, place, "time_us") for b, _ in runs]
            anchor = [value(a, place, "time_us") for _, a in runs]
            target = 0.8 if n == 2 and place == "out_of_place" else None
            add(n, cell, place.replace("_", " ") + f", vs {anchor_name}", braid, anchor,
                [ratio(b, a) for b, a in zip(braid, anchor)], target, higher=False)
    sweeps = [(rows(f"braid_sweep_n{n}_p{p}"), rows(f"mpi_sweep_n{n}_p{p}"), bound(n, p)) for p in pair_ids]
    sizes = sorted({size for b, _, _ in sweeps for size in b})
    for size in sizes:
        for place in ("out_of_place", "in_place"):
            braid = [value(b.get(size), place, "busbw_gbps") for b, _, _ in sweeps]
            anchor = [value(a.get(size), place, "busbw_gbps") for _, a, _ in sweeps]
            target = 2.5 if 64 * 1024 <= size <= 16 * MIB else None
            ratios = [ratio(b, a) for b, a in zip(braid, anchor)]
            add(n, f"{size_name(size)} busbw (GB/s)", place.replace("_", " ") + ", vs MPI vader", braid, anchor,
                ratios, target)
            ratios = [r for r in ratios if r is not None]
            if ratios:
                series.setdefault((n, place.replace("_", " ")), []).append(
                    (size, statistics.median(ratios), min(ratios), max(ratios)))
            if size >= 64 * MIB and n == 2:  # the bound is issue 29's at 2 ranks, one per core
                bounds = [bd.get(size) for _, _, bd in sweeps]
                add(n, f"{size_name(size)} busbw (GB/s)", place.replace("_", " ") + ", vs the memory bound", braid,
                    bounds, [ratio(b, bd) for b, bd in zip(braid, bounds)], 0.9 if n == 2 else None)
        if size >= 64 * MIB and n == 2:
            outs = [value(b.get(size), "out_of_place", "busbw_gbps") for b, _, _ in sweeps]
            ins = [value(b.get(size), "in_place", "busbw_gbps") for b, _, _ in sweeps]
            add(n, f"{size_name(size)} busbw (GB/s)", "braid out of place vs braid in place", outs, ins,
                [ratio(o, i) for o, i in zip(outs, ins)], 0.9 if n == 2 else None)
    for dtype in ("bf16", "fp16"):
        half = [rows(f"braid_{dtype}_n{n}_p{p}").get(64 * MIB) for p in pair_ids]
        if not any(half):
            continue
        bounds = [bd.get(64 * MIB) for _, _, bd in sweeps]
        for place in ("out_of_place", "in_place"):
            braid = [value(h, place, "busbw_gbps") for h in half]
            add(n, f"64 MiB {dtype} busbw (GB/s)", place.replace("_", " ") + ", vs the memory bound", braid, bounds,
                [ratio(h, bd) for h, bd in zip(braid, bounds)], 0.8)
    tcp = [(rows(f"braid_tcp_n{n}_p{p}").get(64 * MIB), rows(f"mpi_tcp_n{n}_p{p}").get(64 * MIB)) for p in pair_ids]
    if any(b or a for b, a in tcp):
        for place in ("out_of_place", "in_place"):
            braid = [value(b, place, "busbw_gbps") for b, _ in tcp]
            anchor = [value(a, place, "busbw_gbps") for _, a in tcp]
            add(n, "64 MiB busbw over tcp (GB/s)", place.replace("_", " ") + ", vs MPI tcp", braid, anchor,
                [ratio(b, a) for b, a in zip(braid, anchor)], 2.0 if place == "out_of_place" else None)

print("\n".join(lines))

if plot_path and series:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(world_sizes), figsize=(6 * len(world_sizes), 4), squeeze=False)
    for ax, n in zip(axes[0], world_sizes):
        for (ranks, place), points in sorted(series.items()):
            if ranks != n:
                continue
            xs = [p[0] for p in points]
            meds = [p[1] for p in points]
            ax.errorbar(xs, meds, yerr=[[m - p[2] for m, p in zip(meds, points)], [p[3] - m for m, p in zip(meds, points)]],
                        marker="o", capsize=3, label=place)
        ax.axhline(2.5, color="gray", linestyle="--", linewidth=1, label="target 2.5x (64 KiB-16 MiB)")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("braid busbw / MPI_Allreduce busbw")
        ax.set_title(f"{n} ranks, shm, {pairs} interleaved pairs (median, range)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path, dpi=100)
