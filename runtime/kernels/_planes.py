"""Running a plane-wise kernel with its output over its own input.

A kernel is *plane-wise* when each plane of its output (one batch item, one channel: the
last dims) depends only on the same plane of input 0: pooling, for instance. Its output
may then start at input 0's first byte even when it is smaller, which the planner uses to
plan a pooling step without a second buffer: planes are taken in order, a chunk at a
time, computed into scratch and copied into place. Output plane j ends at byte
(j + 1) * P_out <= (j + 1) * P_in, so it only overwrites input planes already read.

`plane_wise(fn, workspace)` returns the kernel function and the workspace function to
register: the scratch for one chunk of output planes is added after the kernel's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

# Bytes of output planes computed per chunk (at least one plane): the scratch the planner
# adds for the chunk, small beside the tensors pooled.
CHUNK_BYTES = 256 * 1024


def _chunk_bytes(out_shape: tuple[int, ...], itemsize: int) -> int:
    plane = int(np.prod(out_shape[2:], dtype=np.int64)) * itemsize
    total = int(np.prod(out_shape, dtype=np.int64)) * itemsize
    return min(total, max(plane, CHUNK_BYTES // max(1, plane) * plane))


def plane_wise(fn: Callable[..., None], workspace: Callable[..., int] | None) -> tuple[Callable[..., None], Any]:
    """The kernel wrapped to allow its output over input 0, and its workspace function."""

    def with_chunk(inputs: list[Any], outputs: list[Any], **attrs: Any) -> int:
        own = int(workspace(inputs, outputs, **attrs)) if workspace is not None else 0
        out = outputs[0]
        return own + (_chunk_bytes(tuple(out.shape), out.dtype.itemsize) if out is not None else 0)

    takes_ws = workspace is not None

    @functools.wraps(fn)
    def wrapper(*inputs: Any, out: Any, ws: np.ndarray | None = None, **attrs: Any) -> None:
        y = out[0] if isinstance(out, tuple) else out
        x = inputs[0]
        if y is None or x is None or not np.may_share_memory(x, y):
            extra = {"ws": _own(ws, y)} if takes_ws else {}
            fn(*inputs, out=out, **extra, **attrs)
            return
        if isinstance(out, tuple) and any(o is not None for o in out[1:]):
            raise ValueError("plane-wise in place needs output 0 alone (the other outputs are not planes)")
        _in_place(fn, takes_ws, inputs, out, y, ws, attrs)

    return wrapper, with_chunk


def _own(ws: np.ndarray | None, y: np.ndarray | None) -> np.ndarray | None:
    """The kernel's own part of the workspace (the chunk scratch is at the end)."""
    if ws is None or y is None:
        return ws
    return ws[: ws.size - _chunk_bytes(y.shape, y.dtype.itemsize)]


def _in_place(
    fn: Callable[..., None],
    takes_ws: bool,
    inputs: tuple[Any, ...],
    out: Any,
    y: np.ndarray,
    ws: np.ndarray | None,
    attrs: dict[str, Any],
) -> None:
    x = inputs[0]
    n, c = y.shape[0], y.shape[1]
    if x.shape[:2] != (n, c) or not (x.flags.c_contiguous and y.flags.c_contiguous):
        raise ValueError(f"plane-wise in place needs matching, contiguous planes; got {x.shape} -> {y.shape}")
    if y.__array_interface__["data"][0] != x.__array_interface__["data"][0]:
        raise ValueError("plane-wise in place needs the output to start at the input's first byte")
    chunk = _chunk_bytes(y.shape, y.dtype.itemsize)
    per_chunk = chunk // (int(np.prod(y.shape[2:], dtype=np.int64)) * y.dtype.itemsize)
    if ws is not None:
        scratch = ws[ws.size - chunk :].view(y.dtype)
    else:
        scratch = np.empty(chunk // y.dtype.itemsize, dtype=y.dtype)
    own = _own(ws, y)
    planes_in = x.reshape(n * c, 1, *x.shape[2:])
    planes_out = y.reshape(n * c, 1, *y.shape[2:])
    for start in range(0, n * c, per_chunk):
        k = min(per_chunk, n * c - start)
        # A chunk of planes as a batch of single-channel items: the kernel sees ordinary tensors.
        source = planes_in[start : start + k]
        target = scratch[: k * planes_out[0].size].reshape(k, 1, *y.shape[2:])
        chunk_out = (target, *(None for _ in out[1:])) if isinstance(out, tuple) else target
        extra = {"ws": own} if takes_ws else {}
        fn(source, *inputs[1:], out=chunk_out, **extra, **attrs)
        planes_out[start : start + k] = target
