"""Conv's routes, one table of values (`ROUTES`, each a `ConvRoute`: name, when it applies, its
workspace, its run, its bound call) and one choice per shape (`ConvGeometry.chosen`, the shapes
and attributes as one value): the workspace function the planner calls, the call and the bound
call all read that one route object. Also whether the output may lie over the input
(`ConvGeometry.over`, `writes_over_input`, `reads_before_writing`, `CONV_PLANES`).

Routes: "pointwise" (1x1, stride 1, unpadded: a matmul straight from the input), "taps" (one
matmul per kernel tap), "im2col" (dense; Winograd's or the compiled bands where they apply;
loops in `runtime.kernels.conv.dense`), and the depthwise ones ("depthwise_channels_last",
"depthwise_rows", "depthwise_taps"; the compiled loop of `runtime.kernels.conv.depthwise` where it
applies, float32 2-D, else each route's numpy loop).

`EXAMPLES` holds one small case per route and variant (Winograd's two tiles, the compiled bands,
the numpy fallbacks): the workspace test runs each with exactly its declared workspace, and
`memplan warm` runs each float32 one, so a new route is reached by adding its example here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.conv import dense as conv_dense
from runtime.kernels.conv import jit_conv, winograd
from runtime.kernels.conv.bound import bind_depthwise, bind_im2col, bind_pointwise
from runtime.kernels.conv.depthwise import (
    add_bias,
    channels_last_layout,
    compiled_layout,
    conv_depthwise_channels_last,
    conv_depthwise_compiled,
    conv_depthwise_rows,
    rows_layout,
    uses_channels_last,
    uses_compiled,
    uses_rows,
)
from runtime.kernels.conv.over import OverRoute, over_route
from runtime.kernels.planes import Planes
from runtime.kernels.protocol import Bound
from runtime.kernels.window import Geometry, window_geometry


def _is_pointwise(geo: Geometry) -> bool:
    """A 1x1, stride-1, unpadded conv: a matmul per group straight from the input."""
    return not geo.padded and all(k == 1 and s == 1 for k, s in zip(geo.kernel, geo.strides, strict=True))


def _is_depthwise(x_shape, w_shape, group: int) -> bool:
    """One filter per input channel: cheaper as a sum of K scaled taps than as K-long dot products."""
    return group > 1 and group == x_shape[1] == w_shape[0] and w_shape[1] == 1


def uses_taps(x_shape, w_shape, geo: Geometry, group: int) -> bool:
    """A 2-D, stride-1, ungrouped conv with at most half as many filters as channels: cheaper as
    one matmul per kernel tap straight from the padded image than through an im2col buffer
    (which would be larger than the output: kernel taps x channels rows against filters)."""
    return (
        group == 1
        and len(geo.kernel) == 2
        and geo.strides == (1, 1)
        and math.prod(geo.kernel) > 1
        and 2 * w_shape[0] <= x_shape[1]
    )


class ConvGeometry(NamedTuple):
    """A Conv's shapes and attributes as one immutable, hashable value (lists as tuples, the spec's
    defaults filled in): what its route, its workspace and its output-over-input route depend on.
    A named tuple, since a general call makes one per run: cheaper to build and hash than a dataclass."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    y: tuple[int, ...]
    group: int = 1
    auto_pad: str = "NOTSET"
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    dilations: tuple[int, ...] | None = None
    kernel_shape: tuple[int, ...] | None = None

    @staticmethod
    def of(x_shape: Any, w_shape: Any, y_shape: Any, attrs: Mapping[str, Any]) -> ConvGeometry:
        """From the shapes of x, w and y and the node's attributes (any others are ignored)."""
        return ConvGeometry(
            tuple(x_shape), tuple(w_shape), tuple(y_shape), attrs.get("group", 1), attrs.get("auto_pad", "NOTSET"),
            _tuple(attrs.get("pads")), _tuple(attrs.get("strides")), _tuple(attrs.get("dilations")),
            _tuple(attrs.get("kernel_shape")),
        )  # fmt: skip

    @property
    def route(self) -> tuple[Geometry, str]:
        """(window geometry, route name), worked out once per value."""
        geo, chosen = _pick(self)
        return geo, chosen.name

    @property
    def chosen(self) -> tuple[Geometry, ConvRoute]:
        """(window geometry, the `ConvRoute` of `ROUTES` this Conv takes), worked out once per value."""
        return _pick(self)

    @property
    def over(self) -> OverRoute | None:
        """The `OverRoute` by which this Conv may run over its own input (`over.over_route`), or None,
        worked out once per value."""
        return _over(self)


