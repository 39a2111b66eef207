"""Arrays of three frameworks through braid's plain API (DLPack, no copies), under braidrun:
JAX arrays as inputs (JAX arrays are immutable: results go to a NumPy or torch output), torch
tensors in place and as outputs, NumPy beside them, each checked against NumPy's arithmetic."""
import jax
import jax.numpy as jnp
import numpy as np
import torch

import braid

jax.config.update("jax_platforms", "cpu")
group = braid.init(timeout=30)
rank, size = group.rank, group.size
n = 1000


def values(r, count=n):
    return (np.arange(count) % 31 + 7 * r).astype(np.float32)


everyone = np.stack([values(r) for r in range(size)])

# JAX in, NumPy out: the sum over ranks.
x = jnp.asarray(values(rank))
out = np.empty(n, dtype=np.float32)
group.all_reduce(x, op="sum", out=out)
assert np.array_equal(out, everyone.sum(axis=0)), out[:5]
assert np.array_equal(np.asarray(x), values(rank)), "the JAX input changed"

# JAX in, torch out: the gather of every rank's block.
gathered = torch.empty(size * n, dtype=torch.float32)
group.all_gather(gathered, jnp.asarray(values(rank)))
assert np.array_equal(gathered.numpy(), everyone.reshape(-1)), gathered[:5]

# torch in place, int64 and bfloat16.
t = torch.arange(n, dtype=torch.int64) + rank
group.all_reduce(t, op="max")
assert torch.equal(t, torch.arange(n, dtype=torch.int64) + size - 1), t[:5]
b = torch.full((64,), float(rank + 1), dtype=torch.bfloat16)
group.all_reduce(b, op="sum")
assert torch.equal(b, torch.full((64,), float(size * (size + 1) // 2), dtype=torch.bfloat16)), b[:5]

# A JAX array of another dtype (int32) reduced into a NumPy output, asynchronously.
work = group.all_reduce(jnp.arange(n, dtype=jnp.int32) * (rank + 1), op="sum",
                        out=np.empty(n, dtype=np.int32), async_op=True)
result = work.wait(timeout=30)
assert np.array_equal(result, np.arange(n, dtype=np.int32) * (size * (size + 1) // 2)), result[:5]

print(f"dlpack arrays ok: rank {rank} of {size}, jax {jax.__version__}, torch {torch.__version__}, "
      f"numpy {np.__version__}", flush=True)
