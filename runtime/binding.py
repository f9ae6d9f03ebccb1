"""Caller memory bound to a session's graph inputs and outputs: zero-copy when it fits.

A binding is zero-copy when the kernels can read (input) or write (output) the caller's
array directly: the tensor is planned outside the arena (``io="external"``), the dtype is
exactly the model's, the array is C-contiguous, its address meets the alignment, and an
output shares no bytes with another bound array. Otherwise the session copies on every
run and the binding says why, in one sentence a caller can act on.

Wrong shapes, dtypes of another kind, read-only outputs and unknown names are errors, not
fall-backs: no copy could make them right.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from runtime.errors import FeedError
from runtime.graph import TensorInfo


@dataclass(frozen=True)
class Binding:
    """Caller memory for one graph input or output, and how the session will use it."""

    name: str
    role: str  # "input" or "output"
    array: np.ndarray  # the caller's array, as given
    zero_copy: bool
    reason: str | None = None  # why the session copies; None when zero-copy

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)


def make_binding(
    name: str,
    role: str,
    array: object,
    info: TensorInfo,
    *,
    in_arena: bool,
    alignment: int,
    others: Iterable[Binding] = (),
) -> Binding:
    """Check `array` against the tensor `info` and decide between zero-copy and a copy.

    Raises FeedError for what no copy can fix; `alignment` 0 means the element's own.
    """
    if not isinstance(array, np.ndarray):
        raise FeedError(f"{role} {name!r}: bind a numpy array, not {type(array).__name__}")
    want = f"{info.dtype}{list(info.shape)}"
    if array.shape != info.shape:
        raise FeedError(f"{role} {name!r}: the array has shape {list(array.shape)}; the model expects {want}")
    if array.dtype.kind != info.dtype.kind:
        raise FeedError(f"{role} {name!r}: the array has dtype {array.dtype}; the model expects {want}")
    if role == "output" and not array.flags.writeable:
        raise FeedError(f"output {name!r}: the array is read-only; bind a writable {want} array")
    reason = _fallback(name, role, array, info, in_arena, alignment, others)
    return Binding(name, role, array, reason is None, reason)


def _fallback(
    name: str,
    role: str,
    array: np.ndarray,
    info: TensorInfo,
    in_arena: bool,
    alignment: int,
    others: Iterable[Binding],
) -> str | None:
    verb = "copied in before" if role == "input" else "copied out after"
    if in_arena:
        return (
            f"{role} {name!r} is planned inside the arena (io='arena'): {verb} each run; "
            "plan with io='external' to use caller memory directly"
        )
    if array.dtype != info.dtype:
        return f"{role} {name!r} is {array.dtype}, the model computes {info.dtype}: converted and {verb} each run"
    if not array.flags.c_contiguous:
        return f"{role} {name!r} is not C-contiguous: {verb} each run"
    align = alignment or info.dtype.alignment
    address = array.__array_interface__["data"][0]
    if address % align or not array.flags.aligned:
        return f"{role} {name!r} starts at an address that is not a multiple of {align} bytes: {verb} each run"
    for other in others:
        writes = role == "output" or other.role == "output"
        if other.name != name and writes and other.zero_copy and np.may_share_memory(array, other.array):
            return f"{role} {name!r} shares bytes with bound {other.role} {other.name!r}: {verb} each run"
    return None
