#!/usr/bin/env python3
"""braid_sim's CSV (--csv) as a plot: simulated time against ranks, one line
per algorithm, one panel per size.

    sim/plot_sim.py cells.csv out.png [title]
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def human(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    series = defaultdict(lambda: defaultdict(list))  # bytes -> algorithm -> [(ranks, seconds)]
    with open(sys.argv[1]) as f:
        for row in csv.DictReader(f):
            name = row["algorithm"] if row["algorithm"] != "auto" else f"auto ({row['ran']})"
            key = "auto" if row["algorithm"] == "auto" else name
            series[int(row["bytes"])][key].append((int(row["ranks"]), float(row["seconds"])))
    sizes = sorted(series)
    if not sizes:
        sys.exit("no cells in " + sys.argv[1])
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 3.8), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        for name, points in sorted(series[size].items()):
            points.sort()
            style = dict(linestyle="--", color="black", linewidth=1) if name == "auto" else {}
            label = "selector's choice" if name == "auto" else name
            ax.plot([p[0] for p in points], [p[1] * 1e6 for p in points], marker="o", markersize=3, label=label,
                    **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(human(size))
        ax.set_xlabel("ranks")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("simulated time (us)")
    axes[0][-1].legend(fontsize=8)
    if len(sys.argv) > 3:
        fig.suptitle(sys.argv[3])
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
