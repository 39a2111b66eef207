# The "braid" backend with no launcher at all: torch.multiprocessing.spawn
# and a file:// init method, as many scripts start their ranks. No RANK,
# WORLD_SIZE or MASTER_* in the environment: braid learns its rank from
# torch and meets over torch's FileStore.
#
#   torch_spawn.py NPROC     prints "torch spawn ok: rank R of W" per rank
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RUN_ID", "GROUP_RANK", "ROLE_RANK")


def worker(rank, world, path):
    import braid.torch  # noqa: F401  (registers the backend)

    dist.init_process_group("braid", init_method="file://" + path, rank=rank, world_size=world)
    assert dist.get_rank() == rank and dist.get_world_size() == world
    gloo = dist.new_group(backend="gloo")
    for n in (5, 100_001):
        t = torch.arange(n, dtype=torch.float64) * (rank + 1)
        ref = t.clone()
        dist.all_reduce(t)
        dist.all_reduce(ref, group=gloo)
        assert torch.equal(t, ref), f"rank {rank}: all_reduce n={n} differs from gloo's"
    out = [torch.zeros(3, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(out, torch.full((3,), rank, dtype=torch.int64))
    assert all(torch.equal(o, torch.full((3,), r, dtype=torch.int64)) for r, o in enumerate(out)), out
    transport = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu")).transport
    dist.destroy_process_group()
    print(f"torch spawn ok: rank {rank} of {world} (transport {transport})", flush=True)
    # A process holding a gloo group sometimes aborts at interpreter exit
    # ("terminate called without an active exception": gloo's threads still
    # hold work whose tensors need the GIL during finalization; PyTorch's
    # #179291). Seen 3 times in this suite on 2 loaded cores, once with no
    # braid group in the process: torch's to fix, not braid's to test here.
    os._exit(0)


def main():
    world = int(sys.argv[1])
    for name in LAUNCH_ENV:
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        mp.spawn(worker, args=(world, os.path.join(tmp, "store")), nprocs=world)


if __name__ == "__main__":
    main()
