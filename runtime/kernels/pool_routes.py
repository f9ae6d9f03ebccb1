"""The pools' routes, one table of values (`ROUTES`, each a `PoolRoute`: name, op, when it applies,
its workspace, its run, its bound call, the loops it runs) and one choice per shape
(`PoolCase.chosen`, the op, shapes, dtype and attributes as one value): the workspace function the
planner calls, the call and the bound call of MaxPool, AveragePool, LpPool, GlobalAveragePool,
GlobalMaxPool and GlobalLpPool all read that one route object, never its name.

A route whose loop is compiled (`PoolRoute.compiled`) applies only where that loop runs (float32,
compiled loops on); arrays the loop does not take at a call (strided, unaligned) run by the numpy
route the table picks for the same shape without compiled loops, whose workspace the compiled
route's covers. Whether a route may run with its output over its input one row at a time is its
`rows_in_order`, read by MaxPool's `Planes.direct`.

`EXAMPLES` holds one small case per route: the workspace test runs each with exactly its declared
workspace, and `memplan warm` runs each float32 one, so a new route is reached by adding its example.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from runtime.kernels import global_pool_bound, jit_pool, pool_windows
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.conv import jit_conv
from runtime.kernels.protocol import Bound
from runtime.kernels.window import Geometry, window_geometry


class PoolCase(NamedTuple):
    """A pool's op, shapes, dtype and attributes as one hashable value (lists as tuples, the spec's
    defaults filled in; a global pool has no kernel_shape): what its route and workspace depend on."""

    op: str
    x: tuple[int, ...]
    y: tuple[int, ...]
    dtype: np.dtype
    kernel_shape: tuple[int, ...] | None = None
    auto_pad: str = "NOTSET"
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    dilations: tuple[int, ...] | None = None
    indices: bool = False  # MaxPool's Indices output is asked for

    @staticmethod
    def of(op: str, x: Any, y: Any, attrs: Mapping[str, Any], indices: bool = False) -> PoolCase:
        """From x and y (anything with shape and dtype) and the node's attributes (others ignored)."""
        return PoolCase(
            op, tuple(x.shape), tuple(y.shape), np.dtype(x.dtype), _tuple(attrs.get("kernel_shape")),
            attrs.get("auto_pad", "NOTSET"), _tuple(attrs.get("pads")), _tuple(attrs.get("strides")),
            _tuple(attrs.get("dilations")), indices,
        )  # fmt: skip

    @property
    def chosen(self) -> tuple[Geometry | None, PoolRoute]:
        """(window geometry or None for a global pool, the `PoolRoute` this pool takes), once per value."""
        return _pick(self, True)

    @property
    def numpy(self) -> PoolRoute:
        """The route this pool takes without compiled loops (a compiled route's fallback)."""
        return _pick(self, False)[1]


