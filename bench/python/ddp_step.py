"""DDP step time with and without no_sync(), gloo against braid's backend,
in one job (two process groups, rounds interleaved), for two models: the
tutorial model Linear(1000,512)-ReLU-Linear(512,10) and a ~29M-parameter MLP.

    braidrun --standalone --nproc-per-node=2 .venv/bin/python bench/python/ddp_step.py

Rank 0 prints a markdown table: ms per step synced and under no_sync, and
their ratio (what synchronisation costs), per backend.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import braid.torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
parser.add_argument("--models", default="tutorial,mlp")
parser.add_argument("--bucket-view", action="store_true", help="DDP's gradient_as_bucket_view=True for both")
parser.add_argument("--mappable", action="store_true",
                    help="a third entry: braid with braid.torch.use_mappable_memory() on during its steps")
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
groups = {"gloo": dist.group.WORLD, "braid": dist.new_group(backend="braid")}
if args.mappable:
    groups["braid, mappable"] = groups["braid"]


def memory_for(name):
    """The mappable entry's buckets and activations come from memory the peers map (DDP rebuilds its
    buckets in the first steps, so the allocator is on during all of that entry's steps)."""
    if name.endswith("mappable"):
        braid.torch.use_mappable_memory()
    else:
        braid.torch.use_default_memory()

MODELS = {
    "tutorial": lambda: nn.Sequential(nn.Linear(1000, 512), nn.ReLU(), nn.Linear(512, 10)),
    "mlp": lambda: nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                                       nn.Linear(4096, 1024)),
}


def step_time(ddp, x, y, opt, no_sync):
    loss_fn = nn.MSELoss()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        opt.zero_grad()
        if no_sync:
            with ddp.no_sync():
                loss_fn(ddp(x), y).backward()
        else:
            loss_fn(ddp(x), y).backward()
        opt.step()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item() / args.steps


rows = []
for model_name in args.models.split(","):
    make = MODELS[model_name]
    torch.manual_seed(0)
    ddps = {}
    for name, pg in groups.items():
        memory_for(name)
        model = make()
        ddp = DDP(model, process_group=pg, gradient_as_bucket_view=args.bucket_view)
        ddps[name] = (ddp, torch.optim.SGD(model.parameters(), lr=1e-3))
    inputs = model[0].in_features
    outputs = model[-1].out_features
    x = torch.randn(args.batch, inputs)
    y = torch.randn(args.batch, outputs)
    samples = {(name, ns): [] for name in groups for ns in (False, True)}
    for name, (ddp, opt) in ddps.items():  # warm up
        memory_for(name)
        step_time(ddp, x, y, opt, False)
    for _ in range(args.rounds):
        for name, (ddp, opt) in ddps.items():
            memory_for(name)
            for ns in (False, True):
                samples[(name, ns)].append(step_time(ddp, x, y, opt, ns))
    for name in groups:
        synced = statistics.median(samples[(name, False)])
        local = statistics.median(samples[(name, True)])
        rows.append((model_name, name, synced, local))

if rank == 0:
    print(f"\n{size} ranks, batch {args.batch} per rank, {args.steps} steps x {args.rounds} rounds (median), "
          f"gradient_as_bucket_view={args.bucket_view}, torch {torch.__version__}")
    print("| model | backend | synced ms/step | no_sync ms/step | synced / no_sync |")
    print("|---|---|---:|---:|---:|")
    for model_name, name, synced, local in rows:
        print(f"| {model_name} | {name} | {synced * 1e3:.2f} | {local * 1e3:.2f} | {synced / local:.2f} |")
dist.destroy_process_group()
