# Type stubs of braid._torch, the torch.distributed backend (python/torch_backend/).
from typing import Optional

from torch._C._distributed_c10d import Backend, Store

braid_version: str

class BraidBackend(Backend):  # c10d::Backend
    @property
    def transport(self) -> str: ...
    @property
    def _group_handle(self) -> int: ...

def create_backend(store: Store, rank: int, world_size: int, timeout_sec: float) -> BraidBackend: ...
def share_backend(group_handle: int, store: Optional[Store], timeout_sec: float) -> BraidBackend: ...
