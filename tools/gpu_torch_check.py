#!/usr/bin/env python3
"""torch baselines on the GPU machine, for tools/gpu_check.sh.

Prints Markdown tables: device-to-device copy and torch.add bandwidth (GB/s
of traffic, read + write, as reduce_kernels_cuda_bench counts it) and
torch.distributed.all_reduce over NCCL at world size 1 (the sizes braid_bench
-t nccl uses). Writes RESULTS_DIR/kernel_bandwidth.png from
RESULTS_DIR/reduce_kernels_cuda_bench.txt and these numbers when matplotlib
is there.

    python3 tools/gpu_torch_check.py RESULTS_DIR
"""
import os
import socket
import sys


def timed(torch, fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps  # seconds per call


def bandwidth(torch):
    rows = []
    for bytes_ in [1 << 20, 16 << 20, 256 << 20, 1 << 30]:
        n = bytes_ // 4
        a = torch.ones(n, device="cuda")
        b = torch.ones(n, device="cuda")
        copy = timed(torch, lambda: a.copy_(b), 20)
        add = timed(torch, lambda: a.add_(b), 20)
        rows.append((bytes_, 2 * bytes_ / copy / 1e9, 3 * bytes_ / add / 1e9))
    print("| size | D2D copy GB/s | torch.add_ GB/s (float32) |\n|---:|---:|---:|")
    for bytes_, copy, add in rows:
        print(f"| {bytes_} | {copy:.0f} | {add:.0f} |")
    return rows


def all_reduce(torch):
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    print("\n| bytes | torch.distributed.all_reduce us (NCCL, world size 1) |\n|---:|---:|")
    size = 8
    while size <= 256 << 20:
        t = torch.ones(max(1, size // 4), device="cuda")
        print(f"| {size} | {timed(torch, lambda: dist.all_reduce(t), 20) * 1e6:.1f} |")
        size *= 4
    dist.destroy_process_group()


def plot(results, rows):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(no matplotlib: no kernel_bandwidth.png)")
        return
    kernels = {}
    path = os.path.join(results, "reduce_kernels_cuda_bench.txt")
    if os.path.exists(path):
        for line in open(path):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 5 and cells[0].isdigit():
                kernels.setdefault(cells[1], []).append((int(cells[0]), float(cells[3])))
    fig, ax = plt.subplots(figsize=(8, 5))
    for dtype, points in sorted(kernels.items()):
        ax.plot(*zip(*points), marker=".", label=f"braid dst+=src {dtype}")
    ax.plot([r[0] for r in rows], [r[1] for r in rows], "k--", label="D2D copy (torch)")
    ax.plot([r[0] for r in rows], [r[2] for r in rows], "k:", label="torch.add_ float32")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes")
    ax.set_ylabel("GB/s (read + write)")
    ax.legend(fontsize=7)
    fig.savefig(os.path.join(results, "kernel_bandwidth.png"), dpi=120)
    print("\nwrote kernel_bandwidth.png")


def main():
    results = sys.argv[1]
    import torch

    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, NCCL "
          f"{'.'.join(map(str, torch.cuda.nccl.version()))}\n")
    rows = bandwidth(torch)
    all_reduce(torch)
    plot(results, rows)


if __name__ == "__main__":
    main()
