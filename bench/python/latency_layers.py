"""Where an 8-byte all_reduce's time goes through torch's layers, braid's backend as the default group:

    braidrun --standalone --nproc-per-node=2 .venv/bin/python bench/python/latency_layers.py

Rank 0 prints microseconds per call (3000 calls after 200 warm-up, the median of 3 rounds, one job) for braid's plain
API, the backend's own method, dist.all_reduce, and the ProcessGroup method with asyncOp left true;
then how long an asynchronous call takes to return its Work (the backend's method, dist.all_reduce).
The same two dist.all_reduce rows on torch's "fake" backend, which moves nothing, give the floor of
torch's own layers (Python, the dispatcher, ProcessGroup) that no backend can go under.
"""
import time

import torch
import torch.distributed as dist

import braid
import braid.torch  # noqa: F401
from torch.testing._internal.distributed import fake_pg  # noqa: F401  (registers the "fake" backend)

torch.set_num_threads(1)
dist.init_process_group("braid")
pg = dist.distributed_c10d._get_default_group()
backend = pg._get_backend(torch.device("cpu"))
group = braid.init()
t = torch.zeros(2)
blocking = dist.AllreduceOptions()
blocking.asyncOp = False


def timed(call, n=3000):
    """Microseconds per call, after 200 warm-up calls, both ranks starting together."""
    for _ in range(200):
        call()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n * 1e6


fake = dist.new_group(backend="fake")
rows = [
    ("braid plain `group.all_reduce(t)`", lambda: group.all_reduce(t)),
    ("the backend's own `allreduce([t], asyncOp=False).wait()`", lambda: backend.allreduce([t], blocking).wait()),
    ("`dist.all_reduce(t)`", lambda: dist.all_reduce(t)),
    ("`pg.allreduce([t]).wait()` (asyncOp left true)", lambda: pg.allreduce([t]).wait()),
    ("`dist.all_reduce(t)` on torch's fake backend (moves nothing)", lambda: dist.all_reduce(t, group=fake)),
]
# Three rounds over the rows, the median of each: the first row measured
# right after start-up is often slower, whichever it is.
times = {name: [] for name, _ in rows}
for _ in range(3):
    for name, call in rows:
        times[name].append(timed(call))
if dist.get_rank() == 0:
    print("| call | us (median of 3 rounds) |\n|---|---:|")
    for name, _ in rows:
        print(f"| {name} | {sorted(times[name])[1]:.1f} |", flush=True)


def bench_issue(name, issue, n=3000):
    """Microseconds until an async call returns its Work (median and 90th percentile), waited for untimed."""
    took = []
    for i in range(200 + n):
        start = time.perf_counter()
        work = issue()
        took.append(time.perf_counter() - start)
        work.wait()
    took = sorted(took[200:])
    if dist.get_rank() == 0:
        print(f"| {name}, returned (median; p90) | {took[n // 2] * 1e6:.1f}; {took[n * 9 // 10] * 1e6:.1f} |", flush=True)


async_opts = dist.AllreduceOptions()
bench_issue("braid plain `group.all_reduce(t, async_op=True)`", lambda: group.all_reduce(t, async_op=True))
bench_issue("the backend's own `allreduce([t])`, async", lambda: backend.allreduce([t], async_opts))
bench_issue("`dist.all_reduce(t, async_op=True)`", lambda: dist.all_reduce(t, async_op=True))
bench_issue("`dist.all_reduce(t, async_op=True)` on the fake backend", lambda: dist.all_reduce(t, group=fake, async_op=True))
dist.destroy_process_group()
