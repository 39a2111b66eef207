"""A rank that dies mid-job: the survivor's next collective raises
braid.Error naming the dead peer within seconds (no launcher here: the test
starts the processes itself, so nobody stops the survivor for it)."""
import os
import sys
import time

import numpy as np

import braid

group = braid.init(timeout=30)
x = np.ones(1 << 16, dtype=np.float32)
group.all_reduce(x)
if group.rank == 1:
    os._exit(3)
start = time.monotonic()
try:
    for _ in range(1000):
        group.all_reduce(x)
    print("FAIL: the survivor's all-reduces succeeded", flush=True)
    sys.exit(1)
except braid.Error as e:
    took = time.monotonic() - start
    print(f"dead peer: rank {group.rank} raised {e.code_name} after {took:.2f}s: {e}", flush=True)
    assert "peer 1" in str(e) or "rank 1" in str(e), e
    assert took < 10, took
