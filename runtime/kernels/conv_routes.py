"""Which route a Conv takes, decided once per shape: the workspace function, the call and the
bound call (`runtime.kernels.conv_bound`) all read this one choice (`ConvGeometry.route`, the
shapes and attributes as one value), and whether the output may lie over the input
(`ConvGeometry.over`, `writes_over_input`, `reads_before_writing`, `CONV_PLANES`).

Routes: "pointwise" (1x1, stride 1, unpadded: a matmul straight from the input), "taps" (one
matmul per kernel tap), "im2col" (dense; Winograd's or the compiled bands where they apply),
and the depthwise ones of `runtime.kernels.depthwise`: "channels_last", "rows", "depthwise".

`EXAMPLES` holds one small case per route and variant (Winograd's two tiles, the compiled bands,
the numpy fallbacks): the workspace test runs each with exactly its declared workspace, and
`memplan warm` runs each float32 one, so a new route is reached by adding its example here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from runtime.kernels.conv_over import over_route
from runtime.kernels.depthwise import uses_channels_last, uses_rows
from runtime.kernels.planes import Planes
from runtime.kernels.window import Geometry, window_geometry


def _is_pointwise(geo: Geometry) -> bool:
    """A 1x1, stride-1, unpadded conv: a matmul per group straight from the input."""
    return not geo.padded and all(k == 1 and s == 1 for k, s in zip(geo.kernel, geo.strides, strict=True))


def _is_depthwise(x_shape, w_shape, group: int) -> bool:
    """One filter per input channel: cheaper as a sum of K scaled taps than as K-long dot products."""
    return group > 1 and group == x_shape[1] == w_shape[0] and w_shape[1] == 1


# The routes a dense 3x3 stride-1 conv may leave for Winograd's (`runtime.kernels.winograd`).
DENSE_ROUTES = ("taps", "im2col")


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
        return _route(self)

    @property
    def over(self) -> str | None:
        """`conv_over.over_route` of this Conv ("columns", "rows" or None), worked out once per value."""
        return _over(self)


def _tuple(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(value)


@functools.lru_cache(maxsize=1024)
def _route(c: ConvGeometry) -> tuple[Geometry, str]:
    """A model runs the same few shapes every time, so this is worked out once per shape rather
    than on every call."""
    geo = window_geometry(c.x, c.y, c.kernel_shape or c.w[2:], c.auto_pad, c.pads, c.strides, c.dilations)
    if _is_pointwise(geo):
        return geo, "pointwise"
    if uses_taps(c.x, c.w, geo, c.group):
        return geo, "taps"
    if not _is_depthwise(c.x, c.w, c.group):
        return geo, "im2col"
    if uses_channels_last(geo, c.x[1]):
        return geo, "channels_last"
    return geo, "rows" if uses_rows(geo) else "depthwise"


@functools.lru_cache(maxsize=1024)
def _over(c: ConvGeometry) -> str | None:
    return over_route(c.x, c.w, c.y, c.group, _route(c)[0])


def conv_route(x_shape: Any, w_shape: Any, y_shape: Any, attrs: Mapping[str, Any]) -> tuple[Geometry, str]:
    """(window geometry, route name) of a Conv with these shapes and attributes."""
    return ConvGeometry.of(x_shape, w_shape, y_shape, attrs).route


def over_of(x_shape: Any, w_shape: Any, y_shape: Any, attrs: Mapping[str, Any]) -> str | None:
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
    _, path = conv_route(x.shape, w.shape, out.shape, attrs)
    return path in ("rows", "depthwise", "channels_last")


# A depthwise Conv is plane-wise: planned over its input (MobileNet's stride-2 steps); a dense
# 1x1 or 'same' KxK conv writes over its input by a route of its own (`conv_over`).
CONV_PLANES = Planes(channel_inputs=(1, 2), depthwise=True, direct=reads_before_writing, over=writes_over_input)


@dataclass(frozen=True)
class Example:
    """A Conv that takes `route` (`conv_route`'s name; "rows" also stands for "depthwise", which
    of the two numpy depthwise routes depending on the map): input and weight shapes, attributes."""

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
    "depthwise_compiled": Example("rows", (1, 32, 20, 20), (32, 1, 3, 3), {"pads": [1] * 4, "group": 32}),
    "depthwise_compiled_channels_last": Example("channels_last", (1, 192, 7, 7), (192, 1, 3, 3), {"pads": [1] * 4, "group": 192}),
    "depthwise_rows": Example("rows", (1, 16, 20, 20), (16, 1, 3, 3), {"pads": [1] * 4, "group": 16}, np.float64),
    "depthwise_channels_last": Example("channels_last", (1, 192, 7, 7), (192, 1, 5, 5), {"pads": [2] * 4, "group": 192}, np.float64),
    "depthwise_1d": Example("depthwise", (1, 16, 30), (16, 1, 5), {"pads": [2, 2], "group": 16}),
}  # fmt: skip
