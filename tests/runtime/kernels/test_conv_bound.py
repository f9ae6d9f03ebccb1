"""Conv and ConvAct called through their binding (`PlaneWise.bind`, as a session prepares
each step) and called directly give the same bytes (to rounding where the bound call
multiplies in chunks), on every route (pointwise, im2col, taps, the depthwise routes,
Winograd, and the over-input columns and rows), and both match onnx.reference. Also: the
bound pointwise call allocates nothing beside its arguments, a bound call whose output is
over its input still takes the over-input route, maps large or deep enough to be multiplied
in `small_columns` or `small_rows` chunks (apart and over the input), and a depthwise bound
call over its own input."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import TensorMeta, get_kernel, loop_ufunc_buffers
from runtime.kernels.conv import jit_conv, winograd
from runtime.kernels.conv.routes import conv_route, writes_over_input
from tests.runtime.kernels.harness import conv_reference, peak_bytes

RNG = np.random.default_rng(907)

CASES = {  # route: (x shape, w shape, attrs)
    "pointwise": ((1, 8, 7, 6), (24, 8, 1, 1), {}),
    "pointwise_batch2": ((2, 8, 5, 4), (6, 8, 1, 1), {}),
    "pointwise_1x1_map": ((1, 96, 1, 1), (40, 96, 1, 1), {}),
    "pointwise_chunked": ((1, 32, 48, 48), (16, 32, 1, 1), {}),  # matmuls in `small_columns` chunks
    "pointwise_row_chunked": ((1, 64, 7, 7), (512, 64, 1, 1), {}),  # in `small_rows` chunks
    "im2col": ((1, 8, 9, 9), (12, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    # a stem: each band's matmul in `window.column_chunks`
    "im2col_chunked": ((1, 3, 112, 112), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "taps": ((1, 16, 9, 9), (6, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "winograd": ((1, 16, 16, 16), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "depthwise_3x3": ((1, 8, 12, 12), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 8}),
    "depthwise_5x5_s2": ((1, 16, 14, 14), (16, 1, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2], "group": 16}),
    "depthwise_wide": ((1, 64, 6, 6), (64, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 64}),
}
ACTS = {
    "": ({}, []),
    "Relu": ({"activation": "Relu"}, [("Relu", {})]),
    "HardSigmoid": (
        {"activation": "HardSigmoid", "alpha": 0.2, "beta": 0.5},
        [("HardSigmoid", {"alpha": 0.2, "beta": 0.5})],
    ),
}


def _kernel(act: str):
    kernel = get_kernel("ConvAct", "memplan") if act else get_kernel("Conv")
    assert kernel is not None and kernel.workspace is not None
    return kernel


def _arrays(x_shape, w_shape, bias: bool):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = (RNG.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = RNG.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    return x, w, b


def _metas(*arrays):
    return [None if a is None else TensorMeta(tuple(a.shape), a.dtype) for a in arrays]


# Python's own small objects of one call (kwargs dicts, Scratch objects: 1.5-4 KB) stay under this;
# the tensors of these tests (an operand numpy copies, a temp: 16 KB and more) do not.
CALL_OBJECTS = 8192


def _both(kernel, x, w, b, shape, attrs):
    """(direct call's output, bound call's output), each with its own declared workspace."""
    metas = _metas(x, w, b), _metas(np.empty(shape, np.float32))
    size = kernel.workspace(*metas, **attrs)
    outs = []
    for bind in (False, True):
        y = np.full(shape, np.nan, np.float32)
        ws = np.zeros(size, np.uint8)
        fn = kernel.bind(*metas, attrs).run if bind else kernel.fn
        with loop_ufunc_buffers():
            fn(x, w, b, out=y, ws=ws, **attrs)
        outs.append(y)
    return outs


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("case", list(CASES))
def test_bound_and_direct_calls_agree_with_the_reference(case, act, bias):
    x_shape, w_shape, conv_attrs = CASES[case]
    x, w, b = _arrays(x_shape, w_shape, bias)
    want = conv_reference(x, w, b, conv_attrs, ACTS[act][1])
    geo, path = conv_route(x.shape, w.shape, want.shape, conv_attrs)
    expected_path = {"winograd": "taps", "im2col_chunked": "im2col"}
    expected_path |= {k: "pointwise" for k in CASES if k.startswith("pointwise")}
    if not case.startswith("depthwise"):
        assert path in (expected_path.get(case, case), "im2col"), path
    if case == "winograd" and jit_conv.usable(x):
        assert winograd.takes(geo, x.shape, w.shape, 1, x.dtype)
    direct, bound = _both(_kernel(act), x, w, b, want.shape, {**conv_attrs, **ACTS[act][0]})
    if "chunked" in case:  # BLAS may sum a chunk's products in another order than the whole's
        np.testing.assert_allclose(bound, direct, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(bound, direct)
    np.testing.assert_allclose(direct, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["", "HardSigmoid"])
def test_the_bound_pointwise_call_allocates_nothing(act):
    if jit_conv.bias_act is None:
        pytest.skip("compiled loops off: the pointwise route is not bound apart")
    x, w, b = _arrays((1, 96, 7, 7), (576, 96, 1, 1), True)
    attrs = ACTS[act][0]
    y = np.empty((1, 576, 7, 7), np.float32)
    kernel = _kernel(act)
    metas = _metas(x, w, b), _metas(y)
    ws = np.zeros(kernel.workspace(*metas, **attrs), np.uint8)
    bound = kernel.bind(*metas, attrs).run
    if jit_conv.bias_act is not None:
        assert bound.__qualname__.startswith("bind_pointwise"), "the 1x1 conv was not bound apart"
    with loop_ufunc_buffers():
        bound(x, w, b, out=y, ws=ws, **attrs)  # warm
        peak = peak_bytes(lambda: bound(x, w, b, out=y, ws=ws, **attrs))
    assert peak < CALL_OBJECTS, f"{peak} bytes allocated beside the arguments"
    np.testing.assert_allclose(y, conv_reference(x, w, b, {}, ACTS[act][1]), rtol=1e-4, atol=1e-4)


OVER = {  # route over the input: (x shape, w shape, attrs)
    "columns_wider": ((1, 8, 28, 24), (24, 8, 1, 1), {}),
    "columns_narrower": ((2, 24, 14, 12), (8, 24, 1, 1), {}),
    "columns_chunked": ((1, 16, 48, 48), (96, 16, 1, 1), {}),  # the planes past the input in chunks
    "columns_chunked_narrower": ((1, 32, 48, 48), (16, 32, 1, 1), {}),
    "rows_3x3": ((1, 16, 9, 8), (6, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "rows_same_channels": ((2, 8, 12, 12), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
}


@pytest.mark.parametrize("act", ["", "Relu"])
@pytest.mark.parametrize("case", list(OVER))
def test_a_bound_call_over_its_own_input_matches_the_reference(case, act):
    x_shape, w_shape, conv_attrs = OVER[case]
    x, w, b = _arrays(x_shape, w_shape, True)
    want = conv_reference(x, w, b, conv_attrs, ACTS[act][1])
    assert writes_over_input(conv_attrs, [x, w, b], want)
    attrs = {**conv_attrs, **ACTS[act][0]}
    kernel = _kernel(act)
    metas = _metas(x, w, b), _metas(want)
    ws = np.zeros(kernel.workspace(*metas, **attrs), np.uint8)
    bound = kernel.bind(*metas, attrs).run
    if case.startswith("columns") and jit_conv.bias_act is not None:
        assert bound.__qualname__.startswith("bind_pointwise"), "the 1x1 conv was not bound apart"
    block = np.full(max(x.size, want.size), np.nan, np.float32)
    block[: x.size] = x.reshape(-1)
    xv, yv = block[: x.size].reshape(x.shape), block[: want.size].reshape(want.shape)
    with loop_ufunc_buffers():
        peak = peak_bytes(lambda: bound(xv, w, b, out=yv, ws=ws, **attrs))
    np.testing.assert_allclose(yv, want, rtol=1e-4, atol=1e-4)
    # Over its input through its own scratch: numpy's copy of an overlapping operand would show
    # here. (With compiled loops off the numpy route's bias pass buffers 8 KiB: not this binding's.)
    if jit_conv.bias_act is not None:
        assert peak < CALL_OBJECTS, f"{peak} bytes allocated beside the arguments"


DEPTHWISE_OVER = {  # a depthwise conv over its own input (its output no larger): (x shape, w shape, attrs)
    "one_image_s2": ((1, 16, 14, 14), (16, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 16}),
    "one_image_same": ((1, 24, 9, 9), (24, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 24}),
    "two_images_s2": ((2, 8, 12, 12), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 8}),
}


@pytest.mark.parametrize("act", ["", "Relu"])
@pytest.mark.parametrize("case", list(DEPTHWISE_OVER))
def test_the_bound_depthwise_call_over_its_own_input_matches_the_reference(case, act):
    x_shape, w_shape, conv_attrs = DEPTHWISE_OVER[case]
    x, w, b = _arrays(x_shape, w_shape, True)
    want = conv_reference(x, w, b, conv_attrs, ACTS[act][1])
    attrs = {**conv_attrs, **ACTS[act][0]}
    kernel = _kernel(act)
    metas = _metas(x, w, b), _metas(want)
    ws = np.zeros(kernel.workspace(*metas, **attrs), np.uint8)
    bound = kernel.bind(*metas, attrs).run
    if jit_conv.bias_act is not None:
        assert bound.__qualname__.startswith("bind_depthwise"), "the depthwise conv was not bound apart"
    block = np.full(x.size, np.nan, np.float32)
    block[:] = x.reshape(-1)
    xv, yv = block.reshape(x.shape), block[: want.size].reshape(want.shape)
    with loop_ufunc_buffers():
        bound(xv, w, b, out=yv, ws=ws, **attrs)
    np.testing.assert_allclose(yv, want, rtol=1e-4, atol=1e-4)


def test_small_chunks_keep_a_matmul_within_the_small_kernel_or_take_the_whole_map():
    from runtime.kernels.window import MIN_COLUMNS, MIN_ROWS, SMALL_GEMM, column_chunks, small_columns, small_rows

    width = small_columns(16, 32, 12544)
    assert width % 16 == 0 and width >= MIN_COLUMNS and 16 * 32 * width <= SMALL_GEMM < 16 * 32 * (width + 16)
    assert small_columns(16, 32, 1000) == 1000  # one chunk would hold the whole map
    assert small_columns(576, 96, 196) == 196  # chunks would be narrower than MIN_COLUMNS
    height = small_rows(512, 64, 49)
    assert MIN_ROWS <= height < 512 and height * 64 * 49 <= SMALL_GEMM < (height + 1) * 64 * 49
    assert small_rows(192, 1152, 49) == 192  # chunks would be thinner than MIN_ROWS
    chunks = column_chunks(32, 27, 6272, 12544)  # a stem's band of 56 rows of 112
    assert chunks[0][0] == 6272 and chunks[-1][1] == 12544
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:], strict=False)) and len(chunks) > 1
