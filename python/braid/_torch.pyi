# Type stubs of braid._torch, the torch.distributed backend (python/torch_backend/).
from torch._C._distributed_c10d import Backend, Store

braid_version: str

class BraidBackend(Backend):  # c10d::Backend
    @property
    def transport(self) -> str: ...

def create_backend(store: Store, rank: int, world_size: int, timeout_sec: float) -> BraidBackend: ...
