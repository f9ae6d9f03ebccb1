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

from runtime.kernels import MEMPLAN_DOMAIN, kernel

OP_TYPE = "TileRows"
HEIGHT = 2  # the row axis of an NCHW map, the default


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


@kernel(OP_TYPE, domain=MEMPLAN_DOMAIN, inplace=(0,))
def tile_rows(
    *sources: np.ndarray,
    out: np.ndarray,
    starts: list[int],
    first: int = 0,
    columns: tuple[int, int] = (0, 0),
    axis: int = HEIGHT,
) -> None:
    height = out.shape[axis]
    left, right = columns
    target = out
    if left or right:  # zero columns either side: a convolution's left and right padding
        out[..., :left] = 0
        out[..., out.shape[-1] - right :] = 0
        target = out[..., left : out.shape[-1] - right]
    for source, start in zip(sources, starts, strict=True):
        a = max(first, start)
        b = min(first + height, start + source.shape[axis])
        if a >= b or (start == first and _same_memory(source, target)):
            continue
        lead = (slice(None),) * axis
        target[(*lead, slice(a - first, b - first))] = source[(*lead, slice(a - start, b - start))]