def _tuple(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(value)


@functools.lru_cache(maxsize=1024)
def _pick(c: ConvGeometry) -> tuple[Geometry, ConvRoute]:
    """The first route of `ROUTES` that applies. A model runs the same few shapes every time, so
    this is worked out once per shape rather than on every call."""
    geo = window_geometry(c.x, c.y, c.kernel_shape or c.w[2:], c.auto_pad, c.pads, c.strides, c.dilations)
    return geo, next(r for r in ROUTES if r.applies(c, geo))


@functools.lru_cache(maxsize=1024)
def _over(c: ConvGeometry) -> OverRoute | None:
    return over_route(c.x, c.w, c.y, c.group, _pick(c)[0])


def conv_route(x_shape: Any, w_shape: Any, y_shape: Any, attrs: Mapping[str, Any]) -> tuple[Geometry, str]:
    """(window geometry, route name) of a Conv with these shapes and attributes."""
    return ConvGeometry.of(x_shape, w_shape, y_shape, attrs).route


def over_of(x_shape: Any, w_shape: Any, y_shape: Any, attrs: Mapping[str, Any]) -> OverRoute | None:
    """The route by which a Conv with these shapes and attributes writes over its input, or None."""
    return ConvGeometry.of(x_shape, w_shape, y_shape, attrs).over


def writes_over_input(attrs, inputs, out) -> bool:
    """Whether a Conv may be called with its output from its input's first byte (any size):
    a dense 1x1 or KxK 'same' conv with the channel geometry `conv_over` asks for."""
    x, w = inputs[0], inputs[1] if len(inputs) > 1 else None
    if x is None or w is None or out is None or len(x.shape) < 3 or x.dtype != out.dtype:
        return False
    return over_of(x.shape, w.shape, out.shape, attrs) is not None


def reads_before_writing(attrs, inputs, out) -> bool:
    """Whether a depthwise Conv's route reads each channel block of an image (into its padded or
    copied rows) before writing that block's output: it may then run over its own input."""
    x, w = inputs[0], inputs[1]
    return ConvGeometry.of(x.shape, w.shape, out.shape, attrs).chosen[1].reads_first


# A depthwise Conv is plane-wise: planned over its input (MobileNet's stride-2 steps); a dense
# 1x1 or 'same' KxK conv writes over its input by a route of its own (`conv_over`).
CONV_PLANES = Planes(channel_inputs=(1, 2), depthwise=True, direct=reads_before_writing, over=writes_over_input)


Finish = Callable[[np.ndarray], None]


@dataclass(frozen=True)
class ConvRoute:
    """One way to run a Conv, as one value: its name (one meaning each), when it applies (a
    predicate of the Conv's value and window geometry; `ROUTES` is tried in order), the bytes
    of workspace its loops take (`workspace(x, w, geo, group)`, x and w anything with shape and
    dtype), its run (`run(x, w, b, out, geo, group, scratch, finish)`, True when it applied
    `finish`) and its bound call (`bind(inputs, outputs, attrs, conv, geo, finish, general)`,
    a `Bound` or None), whether a float32 3x3 stride-1 case runs by Winograd instead
    (`runtime.kernels.conv.winograd`), and whether it reads each channel block before writing it
    (so that it may run over its own input), and the loops it runs, first to last choice (for
    docs/KERNELS.md). The planner's workspace (`bytes`) and the call (`call`) read the same value,
    picked once per shape (`ConvGeometry.chosen`)."""

    name: str
    applies: Callable[[ConvGeometry, Geometry], bool]
    workspace: Callable[[Any, Any, Geometry, int], int]
    run: Callable[..., bool]
    bind: Callable[..., Bound | None] | None = None
    winograd: bool = False
    reads_first: bool = False
    loops: tuple[str, ...] = ()

    def bytes(self, x: Any, w: Any, geo: Geometry, group: int, prepared: bool = True) -> int:
        """The workspace this route declares: its loops', or Winograd's where it may take that
        (then the larger: a call with a strided or non-float32 weight falls back to the loops)."""
        own = self.workspace(x, w, geo, group)
        if self.winograd and prepared and winograd.takes(geo, x.shape, w.shape, group, x.dtype):
            return max(own, scratch_bytes(*winograd.layout(x.shape, w.shape, geo)))
        return own

    def call(self, x, w, b, out, geo: Geometry, group: int, ws: np.ndarray | None, finish: Finish | None,
             winograd_u=None, prepared: bool = True) -> bool:  # fmt: skip
        """Run this route with `ws` (the workspace's bytes) as its scratch (by Winograd where it
        applies, with `winograd_u` the weight's transform made at prepare, or None); True when
        `finish` was applied."""
        scratch = Scratch(ws, "Conv")
        if self.winograd and winograd.applies(x, w, b, out, geo, group, winograd_u, prepared):
            spec = jit_conv.spec_of(finish)
            winograd.conv_winograd(x, w, b, out, geo, scratch, spec or jit_conv.NO_ACTIVATION, winograd_u)
            return spec is not None
        return self.run(x, w, b, out, geo, group, scratch, finish)


def _run_taps(x, w, b, out, geo: Geometry, group: int, scratch: Scratch, finish) -> bool:
    conv_dense.conv_taps(x, w, b, out, geo, scratch)
    return False


def _run_im2col(x, w, b, out, geo: Geometry, group: int, scratch: Scratch, finish) -> bool:
    """Compiled bands straight from the unpadded image where they apply, else numpy's im2col."""
    if jit_conv.takes_im2col(geo, x.dtype) and jit_conv.usable(x, out):
        spec = jit_conv.spec_of(finish)
        conv_dense.conv_im2col_compiled(x, w, b, out, geo, group, scratch, spec or jit_conv.NO_ACTIVATION)
        return spec is not None
    conv_dense.conv_im2col(x, w, b, out, geo, group, scratch)
    return False


def _depthwise(
    numpy_run: Callable[..., bool], numpy_bytes: Callable[[Any, Geometry, Any], int]
) -> tuple[Callable[[Any, Any, Geometry, int], int], Callable[..., bool]]:
    """A depthwise route's (workspace, run): the compiled loop where it applies (float32, 2-D,
    `depthwise.uses_compiled`), else the route's own numpy loop."""

    def workspace(x, w, geo: Geometry, group: int) -> int:
        if uses_compiled(geo, x.dtype):
            return scratch_bytes(*compiled_layout(x.shape, geo, x.dtype))
        return numpy_bytes(x.shape, geo, x.dtype)

    def run(x, w, b, out, geo: Geometry, group: int, scratch: Scratch, finish) -> bool:
        if uses_compiled(geo, x.dtype):
            conv_depthwise_compiled(x, w, b, out, geo, scratch, finish)
            return True
        return numpy_run(x, w, b, out, geo, scratch, finish)

    return workspace, run


def _rows(x, w, b, out, geo: Geometry, scratch: Scratch, finish) -> bool:
    def epilogue(block: np.ndarray, bias: np.ndarray | None) -> None:
        add_bias(block, bias)
        if finish is not None:
            finish(block)  # each channel block while it is in cache

    conv_depthwise_rows(x, w, b, out, geo, scratch, epilogue)
    return True


def _channels_last(x, w, b, out, geo: Geometry, scratch: Scratch, finish) -> bool:
    conv_depthwise_channels_last(x, w, b, out, geo, scratch)
    return False


def _taps_by_channels(x, w, b, out, geo: Geometry, scratch: Scratch, finish) -> bool:
    conv_dense.conv_depthwise_taps(x, w, b, out, geo, scratch)
    return False


def _layout_bytes(layout: Callable[..., list]) -> Callable[[Any, Geometry, Any], int]:
    return lambda x_shape, geo, dtype: scratch_bytes(*layout(x_shape, geo, dtype))


_DW_CHANNELS_LAST = _depthwise(_channels_last, _layout_bytes(channels_last_layout))
_DW_ROWS = _depthwise(_rows, _layout_bytes(rows_layout))
_WINOGRAD = "winograd.conv_winograd: F(2x2) or F(4x4) compiled transforms (float32 3x3 stride 1, where it applies)"
_DW_COMPILED = "depthwise.conv_depthwise_compiled: jit_depthwise (float32 2-D, compiled loops on)"
_DW_TAPS = _depthwise(
    _taps_by_channels, lambda shape, geo, dtype: conv_dense.depthwise_taps_workspace(shape, dtype, geo)
)

# Conv's routes, tried in this order (`ConvGeometry.chosen` takes the first that applies).
ROUTES: tuple[ConvRoute, ...] = (
    ConvRoute(
        "pointwise", lambda c, geo: _is_pointwise(geo), lambda x, w, geo, group: 0,
        lambda x, w, b, out, geo, group, scratch, finish: conv_dense.conv_pointwise(x, w, b, out, geo, group, finish),
        bind=bind_pointwise,
        loops=("dense.conv_pointwise: a matmul per group from the input, then the bias and activation "
               "(jit_conv.bias_act on the bound call, float32)",),
    ),
    ConvRoute(
        "taps", lambda c, geo: uses_taps(c.x, c.w, geo, c.group),
        lambda x, w, geo, group: scratch_bytes(*conv_dense.taps_layout(x.shape, w.shape, x.dtype, geo)),
        _run_taps, winograd=True,
        loops=(_WINOGRAD, "dense.conv_taps: one matmul per kernel tap over the padded image"),
    ),
    ConvRoute(
        "im2col", lambda c, geo: not _is_depthwise(c.x, c.w, c.group),
        lambda x, w, geo, group: conv_dense.im2col_workspace(x.shape, x.dtype, geo), _run_im2col, bind=bind_im2col,
        winograd=True,
        loops=(_WINOGRAD, "dense.conv_im2col_compiled: bands by jit_conv.im2col_band (float32 2-D, compiled loops on)",
               "dense.conv_im2col: numpy im2col bands"),
    ),
    ConvRoute(
        "depthwise_channels_last", lambda c, geo: _is_depthwise(c.x, c.w, c.group) and uses_channels_last(geo, c.x[1]), *_DW_CHANNELS_LAST,
        bind=bind_depthwise, reads_first=True,
        loops=(_DW_COMPILED, "depthwise.conv_depthwise_channels_last: numpy over channels-last rows"),
    ),
    ConvRoute(
        "depthwise_rows", lambda c, geo: _is_depthwise(c.x, c.w, c.group) and uses_rows(geo), *_DW_ROWS,
        bind=bind_depthwise, reads_first=True,
        loops=(_DW_COMPILED, "depthwise.conv_depthwise_rows: numpy over bands of padded rows per channel block"),
    ),
    ConvRoute(
        "depthwise_taps", lambda c, geo: _is_depthwise(c.x, c.w, c.group), *_DW_TAPS, bind=bind_depthwise,
        reads_first=True, loops=(_DW_COMPILED, "dense.conv_depthwise_taps: numpy, one scaled tap at a time"),
    ),
)  # fmt: skip
ROUTE_NAMES = tuple(r.name for r in ROUTES)


def bind_conv(inputs, outputs, attrs: dict, finish: Finish | None, general) -> Bound | None:
    """The bound call of a Conv (`finish`: ConvAct's activation, or None) by its route's `bind`,
    or None where the route has none or declines these shapes (the general call runs)."""
    x, w = inputs[0], inputs[1] if len(inputs) > 1 else None
    y = outputs[0] if outputs else None
    if x is None or w is None or y is None:
        return None
    c = ConvGeometry.of(x.shape, w.shape, y.shape, attrs)
    geo, route = c.chosen
    return None if route.bind is None else route.bind(inputs, outputs, attrs, c, geo, finish, general)


@dataclass(frozen=True)
class Example:
    """A Conv that takes `route` (a name of `ROUTES`; "depthwise_rows" also stands for "depthwise_taps",
    which of the two numpy depthwise routes depending on the map): input and weight shapes, attributes."""

    route: str
    x: tuple[int, ...]
    w: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    dtype: type = np.float32


EXAMPLES = {
    "pointwise": Example("pointwise", (1, 16, 8, 8), (8, 16, 1, 1)),
    "taps": Example("taps", (1, 16, 10, 10), (8, 16, 5, 5), {"pads": [2, 2, 2, 2]}),
    "winograd_f2": Example("im2col", (1, 16, 14, 14), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "winograd_f4": Example("im2col", (1, 16, 28, 28), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "im2col_compiled_stride2": Example("im2col", (1, 8, 12, 12), (16, 8, 3, 3), {"pads": [1] * 4, "strides": [2, 2]}),
    "im2col_dilated": Example("im2col", (1, 8, 16, 16), (8, 8, 3, 3), {"pads": [2] * 4, "dilations": [2, 2]}),
    "im2col_grouped": Example("im2col", (2, 16, 8, 8), (16, 4, 3, 3), {"pads": [1] * 4, "group": 4}),
    "im2col_1d": Example("im2col", (1, 64, 32), (128, 64, 3), {"pads": [1, 1]}),
    "im2col_float64": Example("im2col", (1, 8, 9, 9), (16, 8, 3, 3), {"pads": [1] * 4}, np.float64),
    "depthwise_compiled": Example("depthwise_rows", (1, 32, 20, 20), (32, 1, 3, 3), {"pads": [1] * 4, "group": 32}),
    "depthwise_compiled_channels_last": Example("depthwise_channels_last", (1, 192, 7, 7), (192, 1, 3, 3), {"pads": [1] * 4, "group": 192}),
    "depthwise_rows": Example("depthwise_rows", (1, 16, 20, 20), (16, 1, 3, 3), {"pads": [1] * 4, "group": 16}, np.float64),
    "depthwise_channels_last": Example("depthwise_channels_last", (1, 192, 7, 7), (192, 1, 5, 5), {"pads": [2] * 4, "group": 192}, np.float64),
    "depthwise_1d": Example("depthwise_taps", (1, 16, 30), (16, 1, 5), {"pads": [2, 2], "group": 16}),
}  # fmt: skip
