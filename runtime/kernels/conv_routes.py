"""Which route a Conv takes, decided once per shape: the workspace function, the call and the
bound call (`runtime.kernels.conv_bound`) all read this one choice (`conv_route`), and whether
the output may lie over the input (`writes_over_input`, `reads_before_writing`, `CONV_PLANES`).

Routes: "pointwise" (1x1, stride 1, unpadded: a matmul straight from the input), "taps" (one
matmul per kernel tap), "im2col" (dense; Winograd's or the compiled bands where they apply),
and the depthwise ones of `runtime.kernels.depthwise`: "channels_last", "rows", "depthwise".
"""

from __future__ import annotations

import functools
import math

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


@functools.lru_cache(maxsize=1024)
def _conv_route(x_shape, w_shape, y_shape, group, auto_pad, pads, strides, dilations, kernel_shape):
    """(geometry, path) of one Conv: a model runs the same few shapes every time, so this is
    worked out once per shape rather than on every call (attributes come in as tuples)."""
    geo = window_geometry(x_shape, y_shape, kernel_shape or w_shape[2:], auto_pad, pads, strides, dilations)
    if _is_pointwise(geo):
        return geo, "pointwise"
    if uses_taps(x_shape, w_shape, geo, group):
        return geo, "taps"
    if not _is_depthwise(x_shape, w_shape, group):
        return geo, "im2col"
    if uses_channels_last(geo, x_shape[1]):
        return geo, "channels_last"
    return geo, "rows" if uses_rows(geo) else "depthwise"


def conv_route(x_shape, w_shape, y_shape, group, auto_pad, pads, strides, dilations, kernel_shape):
    """`_conv_route` with list attributes made hashable."""
    return _conv_route(
        tuple(x_shape), tuple(w_shape), tuple(y_shape), group, auto_pad, _tuple(pads), _tuple(strides),
        _tuple(dilations), _tuple(kernel_shape),
    )  # fmt: skip


def _tuple(value):
    return None if value is None else tuple(value)


@functools.lru_cache(maxsize=1024)
def _over_route(x_shape, w_shape, y_shape, group, auto_pad, pads, strides, dilations, kernel_shape):
    geo, _ = _conv_route(x_shape, w_shape, y_shape, group, auto_pad, pads, strides, dilations, kernel_shape)
    return over_route(x_shape, w_shape, y_shape, group, geo)


def over_of(x_shape, w_shape, y_shape, group, auto_pad, pads, strides, dilations, kernel_shape) -> str | None:
    """`conv_over.over_route` of one Conv ("columns", "rows" or None), worked out once per shape."""
    return _over_route(
        tuple(x_shape), tuple(w_shape), tuple(y_shape), group, auto_pad, _tuple(pads), _tuple(strides),
        _tuple(dilations), _tuple(kernel_shape),
    )  # fmt: skip


def writes_over_input(attrs, inputs, out) -> bool:
    """Whether a Conv may be called with its output from its input's first byte (any size):
    a dense 1x1 or KxK 'same' conv with the channel geometry `conv_over` asks for."""
    x, w = inputs[0], inputs[1] if len(inputs) > 1 else None
    if x is None or w is None or out is None or len(x.shape) < 3 or x.dtype != out.dtype:
        return False
    route = over_of(
        x.shape, w.shape, out.shape, attrs.get("group", 1), attrs.get("auto_pad", "NOTSET"), attrs.get("pads"),
        attrs.get("strides"), attrs.get("dilations"), attrs.get("kernel_shape"),
    )  # fmt: skip
    return route is not None


def reads_before_writing(attrs, inputs, out) -> bool:
    """Whether a depthwise Conv's route reads each channel block of an image (into its padded or
    copied rows) before writing that block's output: it may then run over its own input."""
    x, w = inputs[0], inputs[1]
    _, path = conv_route(
        x.shape, w.shape, out.shape, attrs.get("group", 1), attrs.get("auto_pad", "NOTSET"), attrs.get("pads"),
        attrs.get("strides"), attrs.get("dilations"), attrs.get("kernel_shape"),
    )  # fmt: skip
    return path in ("rows", "depthwise", "channels_last")


# A depthwise Conv is plane-wise: planned over its input (MobileNet's stride-2 steps); a dense
# 1x1 or 'same' KxK conv writes over its input by a route of its own (`conv_over`).
CONV_PLANES = Planes(channel_inputs=(1, 2), depthwise=True, direct=reads_before_writing, over=writes_over_input)
