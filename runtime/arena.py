"""The arena and its views: one aligned uint8 array, every tensor a view of it.

Every tensor planned in the arena is ``arena[offset:offset+nbytes].view(dtype).reshape(shape)``;
kernel scratch stays raw bytes. Kernels read their inputs through read-only views, so a kernel
that writes an input fails loudly instead of corrupting a live tensor.
"""

from __future__ import annotations

import numpy as np

from planner import Plan, Problem
from runtime.errors import PlanError
from runtime.graph import Graph


def aligned_arena(nbytes: int, alignment: int) -> np.ndarray:
    """A zeroed uint8 array of `nbytes` whose first byte sits at a multiple of `alignment`."""
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift : shift + nbytes]


def take_arena(given: np.ndarray | None, nbytes: int, alignment: int) -> np.ndarray:
    """A fresh aligned arena, or the first `nbytes` of the caller's (which must fit: PlanError
    says what is wrong with it)."""
    if given is None:
        return aligned_arena(nbytes, alignment)
    fits = (
        isinstance(given, np.ndarray)
        and given.dtype == np.uint8
        and given.ndim == 1
        and given.flags.c_contiguous
        and given.flags.writeable
    )
    if not fits:
        raise PlanError("arena: pass a writable, C-contiguous, one-dimensional uint8 array")
    if given.size < nbytes or given.ctypes.data % alignment:
        raise PlanError(
            f"arena: the plan needs {nbytes:,} bytes aligned to {alignment}; the given arena has {given.size:,} "
            f"bytes at an address {given.ctypes.data % alignment} bytes past a multiple of {alignment}"
        )
    return given[:nbytes]


def arena_views(
    graph: Graph, problem: Problem, plan: Plan, arena: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(tensor views, kernel scratch): a writable typed view per tensor of `graph` the problem
    places, and the raw bytes of every other buffer (``"<node>::ws"``, whatever its kind)."""
    views: dict[str, np.ndarray] = {}
    scratch: dict[str, np.ndarray] = {}
    for b in problem.buffers:
        off = plan.offsets[b.id].offset
        raw = arena[off : off + b.size]
        if b.id not in graph.tensors:
            scratch[b.id] = raw
        else:
            t = graph.tensors[b.id]
            views[b.id] = raw.view(t.dtype).reshape(t.shape)
    return views, scratch


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of `array` that refuses writes (the array itself stays writable)."""
    view = array.view()
    view.flags.writeable = False
    return view


def address(array: np.ndarray) -> int:
    """The address of the array's first element."""
    return int(array.__array_interface__["data"][0])
