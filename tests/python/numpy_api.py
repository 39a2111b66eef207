"""braid's plain Python API on NumPy arrays, under braidrun: every collective
checked against the values NumPy computes, async work, the reducer, and the
errors (a bad op, a non-contiguous array, a rank whose shape differs)."""
import sys

import numpy as np

import braid

group = braid.init(timeout=20)
rank, size = group.rank, group.size
assert braid.default_group() is group
n = 1000


def contribution(r, dtype=np.float32, count=n):
    return (np.arange(count) % 97 + 10 * r).astype(dtype)


everyone = [contribution(r) for r in range(size)]

for dtype in (np.float32, np.float64, np.int32, np.int64, np.float16):
    for op, fold in (("sum", np.sum), ("max", np.max), ("min", np.min)):
        x = contribution(rank, dtype)
        group.all_reduce(x, op=op)
        want = fold(np.stack([contribution(r, dtype) for r in range(size)]), axis=0)
        assert np.array_equal(x, want), (dtype, op, x[:5], want[:5])

x = contribution(rank)
out = np.empty_like(x)
returned = group.all_reduce(x, op="avg", out=out)
assert returned is out
assert np.allclose(out, np.mean(np.stack(everyone), axis=0)), out[:5]
assert np.array_equal(x, contribution(rank)), "out of place changed its input"

work = group.all_reduce(contribution(rank), op="prod", async_op=True)
result = work.wait(timeout=20)
assert work.is_completed()
assert np.allclose(result, np.prod(np.stack(everyone), axis=0)), result[:5]

b = np.full(n, -1, dtype=np.int64) if rank else np.arange(n, dtype=np.int64) * 7
group.broadcast(b, src=0)
assert np.array_equal(b, np.arange(n, dtype=np.int64) * 7)

gathered = np.empty(n * size, dtype=np.float32)
group.all_gather(gathered, contribution(rank))
assert np.array_equal(gathered, np.concatenate(everyone))

big = np.concatenate([contribution(rank + d) for d in range(size)])
part = np.empty(n, dtype=np.float32)
group.reduce_scatter(part, big, op="sum")
assert np.array_equal(part, sum(contribution(r + rank) for r in range(size)))

reduced = np.zeros(n, dtype=np.float32)
group.reduce(contribution(rank), dst=size - 1, op="max", out=reduced)
if rank == size - 1:
    assert np.array_equal(reduced, contribution(size - 1))

blocks = np.concatenate([np.full(4, rank * 100 + d, dtype=np.int32) for d in range(size)])
received = np.empty_like(blocks)
group.all_to_all(received, blocks)
assert np.array_equal(received, np.concatenate([np.full(4, s * 100 + rank, dtype=np.int32) for s in range(size)]))

if size > 1:
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    sent = group.send(contribution(rank), dst=nxt, async_op=True)
    got = np.empty(n, dtype=np.float32)
    group.recv(got, src=prv)
    sent.wait()
    assert np.array_equal(got, contribution(prv))
    # Without src: rank 0 takes one message from each other rank, in whatever order they come.
    if rank == 0:
        senders = set()
        for _ in range(size - 1):
            work = group.recv(got, async_op=True)
            work.wait()
            assert np.array_equal(got, contribution(work.source)), work.source
            senders.add(work.source)
        assert senders == set(range(1, size)), senders
    else:
        group.send(contribution(rank), dst=0)

# A 2-D view and a DLPack capsule go in too; a strided view is refused.
m = np.stack([contribution(rank)] * 3)
group.all_reduce(m[1:], op="sum")
assert np.array_equal(m[1], sum(everyone)) and np.array_equal(m[0], contribution(rank))
capsule_array = contribution(rank)
group.all_reduce(capsule_array.__dlpack__(), op="sum")
assert np.array_equal(capsule_array, sum(everyone))
try:
    group.all_reduce(np.zeros((4, 4), dtype=np.float32)[:, 1])
    raise AssertionError("a strided view was accepted")
except ValueError as e:
    assert "contiguous" in str(e), e
try:
    group.all_reduce(np.zeros(4, dtype=np.float32), op="median")
    raise AssertionError("op median was accepted")
except ValueError as e:
    assert "median" in str(e)
try:
    group.all_reduce(np.zeros(4, dtype=np.complex64))
    raise AssertionError("a complex array was accepted")
except TypeError as e:
    assert "DLPack type code" in str(e), e

# The reducer: gradients averaged, no_sync accumulates locally.
g0 = np.full(3000, float(rank), dtype=np.float32)
g1 = np.arange(50, dtype=np.float32) * (rank + 1)
reducer = braid.Reducer(group, [g0, g1], bucket_cap_mb=0.001)
reducer.prepare()
reducer.mark_ready(1)
reducer.mark_ready(0)
reducer.finalize()
assert np.allclose(g0, (size - 1) / 2), g0[:3]
assert np.allclose(g1, np.arange(50) * (size + 1) / 2), g1[:3]
with braid.no_sync(reducer):
    g0 += 1
    reducer.prepare()
    reducer.mark_ready(0)
    reducer.mark_ready(1)
    reducer.finalize()
assert np.allclose(g0, (size - 1) / 2 + 1)
del reducer

params = [np.full(10, float(rank), dtype=np.float64), np.arange(5, dtype=np.int64) + rank]
group.broadcast_parameters(params, src=0)
assert np.array_equal(params[0], np.zeros(10)) and np.array_equal(params[1], np.arange(5))

group.barrier()

# Subgroups: by parity (reverse order), and a list with outsiders.
half = group.split(rank % 2, key=-rank)
members = [r for r in range(size - 1, -1, -1) if r % 2 == rank % 2]
assert (half.rank, half.size) == (members.index(rank), len(members)), (half.rank, half.size)
x = np.full(4, float(rank), dtype=np.float32)
half.all_reduce(x)
assert np.array_equal(x, np.full(4, float(sum(members)), dtype=np.float32)), x
first = group.new_group([0], name="first")
assert first.is_member == (rank == 0)
if rank == 0:
    y = np.ones(3, dtype=np.int64)
    first.all_reduce(y)
    assert np.array_equal(y, np.ones(3, dtype=np.int64))
else:
    try:
        first.all_reduce(np.ones(3, dtype=np.int64))
        raise AssertionError("an outsider's all-reduce succeeded")
    except braid.Error as e:
        assert e.code_name == "FAILED_PRECONDITION" and "'first'" in str(e), e
half.close()
first.close()
group.barrier()

# A rank with a different shape: every rank gets braid.Error, none hangs.
if "--mismatch" in sys.argv:
    count = 8 if rank == size - 1 else 16
    try:
        group.all_reduce(np.ones(count, dtype=np.float32))
        raise AssertionError("a mismatched all-reduce succeeded")
    except braid.Error as e:
        print(f"mismatch error on rank {rank}: {e.code_name}: {e}", flush=True)
        assert "rank" in str(e)
    sys.exit(0)

print(f"numpy api ok: rank {rank} of {size} over {group.transport}, braid {braid.version()}", flush=True)
