"""The "braid" torch.distributed backend on CUDA tensors, on the GPU machine (gpu_check.sh):

    PYTHONPATH=<braid installed there> python3 gpu_torch_backend_check.py WORLD

WORLD processes on GPU 0 (mp.spawn, file:// init), each checking all_reduce, broadcast,
all_gather and reduce_scatter_tensor on CUDA tensors against the arithmetic, with the inputs
produced by kernels still queued on torch's current stream when the collective is issued (the
collective must come after them), then the time of a blocking 8-byte and 4 MiB all_reduce.
Prints "gpu torch backend ok: rank R of W" per rank.
"""
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, path):
    import braid.torch  # noqa: F401  registers "braid" (in the spawned child too)

    torch.cuda.set_device(0)
    dist.init_process_group("braid", init_method=f"file://{path}", rank=rank, world_size=world)
    total = world * (world + 1) / 2
    for n in (1, 1000, 1 << 22):
        x = torch.zeros(n, device="cuda")
        x.add_(rank + 1)  # queued on the current stream, not yet run
        dist.all_reduce(x)
        assert torch.all(x == total).item(), f"all_reduce n={n}: {x[:4].tolist()}"
    b = torch.full((4096,), float(rank), device="cuda")
    dist.broadcast(b, src=world - 1)
    assert torch.all(b == world - 1).item(), "broadcast"
    out = torch.empty(world * 1000, device="cuda")
    dist.all_gather_into_tensor(out, torch.full((1000,), float(rank), device="cuda"))
    assert torch.equal(out.cpu(), torch.arange(world).repeat_interleave(1000).float()), "all_gather_into_tensor"
    full = torch.ones(world * 512, device="cuda") * (rank + 1)
    part = torch.empty(512, device="cuda")
    dist.reduce_scatter_tensor(part, full)
    assert torch.all(part == total).item(), "reduce_scatter_tensor"
    for n, label in ((2, "8 B"), (1 << 20, "4 MiB")):
        t = torch.zeros(n, device="cuda")
        for _ in range(10):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        start = time.perf_counter()
        iters = 200
        for _ in range(iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        if rank == 0:
            print(f"braid backend, {world} rank(s) on GPU 0: all_reduce {label}: "
                  f"{(time.perf_counter() - start) / iters * 1e6:.1f} us", flush=True)
    dist.destroy_process_group()
    print(f"gpu torch backend ok: rank {rank} of {world}", flush=True)


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    path = os.path.join(tempfile.mkdtemp(), "store")
    mp.spawn(run, args=(world, path), nprocs=world, join=True)


if __name__ == "__main__":
    main()
