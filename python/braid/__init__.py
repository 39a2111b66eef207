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

from braid._braid import Error, Group, Reducer, Work, version

__all__ = ["Error", "Group", "Reducer", "Work", "init", "default_group", "no_sync", "version"]

_default = None


def init(timeout=None, transport=None):
    """Joins the job's group (collective: every rank calls it) and returns it.

    timeout: seconds, for the rendezvous and every collective (default
    BRAID_TIMEOUT_SEC, 600). transport: "auto", "shm", "tcp", "mpi" (default
    BRAID_TRANSPORT). A second call returns the same group.
    """
    global _default
    if _default is None:
        _default = Group(timeout=timeout, transport=transport)
    return _default


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
