"""Multi-step pointwise formulas evaluated chunk by chunk, every temporary in the workspace.

A formula such as ``x * sigmoid(x)`` needs arrays beside its output, and the planner may place
the output on a dying input (in place), so a formula that reads its input after writing `out`
needs that input's chunk copied first. `run_chunks` does both inside the kernel's workspace:
each chunk (at most `BLOCK` elements, cache-sized) gets its own scratch arrays, and an input
chunk overlapping its output chunk is copied into scratch, never into memory beside the arena.
A kernel's ``workspace`` function returns `chunks_workspace` with the same counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from runtime.kernels._blocks import BLOCK, block_slices
from runtime.kernels._scratch import UFUNC_BUFFER, Scratch, buffers_set, scratch_bytes


def chunk_elements(shape: Sequence[int]) -> int:
    """Elements of the largest chunk of an output of `shape`."""
    return max(1, min(math.prod(int(n) for n in shape), BLOCK))


def chunks_workspace(shape: Sequence[int], dtypes: Sequence[Any]) -> int:
    """Workspace bytes for one scratch chunk per entry of `dtypes` (an output of `shape`)."""
    n = chunk_elements(shape)
    return scratch_bytes(*(((n,), dt) for dt in dtypes))


def _chunks(out: np.ndarray, inputs: Sequence[np.ndarray]) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """(output chunk, input chunks) covering `out`; inputs broadcast to it."""
    flat = out.flags.c_contiguous and all(x.shape == out.shape and x.flags.c_contiguous for x in inputs)
    if flat:
        o, xs = out.reshape(-1), [x.reshape(-1) for x in inputs]
        for start in range(0, o.size, BLOCK):
            yield o[start : start + BLOCK], [x[start : start + BLOCK] for x in xs]
        return
    full = [np.broadcast_to(x, out.shape) for x in inputs]
    for index in block_slices(out.shape):
        yield out[index], [x[index] for x in full]


def run_chunks(
    fn: Callable[..., None],
    out: np.ndarray,
    inputs: Sequence[np.ndarray],
    ws: np.ndarray | None,
    owner: str,
    temps: Sequence[Any] = (),
    reads_before_writes: bool = False,
) -> None:
    """``fn(*input_chunks, out_chunk, *temp_chunks)`` over `out`, chunk by chunk.

    The workspace holds, in order, one chunk per input (of the input's dtype: the copy of an
    input chunk that overlaps its output chunk) and one per dtype in `temps` (scratch for
    `fn`, shaped like the output chunk): ``chunks_workspace(out.shape, [x.dtype for x in
    inputs] + list(temps))``. A formula that `reads_before_writes` (it writes its output
    chunk only after its last read of the input chunks, or element by element in one ufunc,
    so in place is safe) gets its inputs as they are and no copy chunks: ``chunks_workspace(out.shape, temps)``.
    With `ws` None the chunks are allocated once per call.
    """
    if out.size == 0:
        return
    n = chunk_elements(out.shape)
    scratch = Scratch(ws, owner)
    copies = [] if reads_before_writes else [scratch.take((n,), x.dtype) for x in inputs]
    spare = [scratch.take((n,), dt) for dt in temps]
    broadcast = any(x.shape != out.shape for x in inputs)
    previous = np.setbufsize(UFUNC_BUFFER) if broadcast and not buffers_set(UFUNC_BUFFER) else None  # see `ufunc_into`
    try:
        _run(fn, out, inputs, n, copies, spare, reads_before_writes)
    finally:
        if previous is not None:
            np.setbufsize(previous)


def _run(fn, out, inputs, n, copies, spare, reads_before_writes) -> None:
    for o, xs in _chunks(out, inputs):
        m = o.size
        safe = xs if reads_before_writes else []
        for x, room in zip(xs, copies, strict=False):
            # Bounds only (an exact overlap test can be slow on broadcast strides): a chunk
            # that might overlap is copied.
            if np.may_share_memory(x, o):
                copy = room[:m].reshape(o.shape)
                np.copyto(copy, x)
                x = copy
            safe.append(x)
        fn(*safe, o, *(s[:m].reshape(o.shape) for s in spare))
