"""all_reduce on torch tensors from Python: braid (plain API and the
torch.distributed backend) against gloo, in one job, rounds interleaved.

    braidrun --standalone --nproc-per-node=2 .venv/bin/python bench/python/allreduce.py

Rank 0 prints a markdown table: time per call (median of the rounds' means)
and bus bandwidth (2 (n-1)/n * bytes / time, as nccl-tests), and the ratios
to gloo.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import braid
import braid.torch  # noqa: F401  (registers the "braid" backend)

parser = argparse.ArgumentParser()
parser.add_argument("--sizes", default="8,64K,1M,64M")
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--seconds", type=float, default=0.4, help="per round and size, roughly")
args = parser.parse_args()


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
braid_pg = dist.new_group(backend="braid")
group = braid.init()

# The mappable runner reduces a tensor of the same size made under
# braid.torch.use_mappable_memory() (memory the peers map), not `t`.
mapped = [None]
runners = {
    "gloo": lambda t: dist.all_reduce(t, group=None),
    "braid backend": lambda t: dist.all_reduce(t, group=braid_pg),
    "braid plain": lambda t: group.all_reduce(t),
    "backend, mappable": lambda t: dist.all_reduce(mapped[0], group=braid_pg),
}


def timed(run, t, iterations):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        run(t)
    elapsed = time.perf_counter() - start
    # Every rank's time counts: the slowest one's.
    slowest = torch.tensor([elapsed], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item() / iterations


rows = []
for text in args.sizes.split(","):
    nbytes = parse_size(text)
    # Zeros: summed thousands of times they stay exact (ones would overflow).
    t = torch.zeros(max(1, nbytes // 4), dtype=torch.float32)
    braid.torch.use_mappable_memory(min_bytes=1)
    mapped[0] = torch.zeros_like(t)
    braid.torch.use_default_memory()
    # Iterations from gloo's speed, the same for everyone.
    probe = timed(runners["gloo"], t, 3)
    iterations = max(3, min(20000, int(args.seconds / probe)))
    samples = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, run in runners.items():
            samples[name].append(timed(run, t, iterations))
    assert not t.any() and not mapped[0].any(), "a sum of zeros was not zero"
    row = {"bytes": nbytes, "iterations": iterations}
    for name in runners:
        seconds = statistics.median(samples[name])
        row[name] = (seconds, 2 * (size - 1) / size * nbytes / seconds / 1e9)
    rows.append(row)

if rank == 0:
    print(f"\n{size} ranks, torch {torch.__version__}, median of {args.rounds} interleaved rounds")
    print("| bytes | gloo us | braid backend us | braid plain us | backend, mappable us | gloo GB/s | backend GB/s "
          "| plain GB/s | mappable GB/s | backend / gloo busbw | plain / gloo busbw | mappable / backend busbw |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        g, b, p, m = row["gloo"], row["braid backend"], row["braid plain"], row["backend, mappable"]
        print(f"| {row['bytes']} | {g[0] * 1e6:.1f} | {b[0] * 1e6:.1f} | {p[0] * 1e6:.1f} | {m[0] * 1e6:.1f} "
              f"| {g[1]:.3f} | {b[1]:.3f} | {p[1]:.3f} | {m[1]:.3f} | {g[0] / b[0]:.1f}x | {g[0] / p[0]:.1f}x "
              f"| {b[0] / m[0]:.2f}x |")
# async_op=True: how long the call takes to hand back its Work (8 bytes; the
# collective runs on braid's progress thread, never the caller's).
issue = {}
for name, pg in (("gloo", None), ("braid backend", braid_pg)):
    t = torch.zeros(2, dtype=torch.float32)
    samples = []
    for _ in range(args.rounds):
        dist.barrier()
        start = time.perf_counter()
        works = [dist.all_reduce(t, group=pg, async_op=True) for _ in range(200)]
        samples.append((time.perf_counter() - start) / len(works))
        for w in works:
            w.wait()
    issue[name] = statistics.median(samples)
if rank == 0:
    print(f"\nasync_op=True, 8 bytes: the call returns its Work after {issue['braid backend'] * 1e6:.1f} us "
          f"(braid backend), {issue['gloo'] * 1e6:.1f} us (gloo); median of {args.rounds} rounds of 200 calls")
dist.destroy_process_group()
