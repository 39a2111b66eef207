"""One braid runtime per process: braid.init() and init_process_group("braid") share a group.

    torch_one_runtime.py braid-first|torch-first

Every rank: makes both in the given order, then checks that torch's default
group (its cpu and its cuda backend) and braid.init() issue on one braid
group (one rendezvous, one set of connections), that collectives of the two
APIs interleave with the right results, that a torch subgroup is a group of
its own, and that braid.init()'s group outlives destroy_process_group.
Run under braidrun and under torchrun (torch_launchers_test.sh).
"""

import datetime
import sys

import numpy as np
import torch
import torch.distributed as dist

import braid
import braid.torch  # noqa: F401  registers "braid"


def check(condition, what):
    if not condition:
        raise AssertionError(f"rank {dist.get_rank() if dist.is_initialized() else '?'}: {what}")


def main():
    order = sys.argv[1]
    check(order in ("braid-first", "torch-first"), f"unknown order {order}")
    timeout = datetime.timedelta(seconds=60)
    if order == "braid-first":
        group = braid.init(timeout=60)
        dist.init_process_group("braid", timeout=timeout)
    else:
        dist.init_process_group("braid", timeout=timeout)
        group = braid.init(timeout=60)
    rank, size = dist.get_rank(), dist.get_world_size()
    check((group.rank, group.size) == (rank, size), f"braid.init() is rank {group.rank} of {group.size}")
    check(braid.init() is group, "a second braid.init() returned another group")

    world = dist.group.WORLD
    cpu = world._get_backend(torch.device("cpu"))
    cuda = world._get_backend(torch.device("cuda"))
    check(cpu._group_handle == group._handle, "torch's cpu backend and braid.init() hold different braid groups")
    check(cuda._group_handle == group._handle, "torch's cuda backend and braid.init() hold different braid groups")

    # The two APIs interleaved on the one group, blocking and asynchronous.
    for step in range(20):
        t = torch.full((1000,), float(rank + step))
        work = dist.all_reduce(t, async_op=True)
        x = np.full(257, rank + 1, dtype=np.float64)
        group.all_reduce(x)
        pending = group.all_reduce(np.full(3, step, dtype=np.int64), async_op=True)
        work.wait()
        want = sum(r + step for r in range(size))
        check(bool((t == want).all()), f"dist.all_reduce step {step}: {t[0].item()} != {want}")
        check(bool((x == size * (size + 1) / 2).all()), f"braid all_reduce step {step}: {x[0]}")
        check(bool((pending.wait() == step * size).all()), f"braid async all_reduce step {step}")

    # A torch subgroup is a braid group of its own (its own rendezvous).
    sub = dist.new_group(list(range(size)))
    sub_backend = sub._get_backend(torch.device("cpu"))
    check(sub_backend._group_handle != group._handle, "a torch subgroup reused the world's braid group")
    t = torch.ones(5)
    dist.all_reduce(t, group=sub)
    check(bool((t == size).all()), "subgroup all_reduce")

    dist.destroy_process_group()
    x = np.ones(8, dtype=np.float32)
    group.all_reduce(x)
    check(bool((x == size).all()), "braid.init()'s group after destroy_process_group")
    group.barrier()
    print(f"torch one runtime ok: rank {rank} of {size}, {order}, transport {group.transport}", flush=True)


if __name__ == "__main__":
    main()
