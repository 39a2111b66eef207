"""braid for PyTorch: the "braid" torch.distributed backend and a DDP communication hook.

Importing this module registers the backend, so a DDP script switches with one word:

    import braid.torch  # registers "braid"
    dist.init_process_group("braid")

The backend is a C++ extension (braid/_torch.so, a torch 2.x c10d::Backend
for devices cpu and cuda) over braid's C API, the same libbraid.so that the
plain package loads. It meets the other ranks through the store torch gives
every backend, so it runs under braidrun, torchrun or any init_method.
Errors (a dead peer, a mismatch, a deadline) raise RuntimeError with braid's
message.

Timeout: init_process_group(timeout=...) and new_group(timeout=...) set
braid's per-collective deadline; a call's own timeout (Work.wait(timeout),
c10d's option structs) wins. Left at torch's default (10 minutes for a
plugin), braid's own knob BRAID_TIMEOUT_SEC applies (default 600 s).

For a job that keeps gloo (or nccl) as its process group but wants the
gradients reduced by braid, `allreduce_hook` is a DDP communication hook:

    ddp.register_comm_hook(braid.init(), braid.torch.allreduce_hook)      # under braidrun
    ddp.register_comm_hook(dist.new_group(backend="braid"), braid.torch.allreduce_hook)  # anywhere

torch's CPU tensors live in private memory, which the other ranks on the
host reach only through kernel copies. After `use_mappable_memory()` (before
DDP is built), torch's larger CPU tensors, DDP's gradient buckets among them,
come from memory the peers map, and the backend reduces them in place there.
"""

import atexit
import threading

import torch
import torch.distributed as dist  # before _torch: registers c10d's ProcessGroup and Store with pybind11

import braid
from braid import _torch

__all__ = ["BACKEND", "allreduce_hook", "create_backend", "use_default_memory", "use_mappable_memory"]

BACKEND = "braid"

Backend = _torch.BraidBackend


def create_backend(dist_backend_opts, backend_options=None):
    """The backend creator torch calls (register_backend's extended API).

    Collective over the group's ranks: every rank calls it with torch's
    _DistributedBackendOptions (a prefix store of its own, the group rank and
    size, the timeout). Blocks until every rank joined or the deadline.

    torch calls it once per device of the group (cpu, cuda): the second call
    shares the first one's braid group. The default group shares braid.init()'s
    when that came first.
    """
    timeout = dist_backend_opts.timeout
    if timeout is None or timeout == dist.default_pg_timeout:
        seconds = 0.0  # torch's default means "not given": BRAID_TIMEOUT_SEC applies
    else:
        seconds = timeout.total_seconds()
    store, rank, size = dist_backend_opts.store, dist_backend_opts.group_rank, dist_backend_opts.group_size
    group_id = dist_backend_opts.group_id
    is_world = not dist.is_initialized()  # torch makes its default group first
    handle = _handle_of(_last_made[1]) if _last_made[0] == group_id else 0
    if not handle and is_world and braid._default is not None:
        if (braid._default.rank, braid._default.size) == (rank, size):
            handle = braid._default._handle
    if handle:
        backend = _torch.share_backend(handle, store, seconds)
    else:
        backend = _torch.create_backend(store, rank, size, seconds)
    _last_made[:] = [group_id, backend]
    if is_world:
        _shared["world"] = backend
    return backend


# The group torch made last and its first device's backend: torch makes a
# group's backends (one a device) one after the other, and the second shares
# the first one's braid group. Strong references: a backend that torch shut
# down holds no braid resources, and its _group_handle raises.
_last_made = [None, None]
_shared = {"world": None}  # the backend of torch's default group


def _handle_of(backend):
    if backend is None:
        return 0
    try:
        return backend._group_handle
    except RuntimeError:  # shut down (destroy_process_group)
        return 0


def _world_handle():
    """The braid group of torch's live default "braid" group (0: none); braid.init() adopts it."""
    return _handle_of(_shared["world"])


def _join_world(timeout):
    """braid.init()'s world made over torch's store (torchrun's agent store, or env://): a braid.Group.

    The backend made here ends at once; braid.init()'s Group keeps the braid
    group, and init_process_group("braid") shares it.
    """
    import datetime

    seconds = float(timeout) if timeout else 0.0
    wait = datetime.timedelta(seconds=seconds) if seconds > 0 else dist.default_pg_timeout
    store, rank, size = next(dist.rendezvous("env://", timeout=wait))
    backend = _torch.create_backend(dist.PrefixStore("braid/world/", store), rank, size, seconds)
    return braid.Group._adopt(backend._group_handle)  # while the backend still holds the group


