"""Conv and ConvInteger (ConvTranspose: `conv_transpose`): the kernels around Conv's route table.

A Conv's route is one value of `runtime.kernels.conv.routes.ROUTES` (pointwise, taps, im2col and
the depthwise ones), picked once per shape (`ConvGeometry.chosen`): the workspace function the
planner calls (`conv_workspace`), the call (`convolve`) and the bound call (`conv_routes.bind_conv`)
all read that one route object, never its name. The loops are the routes' (`conv_dense`,
`depthwise`, `winograd` and the compiled ones they call); the window geometry (pads, auto_pad,
strides, dilations) is `runtime.kernels.window`'s.

An ungrouped stride-1 Conv whose output keeps the input's size (1x1, or KxK 'same') may be
planned with its output over its input (`runtime.kernels.conv.over` states why that is
safe and when): called so, it runs the pixel-wise or row-lagged route, whose scratch the
workspace covers (the larger of it and the usual route's).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from runtime.kernels import Bound, TensorMeta, kernel
from runtime.kernels._scratch import Scratch, scratch_bytes, small_ufunc_buffers
from runtime.kernels.conv import jit_conv, jit_depthwise, jit_phases, jit_winograd, winograd
from runtime.kernels.conv.routes import CONV_PLANES, ConvGeometry, bind_conv


def conv_workspace(
    inputs, outputs, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None,
    prepared_weights=True,
) -> int:  # fmt: skip
    """The workspace of the Conv's route (`ConvRoute.bytes`: the same route object its call runs),
    or of its over-input route where it has one and that takes more."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    # Also fills the route cache at prepare, so that a run adds nothing to it beside the arena.
    c = ConvGeometry.of(x.shape, w.shape, y.shape, _attrs(auto_pad, dilations, group, kernel_shape, pads, strides))
    (geo, route), over = c.chosen, c.over
    own = route.bytes(x, w, geo, group, prepared_weights)
    if over is None:
        return own
    return max(own, over.bytes(x.shape, w.shape, x.dtype, geo))


def conv_prepare(inputs, outputs, *, group=1, **_) -> None:
    """Conv's prepare hook: its compiled loops (the dense bands', and the depthwise ones for a
    grouped conv) are compiled when a session prepares, never in a run nor when only planning."""
    jit_conv.warm()
    winograd.warm()
    jit_phases.warm()
    if group > 1:
        jit_depthwise.warm()


def conv_constants(values, inputs, outputs, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   pads=None, strides=None, **_) -> dict:  # fmt: skip
    """Conv's constants hook (`runtime.kernels.Kernel.constants`): a constant weight of a conv
    that runs by Winograd transformed once (``winograd_u``), not on every call."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    weight = values[1] if len(values) > 1 else None
    if weight is None or weight.dtype != jit_winograd.DTYPE or x is None or y is None:
        return {}
    c = ConvGeometry.of(x.shape, w.shape, y.shape, _attrs(auto_pad, dilations, group, kernel_shape, pads, strides))
    geo, route = c.chosen
    if not route.winograd or not winograd.takes(geo, x.shape, w.shape, group, x.dtype):
        return {}
    return {"winograd_u": winograd.prepared_weights(weight, winograd.tile_of(geo, x.shape, w.shape))}


def conv_bind(inputs, outputs, attrs: dict, general) -> Bound | None:
    """Conv's bind hook: the bound call of its route where it has one (`conv_routes.bind_conv`)."""
    return bind_conv(inputs, outputs, attrs, None, general)


@kernel(
    "Conv", workspace=conv_workspace, planes=CONV_PLANES, prepare=conv_prepare, constants=conv_constants, bind=conv_bind
)
@small_ufunc_buffers()
def conv(
    x, w, b=None, *, out, ws, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None,
    winograd_u=None, prepared_weights=True,
):  # fmt: skip
    attrs = _attrs(auto_pad, dilations, group, kernel_shape, pads, strides)
    convolve(x, w, b, out, ws, None, attrs, winograd_u, prepared_weights)


def _attrs(auto_pad, dilations, group, kernel_shape, pads, strides) -> dict:
    """A Conv's attributes as the dict `ConvGeometry.of` reads."""
    return {
        "auto_pad": auto_pad, "dilations": dilations, "group": group, "kernel_shape": kernel_shape, "pads": pads,
        "strides": strides,
    }  # fmt: skip


Finish = Callable[[np.ndarray], None]


def convolve(x, w, b, out, ws, finish: Finish | None, attrs: dict, winograd_u=None, prepared=True) -> None:
    """Conv into `out` (`attrs` the Conv's attributes), then `finish` (an in-place activation, or None) over the output (with `winograd_u`
    the weight's Winograd transform made at prepare, or None; not `prepared`: no Winograd at all): each
    channel block while it is in cache on the banded depthwise route, each image elsewhere (a
    1x1 conv banded by output channels re-reads its input per band, which costs more than
    the cache saves)."""
    if out.size == 0:
        return  # a map with a zero dim (or none to write): no route has a band or a column to make
    c = ConvGeometry.of(x.shape, w.shape, out.shape, attrs)
    (geo, route), group = c.chosen, c.group
    if np.may_share_memory(x, out):
        over = c.over
        if over is not None:
            over.call(x, w, b, out, geo, group, ws, finish, winograd_u, prepared)  # its own route over the input
            return
    if not route.call(x, w, b, out, geo, group, ws, finish, winograd_u, prepared) and finish is not None:
        for n in range(x.shape[0]):
            finish(out[n])


def _int32(meta) -> TensorMeta:
    return TensorMeta(tuple(meta.shape), np.dtype(np.int32))


def conv_integer_workspace(inputs, outputs, **attrs) -> int:
    x, w = _int32(inputs[0]), _int32(inputs[1])
    widened = scratch_bytes((x.shape, x.dtype), (w.shape, w.dtype))
    return widened + conv_workspace([x, w], [_int32(outputs[0])], **attrs)


@kernel("ConvInteger", workspace=conv_integer_workspace)
def conv_integer(
    x, w, x_zero_point=None, w_zero_point=None, *, out, ws, auto_pad="NOTSET", dilations=None, group=1,
    kernel_shape=None, pads=None, strides=None,
):  # fmt: skip
    # Conv of (x - x_zero) and (w - w_zero) in int32. Removing the zero point first makes the
    # zero padding of the shifted input equal to padding x with its zero point, as the spec says.
    scratch = Scratch(ws, "ConvInteger")
    x32 = scratch.take(x.shape, np.int32)
    w32 = scratch.take(w.shape, np.int32)
    np.subtract(x, 0 if x_zero_point is None else x_zero_point.astype(np.int32), out=x32, dtype=np.int32)
    w_zero = 0 if w_zero_point is None else w_zero_point.astype(np.int32)
    if np.ndim(w_zero) == 1:
        w_zero = w_zero.reshape((-1,) + (1,) * (w.ndim - 1))  # one zero point per output channel
    np.subtract(w, w_zero, out=w32, dtype=np.int32)
    rest = None if ws is None else ws[scratch.used :]
    conv(x32, w32, None, out=out, ws=rest, auto_pad=auto_pad, dilations=dilations, group=group,
         kernel_shape=kernel_shape, pads=pads, strides=strides)  # fmt: skip
