"""A Conv's call bound once for a step's shapes and attributes (`runtime.kernels.planes.PlaneWise.bind`,
at a session's prepare): what `conv.convolve` works out on every call (route, geometry, the
activation's compiled code, whether the output may lie over the input) decided once, so that
a run of a small 1x1 conv (MobileNet's and EfficientNet's, a few us of arithmetic) goes
straight to its matmul and compiled epilogue, and a depthwise one straight to its compiled
loop (the general call's layers cost 13-19 us a step on MobileNetV3-Small's). Other routes
keep the general call. Conv's `bind_static` is set here (ConvAct's in `fused`); the kernel
registry imports every kernel module, this one with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from runtime.kernels import jit_conv
from runtime.kernels._scratch import Scratch, same_start
from runtime.kernels.conv import conv, conv_route, writes_over_input
from runtime.kernels.conv_over import conv_columns, over_route
from runtime.kernels.depthwise import DEPTHWISE_ROUTES, conv_depthwise_compiled, uses_compiled


def bind_conv(inputs, outputs, attrs: dict, finish, slow) -> Callable | None:
    """The bound call of a Conv (`finish`: ConvAct's activation, or None) on the pointwise or
    the compiled depthwise route, or None where the route is another."""
    return bind_pointwise(inputs, outputs, attrs, finish, slow) or bind_depthwise(inputs, outputs, attrs, finish, slow)


def bind_depthwise(inputs, outputs, attrs: dict, finish, slow) -> Callable | None:
    """The call of a depthwise Conv on the compiled route (`depthwise.conv_depthwise_compiled`),
    its geometry worked out once. The route reads each channel's plane before writing its
    output, so an output over the input takes the same call on one image; with more images
    such a call goes to `slow`, which runs them one at a time."""
    x, w, y = inputs[0], inputs[1], outputs[0] if outputs else None
    if x is None or w is None or y is None or len(x.shape) != 4 or jit_conv.spec_of(finish) is None:
        return None
    geo, path = conv_route(
        x.shape, w.shape, y.shape, attrs.get("group", 1), attrs.get("auto_pad", "NOTSET"), attrs.get("pads"),
        attrs.get("strides"), attrs.get("dilations"), attrs.get("kernel_shape"),
    )  # fmt: skip
    if path not in DEPTHWISE_ROUTES or not uses_compiled(geo, x.dtype):
        return None
    single = x.shape[0] == 1

    def bound(x, w, b=None, *, out, ws=None, **given):
        if not single and np.may_share_memory(x, out):
            slow((x, w, b), out, ws, given)
            return
        conv_depthwise_compiled(x, w, b, out, geo, Scratch(ws, "Conv"), finish)

    return bound


def bind_pointwise(inputs, outputs, attrs: dict, finish, slow) -> Callable | None:
    """The call of a Conv (with `finish`, its activation carrying its compiled code, for
    ConvAct) on the pointwise route, worked out once for these shapes and attributes
    (`PlaneWise.bind`): one matmul and one compiled epilogue per run, the pixel-wise route
    (`conv_over.conv_columns`) straight when the output starts at the input's first byte, or
    None where the route is another (or compiled loops are off). `slow(inputs, out, ws, attrs)`,
    the general call, takes any other call whose output is over its input."""
    x, w, y = inputs[0], inputs[1], outputs[0] if outputs else None
    spec = jit_conv.spec_of(finish)
    if x is None or w is None or y is None or spec is None or not jit_conv.takes_epilogue(y.dtype):
        return None
    group = attrs.get("group", 1)
    geo, path = conv_route(
        x.shape, w.shape, y.shape, group, attrs.get("auto_pad", "NOTSET"), attrs.get("pads"),
        attrs.get("strides"), attrs.get("dilations"), attrs.get("kernel_shape"),
    )  # fmt: skip
    if path != "pointwise" or group != 1 or len(x.shape) < 3:
        return None
    batch, channels, filters = x.shape[0], x.shape[1], w.shape[0]
    pixels = math.prod(geo.out)
    weights, source, target = (filters, channels), (batch, channels, pixels), (batch, filters, pixels)
    may_overlap = writes_over_input(attrs, inputs, y)
    columns = may_overlap and over_route(x.shape, w.shape, y.shape, group, geo) == "columns"
    bias_act, empty = jit_conv.bias_act, jit_conv.EMPTY
    code, p0, p1 = spec

    def bound(x, w, b=None, *, out, ws=None, **given):
        if may_overlap and np.may_share_memory(x, out):
            if columns and same_start(x, out) and jit_conv.usable(x, out):
                conv_columns(x, w, b, out, finish, Scratch(ws, "Conv"))  # its compiled epilogue: `finish.spec`
            else:
                slow((x, w, b), out, ws, given)
            return
        if not out.flags.c_contiguous or out.dtype != jit_conv.DTYPE:
            slow((x, w, b), out, ws, given)
            return
        flat = out.reshape(target)
        if batch == 1:  # a plain 2-D matmul: numpy's broadcast loop costs a few us more
            np.matmul(w.reshape(weights), x.reshape(source[1:]), out=flat[0])
        else:
            np.matmul(w.reshape(weights), x.reshape(source), out=flat)
        has_bias = b is not None
        for n in range(batch):
            bias_act(flat[n], b if has_bias else empty, has_bias, 0, pixels, code, p0, p1)

    return bound


def _bind_conv(inputs, outputs, attrs: dict, slow) -> Callable | None:
    """Conv's `bind_static` (`runtime.kernels.planes.PlaneWise.bind`)."""
    return bind_conv(inputs, outputs, attrs, None, slow)


conv.bind_static = _bind_conv  # type: ignore[attr-defined]
