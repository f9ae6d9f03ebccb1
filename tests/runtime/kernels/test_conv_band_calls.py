"""The bound calls a tiled stage's band steps take (a band of one to a few output rows): the
compiled im2col route, the depthwise loop, a 1x1 conv over its own input and PointwiseConvAdd
with and without a workspace (scratch outside the arena), and TileRows. Each matches its
oracle (onnx.reference's Conv, numpy slicing for TileRows), takes its own bound route, and
once primed (as a session does at prepare) allocates nothing on a call."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import MEMPLAN_DOMAIN, TensorMeta, get_kernel, loop_ufunc_buffers
from runtime.kernels.conv import jit_conv
from runtime.kernels.conv.depthwise import compiled_channels_last
from runtime.kernels.conv.routes import conv_route
from runtime.tiling import rows as tile_rows
from tests.runtime.kernels.harness import close, conv_reference, peak_bytes

RNG = np.random.default_rng(29)
COMPILED = jit_conv.bias_act is not None
# Python's own small objects of one call (a tuple, a view's header) stay under this; an im2col
# band, a sub-plane block or a chunk of columns (several KB here) does not.
CALL_OBJECTS = 2048

BANDS = {  # a band step of a tiled stage: (x shape, w shape, attrs, route)
    "stem_stride2": ((1, 3, 5, 30), (16, 3, 3, 3), {"strides": [2, 2]}, "im2col"),  # through the phases
    "stride1_side_pads": ((1, 6, 3, 14), (10, 6, 3, 3), {"pads": [0, 1, 0, 1]}, "im2col"),
    "grouped": ((1, 8, 4, 9), (8, 4, 3, 3), {"group": 2, "pads": [0, 1, 0, 1]}, "im2col"),
    "depthwise": ((1, 24, 3, 20), (24, 1, 3, 3), {"group": 24, "pads": [0, 1, 0, 1]}, "depthwise_rows"),
    "depthwise_stride2": ((1, 16, 3, 16), (16, 1, 3, 3), {"group": 16, "strides": [2, 2], "pads": [0, 0, 0, 1]}, None),
    # one output row of many channels: channels-last (`depthwise.ONE_ROW_FROM`)
    "depthwise_one_row": ((1, 128, 3, 12), (128, 1, 3, 3), {"group": 128, "pads": [0, 1, 0, 1]}, None),
}
ACTS = {"": ({}, []), "Clip": ({"activation": "Clip", "lo": 0.0, "hi": 6.0}, [("Clip", {})])}


def _arrays(x_shape, w_shape):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = (RNG.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    return x, w, RNG.standard_normal(w_shape[0]).astype(np.float32)


def _metas(*arrays):
    return [None if a is None else TensorMeta(tuple(a.shape), a.dtype) for a in arrays]


def _bound(op: str, attrs: dict, inputs: list, out: np.ndarray):
    kernel = get_kernel(op, MEMPLAN_DOMAIN) if op in ("ConvAct", "PointwiseConvAdd") else get_kernel(op)
    assert kernel is not None and kernel.bind is not None
    if kernel.prepare is not None:  # as a session prepares: the compiled loops loaded here, not in a call
        kernel.prepare(_metas(*inputs), _metas(out), **attrs)
    made = kernel.bind(_metas(*inputs), _metas(out), attrs)
    assert made is not None, f"{op} was not bound apart for {[a.shape for a in inputs]}"
    return kernel, made


@pytest.mark.parametrize("workspace", [True, False], ids=["workspace", "no_workspace"])
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("case", list(BANDS))
def test_a_band_step_takes_its_bound_route_and_matches_the_reference(case, act, workspace):
    if not COMPILED:
        pytest.skip("compiled loops off: band steps take the general call")
    x_shape, w_shape, conv_attrs, route = BANDS[case]
    x, w, b = _arrays(x_shape, w_shape)
    want = conv_reference(x, w, b, conv_attrs, ACTS[act][1])
    geo, name = conv_route(x.shape, w.shape, want.shape, conv_attrs)
    assert route is None or name == route
    if case == "depthwise_one_row":
        assert compiled_channels_last(x.shape[1], geo)
    attrs = {**conv_attrs, **ACTS[act][0]}
    op = "ConvAct" if act else "Conv"
    y = np.full(want.shape, np.nan, np.float32)
    kernel, made = _bound(op, attrs, [x, w, b], y)
    expected = "bind_im2col" if route == "im2col" else "bind_depthwise"
    assert made.run.__qualname__.startswith(expected) and made.prime is not None
    ws = np.zeros(kernel.workspace(_metas(x, w, b), _metas(y), **attrs), np.uint8) if workspace else None
    with loop_ufunc_buffers():
        made.prime(x, w, b, out=y, ws=ws)  # a session's prepare: scratch views (or blocks) made here
        peak = peak_bytes(lambda: made.run(x, w, b, out=y, ws=ws))
    close([y], [want], what=f"{case} {act}")
    assert peak < CALL_OBJECTS, f"{peak} bytes allocated by a primed call"
    y2 = np.full(want.shape, np.nan, np.float32)  # other arrays: made again for them, same answer
    with loop_ufunc_buffers():
        made.run(x.copy(), w, b, out=y2, ws=ws)
    np.testing.assert_array_equal(y2, y)


def test_a_pointwise_band_over_its_input_without_a_workspace_is_bound_and_allocates_once():
    if not COMPILED:
        pytest.skip("compiled loops off")
    x, w, b = _arrays((1, 16, 1, 40), (48, 16, 1, 1))
    want = conv_reference(x, w, b, {}, [("Relu", {})])
    block = np.full(want.size, np.nan, np.float32)  # the output starts at the input's first byte
    xv, yv = block[: x.size].reshape(x.shape), block.reshape(want.shape)
    xv[...] = x
    _, made = _bound("ConvAct", {"activation": "Relu"}, [xv, w, b], yv)
    assert made.run.__qualname__.startswith("bind_pointwise") and made.prime is not None
    with loop_ufunc_buffers():
        made.prime(xv, w, b, out=yv, ws=None)
        peak = peak_bytes(lambda: made.run(xv, w, b, out=yv, ws=None))
    close([yv], [want])
    assert peak < CALL_OBJECTS, f"{peak} bytes allocated by a primed call"


def test_a_residual_band_without_a_workspace_is_bound_and_allocates_once():
    if not COMPILED:
        pytest.skip("compiled loops off")
    x, w, b = _arrays((1, 32, 1, 28), (8, 32, 1, 1))
    r = RNG.standard_normal((1, 8, 1, 28)).astype(np.float32)
    want = conv_reference(x, w, b, {}, [], residual=r)
    y = np.full(want.shape, np.nan, np.float32)
    _, made = _bound("PointwiseConvAdd", {}, [x, w, b, r], y)
    assert made.prime is not None
    made.prime(x, w, b, r, out=y, ws=None)
    peak = peak_bytes(lambda: made.run(x, w, b, r, out=y, ws=None))
    close([y], [want])
    assert peak < CALL_OBJECTS, f"{peak} bytes allocated by a primed call"


@pytest.mark.parametrize("axis", [2, 1])
@pytest.mark.parametrize("columns", [(0, 0), (1, 2)])
def test_tile_rows_bound_gathers_the_rows_of_its_window(axis, columns):
    whole = RNG.standard_normal((1, 3, 12, 5) if axis == 2 else (1, 12, 5, 3)).astype(np.float32)
    if axis == 1 and columns != (0, 0):
        pytest.skip("zero columns are a convolution's, on NCHW maps")
    spans = [(0, 4), (3, 8), (8, 12)]  # tiles of the map, the second overlapping the first
    sources = [np.take(whole, range(a, z), axis=axis) for a, z in spans]
    first, height = 2, 7  # the window: rows [2, 9)
    want = np.take(whole, range(first, first + height), axis=axis)
    if columns != (0, 0):
        want = np.pad(want, [(0, 0)] * 3 + [columns])
    out = np.full(want.shape, np.nan, np.float32)
    attrs = {"starts": [a for a, _ in spans], "first": first, "columns": list(columns), "axis": axis}
    kernel = get_kernel(tile_rows.OP_TYPE, MEMPLAN_DOMAIN)
    assert kernel is not None and kernel.bind is not None
    made = kernel.bind(_metas(*sources), _metas(out), attrs)
    assert made is not None and made.prime is not None
    made.prime(*sources, out=out)
    made.run(*sources, out=out)
    np.testing.assert_array_equal(out, want)
    out[...] = np.nan  # a second run writes every element again, the zero columns too
    made.run(*sources, out=out)
    np.testing.assert_array_equal(out, want)
    general = np.full(want.shape, np.nan, np.float32)
    kernel.fn(*sources, out=general, **attrs)
    np.testing.assert_array_equal(general, want)
