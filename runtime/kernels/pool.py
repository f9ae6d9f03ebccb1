"""MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool and GlobalLpPool: the kernels
around the pools' route table.

A pool's route is one value of `runtime.kernels.pool_routes.ROUTES` (compiled, BLAS or numpy
loops; by taps, axis by axis or over the whole image), picked once per shape (`PoolCase.chosen`):
the workspace function the planner calls (`route_workspace`), the call (`run_route`) and the bound
call (`bind_route`) all read that one route object. The numpy loops are `runtime.kernels.pool_windows`'s,
the compiled ones `runtime.kernels.jit_pool`'s and `runtime.kernels.global_pool_bound`'s; the window
geometry (pads, auto_pad, strides, dilations, ceil_mode) is `runtime.kernels.window`'s.
"""

from __future__ import annotations

import math
from typing import Any

from runtime.kernels import jit_pool, kernel
from runtime.kernels._scratch import STRIDED_UFUNC_BUFFER, Scratch, small_ufunc_buffers
from runtime.kernels.planes import Planes
from runtime.kernels.pool_routes import PoolCase
from runtime.kernels.protocol import Bound


def _case(op: str, inputs, outputs, attrs: dict[str, Any]) -> PoolCase:
    indices = op == "MaxPool" and len(outputs) > 1 and outputs[1] is not None
    return PoolCase.of(op, inputs[0], outputs[0], attrs, indices)


def route_workspace(op: str):
    """The workspace function the planner calls for `op`: the bytes its route declares (`PoolRoute.bytes`)."""

    def workspace(inputs, outputs, **attrs) -> int:
        c = _case(op, inputs, outputs, attrs)
        geo, route = c.chosen  # also fills the route cache at prepare, so that a run adds nothing to it
        return route.bytes(c, geo)

    return workspace


def bind_route(op: str):
    """The bind hook of `op`: its route's bound call, or None (the general call) where it has none."""

    def bind(inputs, outputs, attrs: dict, general) -> Bound | None:
        x, y = inputs[0], outputs[0] if outputs else None
        if x is None or y is None:
            return None
        route = _case(op, inputs, outputs, attrs).chosen[1]
        return None if route.bind is None else route.bind(inputs, outputs, attrs, general)

    return bind


def run_route(op: str, x, outs: tuple, ws, attrs: dict[str, Any]) -> None:
    """Run `op` over `x` into `outs` (its output arrays, None where omitted) by its route."""
    geo, route = _case(op, (x,), outs, attrs).chosen
    route.run(x, outs, geo, Scratch(ws, op), attrs)


def _rows_in_order(attrs, inputs, out) -> bool:
    """MaxPool's `Planes.direct`: a route that makes a plane's output rows in order, each right
    after reading its window's input rows (`PoolRoute.rows_in_order`), overwrites over its own
    input only rows already read when each output row of a plane ends no later than the first
    input row the next output row reads starts (checked on the first plane, where the output
    lies furthest into the input: each plane after it starts P_in - P_out bytes further ahead)."""
    x, y = inputs[0], out
    if x is None or y is None or len(x.shape) != 4 or len(y.shape) != 4:
        return False
    geo, route = PoolCase.of("MaxPool", x, y, attrs).chosen
    if geo is None or not route.rows_in_order or math.prod(y.shape[2:]) > math.prod(x.shape[2:]):
        return False
    (out_h, out_w), width = geo.out, x.shape[3]
    first_read = [max(0, oy * geo.strides[0] - geo.begin[0]) * width for oy in range(out_h)]
    return all((oy + 1) * out_w <= first_read[oy + 1] for oy in range(out_h - 1))


def max_pool_prepare(*_: object, **__: object) -> None:
    """MaxPool's prepare hook: its compiled loop is compiled when a session prepares."""
    jit_pool.warm()


@kernel(
    "MaxPool", workspace=route_workspace("MaxPool"), outputs="many", planes=Planes(direct=_rows_in_order),
    prepare=max_pool_prepare,
)  # fmt: skip
@small_ufunc_buffers(STRIDED_UFUNC_BUFFER)
def max_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None,
    storage_order=0, strides=None,
):  # fmt: skip
    attrs = dict(kernel_shape=kernel_shape, auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides,
                 storage_order=storage_order)  # fmt: skip
    run_route("MaxPool", x, tuple(out), ws, attrs)


@kernel("AveragePool", workspace=route_workspace("AveragePool"), planes=True)
@small_ufunc_buffers(STRIDED_UFUNC_BUFFER)
def average_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
    pads=None, strides=None,
):  # fmt: skip
    attrs = dict(kernel_shape=kernel_shape, auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides,
                 count_include_pad=count_include_pad)  # fmt: skip
    run_route("AveragePool", x, (out,), ws, attrs)


@kernel("LpPool", workspace=route_workspace("LpPool"))
@small_ufunc_buffers()
def lp_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, p=2, pads=None, strides=None,
):  # fmt: skip
    attrs = dict(kernel_shape=kernel_shape, auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides, p=p)
    run_route("LpPool", x, (out,), ws, attrs)


@kernel("GlobalLpPool")
@small_ufunc_buffers()
def global_lp_pool(x, *, out, p=2):
    run_route("GlobalLpPool", x, (out,), None, {"p": p})


@kernel(
    "GlobalAveragePool", planes=True, workspace=route_workspace("GlobalAveragePool"),
    bind=bind_route("GlobalAveragePool"),
)  # fmt: skip
@small_ufunc_buffers()
def global_average_pool(x, *, out, ws=None):
    run_route("GlobalAveragePool", x, (out,), ws, {})


@kernel("GlobalMaxPool", planes=True)
@small_ufunc_buffers()
def global_max_pool(x, *, out):
    run_route("GlobalMaxPool", x, (out,), None, {})
