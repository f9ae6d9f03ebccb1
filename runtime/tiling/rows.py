"""TileRows: the one op a tiled stage adds, moving rows between its tiles (memplan domain).

``TileRows(s0, s1, ..., starts=[r0, r1, ...], first=f, columns=[l, r], axis=a)`` writes rows
``[f, f + H)`` of a map (H: its output's rows on axis `a`, NCHW's 2 unless given) from sources holding that
map's rows from ``r0``, ``r1``, ...: every source row inside the output's band is copied there,
later sources last, between ``l`` and ``r`` zero columns (a convolution's left and right padding).
It gathers the rows a band of a consumer reads from the tiles that hold them (a window over two
stripes, a band of the stage's input), and puts each tile of the stage's output in its place: there
the previous partial output is source 0 and the output may be planned over it (in place), so only
the new rows are copied.
"""

from __future__ import annotations

from operator import is_
from typing import Any

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, Bound, kernel

OP_TYPE = "TileRows"
HEIGHT = 2  # the row axis of an NCHW map, the default


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    # `ctypes.data`, not `__array_interface__` (a dict whose keys are interned anew on every call)
    return a.shape == b.shape and a.ctypes.data == b.ctypes.data


def _rows(axis: int, a: int, b: int) -> tuple[slice, ...]:
    return (*(slice(None),) * axis, slice(a, b))


def _moves(
    shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], starts: list[int], first: int,
    columns: tuple[int, int], axis: int,
) -> tuple[list[tuple], tuple | None, list[tuple[int, tuple, tuple, bool]]]:  # fmt: skip
    """What a call does, from the shapes alone: the indices of `out` to zero, the index of the part of
    `out` the sources fill (None: all of it), and per copy (source number, index in that part, index
    in the source, whether the source may be that part already: the previous partial output, in place)."""
    height, width = out_shape[axis], out_shape[-1]
    left, right = columns
    zeros: list[tuple] = [
        i for i, n in (((..., slice(0, left)), left), ((..., slice(width - right, width)), right)) if n
    ]
    inner = (..., slice(left, width - right)) if left or right else None
    part = (*out_shape[:-1], width - left - right)
    moves = []
    for k, (shape, start) in enumerate(zip(shapes, starts, strict=True)):
        a, b = max(first, start), min(first + height, start + shape[axis])
        if a < b:
            moves.append((k, _rows(axis, a - first, b - first), _rows(axis, a - start, b - start),
                          start == first and tuple(shape) == part))  # fmt: skip
    return zeros, inner, moves


def copies(
    sources: tuple[np.ndarray, ...], out: np.ndarray, starts: list[int], first: int, columns: tuple[int, int], axis: int
) -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    """(views of `out` to zero, (target, source) views to copy): what a call does, worked out from the
    arrays' shapes and memory alone."""
    zeros, inner, moves = _moves([s.shape for s in sources], out.shape, starts, first, columns, axis)
    target = out if inner is None else out[inner]
    pairs = [
        (target[into], sources[k][at])
        for k, into, at, maybe in moves
        if not (maybe and _same_memory(sources[k], target))
    ]
    return [out[i] for i in zeros], pairs


def _run(zeros: list[np.ndarray], pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    for view in zeros:
        view.fill(0)
    for target, source in pairs:
        np.copyto(target, source)


def _bind(inputs, outputs, attrs: dict, general) -> Bound:
    """The call with its views made once, at prepare (`prime`), from the arrays the step has then: a
    stage of 100 bands makes hundreds of these small copies a run, and a view made on every call is a
    few microseconds, and bytes a traced run counts. A source the step did not have at prepare (a graph
    input, fed as a fresh view on every run) is sliced per call by the index worked out here, and the
    view dropped; other arrays than the primed ones take the general route: nothing a run makes is kept."""
    starts, first = list(attrs["starts"]), int(attrs.get("first", 0))
    columns, axis = tuple(attrs.get("columns", (0, 0))), int(attrs.get("axis", HEIGHT))
    shapes = [tuple(m.shape) for m in inputs]
    zero_at, inner, moves = _moves(shapes, tuple(outputs[0].shape), starts, first, columns, axis)  # type: ignore[arg-type]
    # the output and sources primed (None: sliced per call), the views to zero, the copies in order (target
    # view, source view or None, and for a source sliced per call its number, index and whether it may be
    # in place), and whether any source is sliced per call
    primed: list[Any] = [None, (), [], [], False]

    def prime(*sources: np.ndarray | None, out: np.ndarray) -> None:
        target = out if inner is None else out[inner]
        made = []
        for k, into, at, maybe in moves:
            source = sources[k]
            if source is None:
                made.append((target[into], None, k, at, maybe))
            elif not (maybe and _same_memory(source, target)):  # else in place: already that part of out
                made.append((target[into], source[at], k, at, False))
        primed[:] = out, sources, [out[i] for i in zero_at], made, any(s is None for s in sources)

    def bound(*sources: np.ndarray, out: np.ndarray) -> None:
        kept = primed[1]
        if out is not primed[0] or not (
            all(p is None or s is p for s, p in zip(sources, kept, strict=True))
            if primed[4]
            else all(map(is_, sources, kept))
        ):
            _run(*copies(sources, out, starts, first, columns, axis))  # type: ignore[arg-type]
            return
        for view in primed[2]:
            view.fill(0)
        for target, view, k, at, maybe in primed[3]:
            if view is not None:
                np.copyto(target, view)
            elif not (maybe and _same_memory(sources[k], target)):
                np.copyto(target, sources[k][at])

    return Bound(bound, prime=prime)


@kernel(OP_TYPE, domain=MEMPLAN_DOMAIN, inplace=(0,), bind=_bind)
def tile_rows(
    *sources: np.ndarray,
    out: np.ndarray,
    starts: list[int],
    first: int = 0,
    columns: tuple[int, int] = (0, 0),
    axis: int = HEIGHT,
) -> None:
    _run(*copies(sources, out, starts, first, tuple(columns), axis))  # type: ignore[arg-type]