def _tuple(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(value)


@functools.lru_cache(maxsize=1024)
def _pick(c: PoolCase, compiled: bool) -> tuple[Geometry | None, PoolRoute]:
    """The first route of `ROUTES` for the op that applies (compiled ones only if `compiled`)."""
    geo = None
    if c.kernel_shape is not None:
        geo = window_geometry(c.x, c.y, c.kernel_shape, c.auto_pad, c.pads, c.strides, c.dilations)
    return geo, next(r for r in ROUTES if r.op == c.op and (compiled or not r.compiled) and r.applies(c, geo))


def forget() -> None:
    """Drop the routes chosen so far (a test that changes what applies chooses again)."""
    _pick.cache_clear()


Run = Callable[[Any, tuple, Any, Scratch, dict], None]


@dataclass(frozen=True)
class PoolRoute:
    """One way to run a pool, as one value: its name (one meaning each), its op, when it applies (a
    predicate of the `PoolCase` and its window geometry; `ROUTES` is tried in order), the bytes of
    workspace it takes (`workspace(case, geo)`), its run (`run(x, outs, geo, scratch, attrs)`,
    `outs` the output arrays, `attrs` the node's attributes), its bound call (`bind(inputs,
    outputs, attrs, general)`, a `Bound` or None), the loops it runs (for docs/KERNELS.md), whether
    its loop is compiled, and whether it writes each output row right after reading its window's
    input rows (`rows_in_order`: over its own input it then overwrites only rows already read)."""

    name: str
    op: str
    applies: Callable[[PoolCase, Any], bool]
    workspace: Callable[[PoolCase, Any], int]
    run: Run
    loops: tuple[str, ...]
    bind: Callable[..., Bound | None] | None = None
    compiled: bool = False
    rows_in_order: bool = False

    def bytes(self, c: PoolCase, geo: Geometry | None) -> int:
        """The workspace this route declares: a compiled route's, or its numpy fallback's if larger."""
        own = self.workspace(c, geo)
        return max(own, c.numpy.workspace(c, geo)) if self.compiled else own


def _float(c: PoolCase) -> bool:
    return c.dtype in (np.float32, np.float64)


def _whole(c: PoolCase, geo: Geometry) -> bool:
    return pool_windows.whole_image(c.x, geo)


def _reduce_bytes(c: PoolCase, geo: Geometry) -> int:
    return pool_windows.reduce_bytes(c.x, geo, c.dtype)


def _plane_bytes(c: PoolCase) -> int:
    """The output's spatial shape: AveragePool's per-window counts."""
    return scratch_bytes((c.y[2:], c.dtype))


def _row_bytes(c: PoolCase) -> int:
    """A row of 1 / plane size over one whole image (the average as a matrix-vector product)."""
    return scratch_bytes(((math.prod(c.x[2:]),), c.dtype))


# MaxPool


def _max_indices(x, outs, geo: Geometry, scratch: Scratch, attrs: dict) -> None:
    pool_windows.max_with_indices(x, outs[0], outs[1], geo, scratch, attrs.get("storage_order", 0))


def _max_compiled(x, outs, geo: Geometry, scratch: Scratch, attrs: dict) -> None:
    y = outs[0]
    if jit_pool.max_pool is None or not jit_conv.usable(x, y):
        _max_reduce(x, outs, geo, scratch, attrs)
        return
    row = scratch.take((_row_length(geo),), x.dtype)
    for n in range(x.shape[0]):
        jit_pool.max_pool(x[n], y[n], row, *geo.kernel, *geo.strides, *geo.dilations, *geo.begin)


def _row_length(geo: Geometry) -> int:
    return jit_pool.row_length(geo.out[1], geo.kernel[1], geo.strides[1], geo.dilations[1])


def _max_reduce(x, outs, geo: Geometry, scratch: Scratch, attrs: dict) -> None:
    pool_windows.reduce_windows(x, outs[0], geo, scratch, np.maximum, pool_windows.lowest(x.dtype))


# AveragePool


def _average_matvec(x, outs, geo: Geometry, scratch: Scratch, attrs: dict) -> None:
    """BLAS's matrix-vector product with a row of 1 / plane (ResNet's last 7 x 7): ten times faster
    than a sum over 49-long rows then a division; a strided image goes by the reduction."""
    if not x.flags.c_contiguous:
        _average(x, outs, geo, scratch, attrs)
        return
    plane = math.prod(x.shape[2:])
    row = scratch.take((plane,), x.dtype)
    row.fill(1 / plane)
    np.matmul(x.reshape(*x.shape[:2], plane), row, out=outs[0].reshape(x.shape[:2]))


def _average(x, outs, geo: Geometry, scratch: Scratch, attrs: dict) -> None:
    y = outs[0]
    pool_windows.reduce_windows(x, y, geo, scratch, np.add, 0)
    plane = scratch.take(y.shape[2:], x.dtype)
    pool_windows.divide_by_counts(y, geo, x.shape[2:], bool(attrs.get("count_include_pad", 0)), plane)


# LpPool and the global pools


def _lp(x, outs, geo: Geometry, scratch: Scratch, attrs: dict) -> None:
    pool_windows.lp_taps(x, outs[0], geo, scratch, attrs.get("p", 2))


def _lp_bytes(c: PoolCase, geo: Geometry) -> int:
    return pool_windows.window_bytes(c.x, geo, c.dtype) + scratch_bytes((c.y[1:], c.dtype))


def _global_means(x, outs, geo, scratch: Scratch, attrs: dict) -> None:
    """Each plane's mean by the compiled loop (which may run over its input), else by BLAS."""
    planes, size = x.shape[0] * x.shape[1], math.prod(x.shape[2:])
    if global_pool_bound.plane_means is None or not jit_conv.usable(x, outs[0]):
        _global_matvec(x, outs, geo, scratch, attrs)
        return
    global_pool_bound.plane_means(x.reshape(planes, size), outs[0].reshape(planes), np.float32(1.0 / size))


def _global_matvec(x, outs, geo, scratch: Scratch, attrs: dict) -> None:
    """BLAS's matrix-vector product against a row of 1 / plane: three to five times faster than a
    sum reduction then a division (SE blocks average maps of up to 112 x 112)."""
    if not x.flags.c_contiguous:
        _global_sum(x, outs, geo, scratch, attrs)
        return
    plane = max(math.prod(x.shape[2:]), 1)
    row = scratch.take((plane,), x.dtype)
    row.fill(1 / plane)
    np.matmul(x.reshape(*x.shape[:2], plane), row, out=outs[0].reshape(x.shape[:2]))


def _global_sum(x, outs, geo, scratch: Scratch, attrs: dict) -> None:
    # Sum over one flattened spatial axis, then scale: np.mean over several axes buffers ~17 KB.
    rows = outs[0].reshape(x.shape[:2])
    np.add.reduce(x.reshape(*x.shape[:2], -1), axis=2, out=rows)
    rows /= rows.dtype.type(max(math.prod(x.shape[2:]), 1))


def _global_max(x, outs, geo, scratch: Scratch, attrs: dict) -> None:
    np.maximum.reduce(x.reshape(*x.shape[:2], -1), axis=2, out=outs[0].reshape(x.shape[:2]))


def _global_lp(x, outs, geo, scratch: Scratch, attrs: dict) -> None:
    out, p = outs[0], attrs.get("p", 2)
    if p == 2:
        letters = "abcdefghijklmnopqrstuvwxyz"[: x.ndim]
        out.reshape(x.shape[:2])[...] = np.einsum(f"{letters},{letters}->ab", x, x)  # no squared temporary
    else:
        np.sum(np.abs(x) ** p, axis=tuple(range(2, x.ndim)), keepdims=True, out=out)
    pool_windows.root(out, p)


def _none(c: PoolCase, geo) -> int:
    return 0


_SEPARABLE = "pool_windows.pool_separable: one reduction per spatial axis (where no more workspace than by taps)"
_TAPS = "pool_windows.reduce_taps: one strided view per kernel tap, pads through a padded copy of one image"
_WHOLE = "pool_windows.reduce_whole: one reduction per channel (by taps for a strided image)"
_NUMPY_FALLBACK = "the numpy route of the same shape for arrays the loop does not take"

# The pools' routes, tried in this order for each op (`PoolCase.chosen` takes the first that applies).
ROUTES: tuple[PoolRoute, ...] = (
    PoolRoute("max_indices", "MaxPool", lambda c, geo: c.indices,
              lambda c, geo: pool_windows.window_bytes(c.x, geo, c.dtype) + scratch_bytes((c.y, np.bool_)),
              _max_indices, ("pool_windows.max_with_indices: one strided view per tap, indices where it wins",)),
    PoolRoute("max_compiled", "MaxPool", lambda c, geo: c.dtype == np.float32 and len(c.x) == 4 and jit_pool.max_pool is not None,
              lambda c, geo: scratch_bytes(((_row_length(geo),), jit_pool.DTYPE)), _max_compiled,
              ("jit_pool.max_pool: each output row in one pass (float32, 2-D)", _NUMPY_FALLBACK),
              compiled=True, rows_in_order=True),
    PoolRoute("max_whole", "MaxPool", _whole, _reduce_bytes, _max_reduce, (_WHOLE,)),
    PoolRoute("max_separable", "MaxPool", lambda c, geo: pool_windows.separable_fits(c.x, geo, c.dtype), _reduce_bytes,
              _max_reduce, (_SEPARABLE,)),
    PoolRoute("max_taps", "MaxPool", lambda c, geo: True, _reduce_bytes, _max_reduce, (_TAPS,)),
    PoolRoute("average_matvec", "AveragePool", lambda c, geo: _whole(c, geo) and _float(c),
              lambda c, geo: max(_row_bytes(c), _reduce_bytes(c, geo) + _plane_bytes(c)), _average_matvec,
              ("numpy matmul of each image with a row of 1 / plane (float32, float64)", _WHOLE)),
    PoolRoute("average_whole", "AveragePool", _whole, lambda c, geo: _reduce_bytes(c, geo) + _plane_bytes(c), _average,
              (_WHOLE,)),
    PoolRoute("average_separable", "AveragePool", lambda c, geo: pool_windows.separable_fits(c.x, geo, c.dtype),
              lambda c, geo: _reduce_bytes(c, geo) + _plane_bytes(c), _average, (_SEPARABLE,)),
    PoolRoute("average_taps", "AveragePool", lambda c, geo: True, lambda c, geo: _reduce_bytes(c, geo) + _plane_bytes(c),
              _average, (_TAPS,)),
    PoolRoute("lp_taps", "LpPool", lambda c, geo: True, _lp_bytes, _lp,
              ("pool_windows.lp_taps: abs(x) ** p of one strided view per tap, summed",)),
    PoolRoute("global_average_compiled", "GlobalAveragePool",
              lambda c, geo: c.dtype == np.float32 and len(c.x) >= 3 and global_pool_bound.plane_means is not None,
              lambda c, geo: _row_bytes(c), _global_means,
              ("global_pool_bound.plane_means: each plane's mean, also over its own input (float32)", _NUMPY_FALLBACK),
              bind=global_pool_bound.bind_global_average, compiled=True),
    PoolRoute("global_average_matvec", "GlobalAveragePool", lambda c, geo: _float(c), lambda c, geo: _row_bytes(c),
              _global_matvec, ("numpy matmul with a row of 1 / plane (float32, float64)", "numpy sum then scale, strided")),
    PoolRoute("global_average_sum", "GlobalAveragePool", lambda c, geo: True, _none, _global_sum,
              ("numpy sum over each plane, then scale",)),
    PoolRoute("global_max", "GlobalMaxPool", lambda c, geo: True, _none, _global_max, ("numpy maximum over each plane",)),
    PoolRoute("global_lp", "GlobalLpPool", lambda c, geo: True, _none, _global_lp,
              ("numpy einsum of x with itself (p = 2), else a sum of abs(x) ** p",)),
)  # fmt: skip
ROUTE_NAMES = tuple(r.name for r in ROUTES)


@dataclass(frozen=True)
class Example:
    """A pool that takes `route` (a name of `ROUTES`) where compiled loops are on: op, input shape,
    attributes, dtype, and whether MaxPool's Indices output is asked for."""

    route: str
    op: str
    x: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    dtype: type = np.float32
    indices: bool = False


EXAMPLES = {
    "max_indices": Example("max_indices", "MaxPool", (1, 3, 7, 7), {"kernel_shape": [3, 3], "pads": [1] * 4, "strides": [2, 2]}, indices=True),
    "max_compiled": Example("max_compiled", "MaxPool", (1, 8, 12, 12), {"kernel_shape": [3, 3], "pads": [1] * 4, "strides": [2, 2]}),
    "max_compiled_ceil": Example("max_compiled", "MaxPool", (2, 4, 9, 9), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "max_whole": Example("max_whole", "MaxPool", (1, 8, 5, 5), {"kernel_shape": [5, 5]}, np.float64),
    "max_separable": Example("max_separable", "MaxPool", (1, 8, 12, 12), {"kernel_shape": [3, 3], "pads": [1] * 4, "strides": [2, 2]}, np.float64),
    "max_separable_1d": Example("max_separable", "MaxPool", (1, 8, 20), {"kernel_shape": [3], "strides": [2]}),
    "max_taps": Example("max_taps", "MaxPool", (1, 8, 11, 11), {"kernel_shape": [3, 3], "strides": [2, 2]}, np.float64),
    "average_matvec": Example("average_matvec", "AveragePool", (1, 16, 7, 7), {"kernel_shape": [7, 7]}),
    "average_whole": Example("average_whole", "AveragePool", (1, 8, 5, 5), {"kernel_shape": [5, 5]}, np.float16),
    "average_separable": Example("average_separable", "AveragePool", (1, 8, 10, 10), {"kernel_shape": [3, 3], "pads": [1] * 4, "count_include_pad": 1}),
    "average_taps": Example("average_taps", "AveragePool", (1, 8, 11, 11), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "lp_taps": Example("lp_taps", "LpPool", (1, 4, 8, 8), {"kernel_shape": [3, 3], "pads": [1] * 4, "p": 3}),
    "global_average_compiled": Example("global_average_compiled", "GlobalAveragePool", (2, 16, 7, 7)),
    "global_average_matvec": Example("global_average_matvec", "GlobalAveragePool", (1, 16, 7, 7), dtype=np.float64),
    "global_average_sum": Example("global_average_sum", "GlobalAveragePool", (1, 8, 5, 5), dtype=np.float16),
    "global_max": Example("global_max", "GlobalMaxPool", (1, 16, 7, 7)),
    "global_lp": Example("global_lp", "GlobalLpPool", (1, 8, 5, 5)),
}  # fmt: skip