def _register():
    # Backend.register_backend refuses a second registration (a reload).
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create_backend, extended_api=True, devices=["cpu", "cuda"])
    # braid records its own collectives (its flight recorder, dumped to
    # BRAID_FLIGHT_DIR on a failure), as gloo does: torch need not attach its
    # FlightRecorder hook to braid's groups, which records every collective
    # again and took 2-5 us of an 8-byte dist.all_reduce (bench/RESULTS.md).
    recording = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if isinstance(recording, set):
        recording.add(BACKEND)


_register()


_hook_backends_lock = threading.Lock()
# id(group) -> (group, backend); the group is kept so its id is not reused.
_hook_backends = {}


@atexit.register
def _release_hook_backends():
    # At exit, not at finalization: a backend's completion thread that
    # Python's finalization stops while it is inside braid's C++ aborts the
    # process ("terminate called without an active exception").
    with _hook_backends_lock:
        _hook_backends.clear()


def _backend_for(group):
    """A braid backend on braid.Group `group`'s own connections (no rendezvous), made once."""
    with _hook_backends_lock:
        entry = _hook_backends.get(id(group))
        if entry is None:
            entry = (group, _torch.share_backend(group._handle, None, 0.0))
            _hook_backends[id(group)] = entry
        return entry[1]


def allreduce_hook(state, bucket):
    """DDP communication hook: averages each gradient bucket over braid.

    Register it on a DDP model whose process group is gloo or nccl:
    ``ddp.register_comm_hook(state, braid.torch.allreduce_hook)``, where
    `state` is

      - a braid Group (from braid.init()), or None for braid.init()'s group:
        braid meets through its own store (braidrun's, or MASTER_PORT when
        no PyTorch store holds it: not under torchrun);
      - a "braid" torch process group, ``dist.new_group(backend="braid")``:
        braid meets through torch's store, so this works under torchrun too.

    The reduction is issued at once and the returned torch.futures.Future
    completes with the averaged bucket (in place), from the backend's
    completion thread (a braid Group's through a backend on its own
    connections); a braid failure sets the future's exception, which DDP
    raises.
    """
    tensor = bucket.buffer()
    if not isinstance(state, dist.ProcessGroup):
        state = _backend_for(state if state is not None else braid.init())  # init() returns the same group again
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    return state.allreduce([tensor], opts).get_future().then(lambda fut: fut.value()[0])


def use_mappable_memory(min_bytes=1 << 20):
    """torch's CPU tensors of at least `min_bytes` from braid_mem_alloc, from now on.

    Process-wide (torch has one CPU allocator): every CPU allocation of
    `min_bytes` or more becomes a memfd of its own that braid's shm peers map
    once and then read and write in place, so collectives on such tensors
    (DDP's gradient buckets: call this before building DDP) take braid's
    fastest one-host paths instead of kernel copies. Smaller allocations, and
    any past the descriptor cap (a quarter of RLIMIT_NOFILE, at most 1,024
    live), come from torch's allocator as before. A freed tensor's memory is
    kept for the next tensor of the same size in bytes (training makes the
    same sizes every step; a kept block is already mapped by the peers)
    until `use_default_memory()`. The costs: 4 KiB pages
    (compute on such tensors can be a few percent slower), one descriptor per
    tensor, and a fork (DataLoader workers) copies these tensors into the
    child. Call again to change `min_bytes`; `use_default_memory()` undoes it.

    Call it on every rank alike: a collective whose tensors are mappable on
    some ranks and not on others still runs, but through the windows, as on
    torch's own memory (the ranks vote for one path). To keep ranks from
    reaching the descriptor cap apart, the soft descriptor limit is raised
    toward 4,096 (the hard limit allowing).
    """
    import resource

    min_bytes = int(min_bytes)
    if min_bytes < 1:
        raise ValueError(f"use_mappable_memory: min_bytes must be at least 1, not {min_bytes}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    _torch.use_mappable_memory(min_bytes)


def use_default_memory():
    """torch's CPU allocator as before use_mappable_memory(); frees the kept blocks. Tensors made meanwhile stay valid."""
    _torch.use_default_memory()
