# PyTorch's own distributed test-suite (torch.testing._internal.distributed.distributed_test)
# against a backend, driven as PyTorch's test/distributed/test_distributed_spawn.py drives it:
#
#   BACKEND=braid|gloo WORLD_SIZE=N python torch_conformance.py [unittest args, e.g. -k test_all_reduce]
#
# For braid, "braid" joins the feature sets the suite's decorators read (ddp, subgroup, plugin)
# before the suite is imported. Every test spawns WORLD_SIZE processes that import this file
# again (multiprocessing's spawn), so the registration of "braid" happens in each.
import os
import sys
import tempfile

os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="braid_conformance_"))
BACKEND = os.environ.setdefault("BACKEND", "braid")

import torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND == "braid":
    import braid.torch  # noqa: F401,E402  registers the backend

    for feature in ("ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[feature].add("braid")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
