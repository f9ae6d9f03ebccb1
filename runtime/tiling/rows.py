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

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, Bound, kernel
from runtime.kernels.same_arrays import SameArrays

OP_TYPE = "TileRows"
HEIGHT = 2  # the row axis of an NCHW map, the default


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


def copies(
    sources: tuple[np.ndarray, ...], out: np.ndarray, starts: list[int], first: int, columns: tuple[int, int], axis: int
) -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    """(views of `out` to zero, (target, source) views to copy): what a call does, worked out
    from the arrays' shapes and memory alone, so that a bound call makes it once."""
    height = out.shape[axis]
    left, right = columns
    target, zeros = out, []
    if left or right:  # zero columns either side: a convolution's left and right padding
        zeros = [v for v in (out[..., :left], out[..., out.shape[-1] - right :]) if v.size]
        target = out[..., left : out.shape[-1] - right]
    pairs = []
    for source, start in zip(sources, starts, strict=True):
        a = max(first, start)
        b = min(first + height, start + source.shape[axis])
        if a >= b or (start == first and _same_memory(source, target)):
            continue
        lead = (slice(None),) * axis
        pairs.append((target[(*lead, slice(a - first, b - first))], source[(*lead, slice(a - start, b - start))]))
    return zeros, pairs


def _bind(inputs, outputs, attrs: dict, general) -> Bound:
    """The call with its views made once per set of arrays (`SameArrays`): a stage of 100 bands
    makes hundreds of these small copies a run, each a few microseconds of work."""
    starts, first = list(attrs["starts"]), int(attrs.get("first", 0))
    columns, axis = tuple(attrs.get("columns", (0, 0))), int(attrs.get("axis", HEIGHT))

    def make(out: np.ndarray | None, *sources: np.ndarray | None) -> tuple | None:
        if out is None or any(s is None for s in sources):
            return None  # not bound yet at prepare (a graph input): made on the first run
        return copies(sources, out, starts, first, columns, axis)  # type: ignore[arg-type]

    made = SameArrays(make)

    def bound(*sources: np.ndarray, out: np.ndarray) -> None:
        zeros, pairs = made(out, *sources)
        for view in zeros:
            view.fill(0)
        for target, source in pairs:
            np.copyto(target, source)

    def prime(*sources: np.ndarray, out: np.ndarray) -> None:
        made(out, *sources)

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
    zeros, pairs = copies(sources, out, starts, first, tuple(columns), axis)  # type: ignore[arg-type]
    for view in zeros:
        view.fill(0)
    for target, source in pairs:
        np.copyto(target, source)
