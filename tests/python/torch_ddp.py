# DDP training as the PyTorch tutorial writes it, with the process group's
# backend as the only knob:
#
#   torch_ddp.py --mode braid|gloo|hook|hook-pg --out PARAMS.pt
#
#   braid: init_process_group("braid"): DDP's gradients over braid's backend.
#   gloo:  init_process_group("gloo"): the reference.
#   hook:  gloo as the process group, gradients averaged by braid through
#          braid.torch.allreduce_hook on braid.init()'s group.
#   hook-pg: the same hook on a "braid" process group made with
#          dist.new_group(backend="braid") (meets over torch's store: torchrun).
#
# The model is the tutorial's Linear(1000, 512) -> ReLU -> Linear(512, 10),
# SGD, a DistributedSampler over a synthetic data set, every seed fixed: the
# modes must all end with the same parameters (torch_ddp_compare.py).
# After training, every rank's parameters are gathered and must be equal
# across ranks; rank 0 writes them to --out.
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import braid
import braid.torch

EPOCHS = 2
BATCH = 16
SAMPLES = 960


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["braid", "gloo", "hook", "hook-pg"], required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    dist.init_process_group("braid" if args.mode == "braid" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"]) and world >= 2, world
    torch.set_num_threads(1)  # 2 cores for up to 4 ranks

    # Same data on every rank; the sampler gives each rank its shard.
    data_gen = torch.Generator().manual_seed(1234)
    features = torch.randn(SAMPLES, 1000, generator=data_gen)
    labels = torch.randint(0, 10, (SAMPLES,), generator=data_gen)
    dataset = TensorDataset(features, labels)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)

    # Different initial parameters per rank: DDP must broadcast rank 0's.
    torch.manual_seed(100 + rank)
    model = torch.nn.Sequential(torch.nn.Linear(1000, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    ddp = DDP(model)
    if args.mode == "hook":
        ddp.register_comm_hook(braid.init(), braid.torch.allreduce_hook)
    elif args.mode == "hook-pg":
        braid_pg = dist.new_group(backend="braid")
        assert isinstance(braid_pg._get_backend(torch.device("cpu")), braid.torch.Backend), type(braid_pg)
        ddp.register_comm_hook(braid_pg, braid.torch.allreduce_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()

    steps = 0
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
    assert steps >= 20, f"only {steps} steps"

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    for r in range(1, world):
        assert torch.equal(gathered[r], gathered[0]), (
            f"{args.mode}: rank {r}'s parameters differ from rank 0's by up to "
            f"{(gathered[r] - gathered[0]).abs().max().item()}")
    if rank == 0:
        torch.save({"mode": args.mode, "world": world, "steps": steps, "params": flat}, args.out)
    dist.barrier()
    dist.destroy_process_group()
    print(f"torch ddp ok: rank {rank} of {world}, mode {args.mode}, {steps} steps, loss {loss.item():.4f}",
          flush=True)
    if args.mode != "braid":
        # DDP's group here is gloo's. torch 2.15's process exit after a gloo
        # job sometimes aborts ("terminate called without an active
        # exception"): seen in mode gloo, with no braid group in the process,
        # 2 of about 10 CI runs on 2 loaded cores. Not braid's to test here:
        # braid's own exit is (mode braid, torch_training_test, and
        # bench/ddp_exit_soak.sh with a gloo and a braid group: 0 of 200).
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
