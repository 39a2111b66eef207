"""DeepSpeed's shared-memory all-reduce as an anchor (issue 29, item 7), beside braid and gloo in one job.

    bench/python/deepspeed_shm.sh            # fetches DeepSpeed's source, builds its op, runs 2 and 4 ranks

or by hand, under braidrun (which sets MASTER_ADDR, MASTER_PORT and LOCAL_WORLD_SIZE):

    braidrun --standalone --nproc-per-node=2 .venv/bin/python bench/python/deepspeed_shm.py --source DIR

DeepSpeed's own C++ (csrc/cpu/comm/shm.cpp and shm_interface.cpp from the deepspeed sdist on PyPI,
which `--source` names) is compiled with torch's cpp_extension and the flags DeepSpeed's
ShareMemCommBuilder uses (-O2 -fopenmp), then called as DeepSpeed calls it
(torch.ops.deepspeed.inference_all_reduce_, after initialize(world, rank) with LOCAL_SIZE set).
Nothing of DeepSpeed's is copied into braid.

For each size, in rounds interleaved so the machine's drift hits all alike, rank 0 prints the
median time per in-place float32 sum over the rounds for: DeepSpeed's shm op, braid's plain API
(`braid.init().all_reduce`), `dist.all_reduce` on backend braid, and `dist.all_reduce` on gloo;
then bus bandwidth and braid's ratio to DeepSpeed. Every call's result is checked once per size.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.utils import cpp_extension

import braid
import braid.torch  # noqa: F401

parser = argparse.ArgumentParser()
parser.add_argument("--source", required=True, help="the unpacked deepspeed sdist")
parser.add_argument("--build", default="bench/out/deepspeed_build", help="where the op is compiled")
parser.add_argument("--sizes", default="8,65536,1048576,16777216,67108864", help="bytes per rank")
parser.add_argument("--rounds", type=int, default=5)
args = parser.parse_args()

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # DeepSpeed's reduce loops are OpenMP: one thread per rank
os.environ["LOCAL_SIZE"] = os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
comm = os.path.join(args.source, "csrc", "cpu", "comm")
os.makedirs(args.build, exist_ok=True)


def load_op():
    return cpp_extension.load(name="deepspeed_shm_comm",
                              sources=[os.path.join(comm, "shm_interface.cpp"), os.path.join(comm, "shm.cpp")],
                              extra_include_paths=[comm], extra_cflags=["-O2", "-fopenmp"],
                              extra_ldflags=["-fopenmp"], build_directory=args.build, verbose=False)


# Rank 0 compiles; the others load what it built.
if rank == 0:
    ds = load_op()
dist.barrier()
if rank != 0:
    ds = load_op()
ds.initialize(world, rank)
dist.barrier()

braid_pg = dist.new_group(backend="braid")
plain = braid.init()


def deepspeed_call(t):
    torch.ops.deepspeed.inference_all_reduce_(t)


CALLS = [
    ("DeepSpeed shm", deepspeed_call),
    ("braid plain API", lambda t: plain.all_reduce(t)),
    ("dist.all_reduce, backend braid", lambda t: dist.all_reduce(t, group=braid_pg)),
    ("dist.all_reduce, gloo", lambda t: dist.all_reduce(t)),
]


def check(name, call, n):
    t = torch.full((n,), float(rank + 1))
    call(t)
    want = world * (world + 1) / 2
    if not torch.all(t == want):
        raise SystemExit(f"rank {rank}: {name} at {n * 4} B: got {t[:4].tolist()}, want {want}")


def timed(call, n):
    """Seconds per call over a count of calls fixed by the size (the same on every rank)."""
    calls = max(5, min(2000, (1 << 27) // (n * 4)))
    t = torch.ones(n)
    for _ in range(3):
        call(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        call(t)
    return (time.perf_counter() - start) / calls


sizes = [int(s) for s in args.sizes.split(",")]
times = {(name, size): [] for name, _ in CALLS for size in sizes}
for size in sizes:
    for name, call in CALLS:
        check(name, call, max(1, size // 4))
for _ in range(args.rounds):
    for size in sizes:
        for name, call in CALLS:
            times[(name, size)].append(timed(call, max(1, size // 4)))

if rank == 0:
    factor = 2 * (world - 1) / world
    print(f"| ranks | size | " + " | ".join(f"{name} us" for name, _ in CALLS) +
          " | braid plain / DeepSpeed (time) | backend braid / DeepSpeed (time) | DeepSpeed busbw GB/s |")
    print("|---:|---:|" + "---:|" * (len(CALLS) + 3))
    for size in sizes:
        med = {name: statistics.median(times[(name, size)]) for name, _ in CALLS}
        cells = " | ".join(f"{med[name] * 1e6:.1f}" for name, _ in CALLS)
        ds_time = med["DeepSpeed shm"]
        print(f"| {world} | {size} | {cells} | {med['braid plain API'] / ds_time:.2f} | "
              f"{med['dist.all_reduce, backend braid'] / ds_time:.2f} | {size * factor / ds_time / 1e9:.2f} |",
              flush=True)
dist.barrier()
dist.destroy_process_group()
