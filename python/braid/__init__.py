"""braid from Python: collectives on NumPy, torch and JAX arrays (through DLPack, no copies).

    import braid, numpy as np
    group = braid.init()                     # from braidrun's / torchrun's / mpirun's environment
    x = np.ones(1000, dtype=np.float32)
    group.all_reduce(x, op="sum")            # in place; out=... for out of place
    work = group.all_reduce(x, async_op=True)
    work.wait(timeout=30)                    # braid.Error names rank, peer and collective

Every collective of braid's C API is a method of Group: all_reduce, reduce,
broadcast, all_gather, reduce_scatter, all_to_all, barrier, send, recv.
``braid.Reducer`` is DDP's bucketed gradient reducer for trainers that are
not torch. ``import braid.torch`` adds the torch.distributed backend "braid".
"""

import os
import sys

from braid._braid import Error, Group, Reducer, Work, version

__all__ = ["Error", "Group", "Reducer", "Work", "init", "default_group", "no_sync", "version"]

_default = None


def init(timeout=None, transport=None):
    """Joins the job's group (collective: every rank calls it) and returns it.

    timeout: seconds, for the rendezvous and every collective (default
    BRAID_TIMEOUT_SEC, 600). transport: "auto", "shm", "tcp", "mpi" (default
    BRAID_TRANSPORT). A second call returns the same group.

    One runtime per process: after init_process_group(backend="braid") this
    is the group torch's default process group runs on (no new rendezvous,
    the same connections), and init_process_group("braid") after init() runs
    on init()'s group. Under torchrun, or when torch.distributed is imported
    and RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set, braid meets
    through torch's store (torch.distributed.rendezvous("env://")), so that
    torch's store can own MASTER_PORT.
    """
    global _default
    if _default is None:
        _default = _torch_world(timeout) or Group(timeout=timeout, transport=transport)
    return _default


def _torch_world(timeout):
    """The world group of torch's braid backend, or one made over torch's store; None: braid's own way."""
    braid_torch = sys.modules.get("braid.torch")
    if braid_torch is not None:
        handle = braid_torch._world_handle()
        if handle:
            return Group._adopt(handle)
    env = os.environ
    if env.get("BRAID_STORE_ADDR"):
        return None  # braidrun's store
    torch_owns_port = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or "torch.distributed" in sys.modules
    if not torch_owns_port or not all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return None
    import braid.torch

    return braid.torch._join_world(timeout)


def default_group():
    """The group init() made; braid.Error if it was not called."""
    if _default is None:
        raise Error("braid.init() was not called")
    return _default


class no_sync:
    """``with braid.no_sync(reducer):`` iterations accumulate without synchronizing (DDP's no_sync)."""

    def __init__(self, reducer):
        self._reducer = reducer

    def __enter__(self):
        self._reducer.no_sync_begin()
        return self._reducer

    def __exit__(self, *exc):
        self._reducer.no_sync_end()
        return False
