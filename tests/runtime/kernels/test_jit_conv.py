"""Dense Conv's compiled im2col and epilogues (`runtime.kernels.conv.jit_conv`) against onnx.reference:
1x1, 3x3, 7x7 stride 2 pad 3, strided 1x1, dilation, groups 1 and 2, batches 1 and 2, with and
without bias, for Conv and each activation ConvAct fuses; the row-lagged route over the Conv's
own input; PointwiseConvAdd apart from and over its residual. Each also with the numpy route
forced (the compiled loops set to None), scratch filled with NaN so that a value read but never
written shows."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime.kernels import TensorMeta, get_kernel, window
from runtime.kernels.conv import jit_conv
from runtime.kernels.window import window_geometry
from tests.runtime.kernels.harness import CONV_ACT_IDS, CONV_ACTS, call_conv, conv_data, conv_reference

ACTS, ACT_IDS = CONV_ACTS, CONV_ACT_IDS

SHAPES = [  # (x shape, w shape, Conv attributes)
    ((1, 6, 9, 10), (8, 6, 1, 1), {}),
    ((2, 5, 11, 9), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 3, 23, 20), (6, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ((2, 8, 13, 12), (6, 8, 1, 1), {"strides": [2, 2]}),
    ((1, 4, 12, 13), (6, 4, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ((2, 6, 10, 9), (8, 3, 3, 3), {"pads": [1, 0, 2, 1], "group": 2}),
    ((1, 4, 9, 11), (5, 4, 3, 2), {"strides": [2, 3], "pads": [0, 1, 2, 0]}),
]
SHAPE_IDS = ["1x1", "3x3", "7x7-s2-p3", "1x1-s2", "dilated", "groups2", "asymmetric"]

needs_jit = pytest.mark.skipif(jit_conv.im2col_band is None, reason="compiled loops off or numba missing")


@pytest.fixture(params=["compiled", "numpy"])
def route(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setattr(jit_conv, "im2col_band", None)  # every dense route falls back to numpy
    elif jit_conv.im2col_band is None:
        pytest.skip("compiled loops off or numba missing")
    return request.param


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(("act", "nodes"), ACTS, ids=ACT_IDS)
def test_conv_and_conv_act_match_theconv_reference(x_shape, w_shape, attrs, act, nodes, bias, route):
    x, w, b = conv_data(x_shape, w_shape, bias, 4200)
    want = conv_reference(x, w, b, attrs, nodes)
    got = np.full(want.shape, np.nan, np.float32)
    call_conv("ConvAct" if act else "Conv", x, w, b, got, {**attrs, **act})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("act", "nodes"), ACTS[:3] + ACTS[-1:], ids=ACT_IDS[:3] + ACT_IDS[-1:])
@pytest.mark.parametrize("kernel", [1, 3], ids=["1x1", "3x3"])
def test_over_its_own_input_matches_theconv_reference(kernel, act, nodes, route):
    """Output from the input's first byte: the pixel-wise (1x1) or row-lagged (3x3) route,
    with the band's bias and activation in one compiled pass; small bands, so that rows wait."""
    x, w, b = conv_data((1, 8, 13, 11), (6, 8, kernel, kernel), True, 4200)
    attrs = {"pads": [kernel // 2] * 4} if kernel > 1 else {}
    want = conv_reference(x, w, b, attrs, nodes)
    block = np.zeros(x.size, np.float32)
    block[:] = x.reshape(-1)
    view_x = block.reshape(x.shape)
    out = block[: want.size].reshape(want.shape)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 8 * 9 * 11 * 4 * 2)  # two rows a band
        patch.setattr("runtime.kernels.window.MIN_BAND_PIXELS", 1)  # bands as small as the budget says
        call_conv("ConvAct" if act else "Conv", view_x, w, b, out, {**attrs, **act})
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("over_residual", [False, True], ids=["apart", "over-residual"])
@pytest.mark.parametrize(("act", "nodes"), ACTS, ids=ACT_IDS)
@pytest.mark.parametrize("batch", [1, 2])
def test_pointwise_conv_add_matches_theconv_reference(batch, act, nodes, over_residual, bias, route):
    x, w, b = conv_data((batch, 6, 9, 7), (10, 6, 1, 1), bias, 4201)
    residual = np.random.default_rng(5).standard_normal((batch, 10, 9, 7)).astype(np.float32)
    want = conv_reference(x, w, b, {}, nodes, residual=residual)
    r = residual.copy()
    out = r if over_residual else np.full(want.shape, np.nan, np.float32)
    kernel = get_kernel("PointwiseConvAdd", "memplan")
    assert kernel is not None and kernel.workspace is not None
    bias_in = b if b is not None else None
    metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, x, r)]
    size = kernel.workspace(metas, [TensorMeta(out.shape, out.dtype)], **act)
    ws = np.full(size // 4 + 1, np.nan, np.float32).view(np.uint8)[:size]
    kernel.fn(x, w, bias_in, r, out=out, ws=ws, **act)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


@needs_jit
def test_the_compiled_im2col_keeps_nan_and_infinities_and_writes_zeros_outside():
    x = np.arange(2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6)
    x[0, 1, 2], x[1, 3, 4], x[1, 0, 0] = np.nan, np.inf, -np.inf
    from runtime.kernels.window import pad_into, window_geometry, windows

    geo = window_geometry((1, *x.shape), (1, 1, 3, 3), (3, 3), "NOTSET", [2, 1, 0, 2], [2, 2], [1, 1])
    col = np.full(2 * 9 * 3 * 3, np.nan, np.float32)
    jit_conv.im2col_into(x, col, 0, 3, geo)
    padded = np.zeros((2, 5 + 2, 6 + 3), np.float32)
    pad_into(padded, x, geo, 0)
    want = windows(padded, geo).transpose(0, 3, 4, 1, 2)
    np.testing.assert_array_equal(col.reshape(2, 3, 3, 3, 3), want)


def test_the_compiled_loops_are_none_when_off_and_the_routes_say_so(monkeypatch):
    from runtime.kernels.window import window_geometry

    geo = window_geometry((1, 3, 8, 8), (1, 4, 8, 8), (3, 3), "NOTSET", [1, 1, 1, 1], None, None)
    x = np.zeros((1, 3, 8, 8), np.float32)
    monkeypatch.setattr(jit_conv, "im2col_band", None)
    assert not jit_conv.takes_im2col(geo, np.dtype(np.float32)) and not jit_conv.usable(x)
    monkeypatch.undo()
    if jit_conv.im2col_band is not None:
        assert jit_conv.takes_im2col(geo, np.dtype(np.float32)) and jit_conv.usable(x)
        assert not jit_conv.takes_im2col(geo, np.dtype(np.float64))
        assert not jit_conv.usable(x.astype(np.float64))


def test_a_band_spans_at_least_min_band_pixels_within_the_image():
    from runtime.kernels import window

    assert window.band_rows(1, 80, 6) == 2  # 80-wide rows: two a band (160 pixels)
    assert window.band_rows(12, 14, 14) == 7  # two bands of 7 rows, not 12 and 2
    assert window.band_rows(4, 200, 9) == 3  # three bands of 3, not 4, 4 and 1
    assert window.band_rows(3, 56, 56) == 3  # the budget's rows already span enough
    assert window.band_rows(1, 7, 5) == 5  # never more rows than the image has
    assert window.band_rows(1, 400, 9) == 1


@pytest.mark.parametrize("over", [False, True], ids=["apart", "over-input"])
def test_bands_raised_to_min_band_pixels_match_theconv_reference(over, route, monkeypatch):
    """A one-row budget on 20-wide rows: eight rows a band (160 pixels), so that three bands
    and a last short one run (and, over the input, rows wait in the hold)."""
    from runtime.kernels import window

    monkeypatch.setattr(window, "IM2COL_BLOCK_BYTES", 1)
    x, w, b = conv_data((1, 6, 27, 20), (5, 6, 3, 3), True, 4200)
    attrs = {"pads": [1, 1, 1, 1], "activation": "Relu"}
    want = conv_reference(x, w, b, {"pads": [1, 1, 1, 1]}, [("Relu", {})])
    if over:
        block = x.reshape(-1).copy()
        got, source = block[: want.size].reshape(want.shape), block.reshape(x.shape)
    else:
        got, source = np.full(want.shape, np.nan, np.float32), x
    call_conv("ConvAct", source, w, b, got, attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


_CHILD = """
import sys
import onnx
import runtime
from runtime.kernels.conv import jit_conv

graph = runtime.load_model(onnx.load(sys.argv[1]))
runtime.memory_problem(graph, runtime.MemoryOptions())
print(len(jit_conv.im2col_band.signatures))
session = runtime.Session(graph, "greedy_by_size").prepare()
before = len(jit_conv.im2col_band.signatures), len(jit_conv.bias_act.signatures)
session.run({"x": __import__("numpy").ones((1, 3, 9, 9), "float32")})
print(before[0], before == (len(jit_conv.im2col_band.signatures), len(jit_conv.bias_act.signatures)))
"""


@needs_jit
def test_a_session_compiles_the_loops_when_it_prepares_and_planning_alone_does_not(tmp_path):
    import os
    import subprocess
    import sys

    import onnx

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 9, 9])],
        [w],
    )
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, cwd=root, check=True
    )
    planned, prepared = done.stdout.split("\n")[:2]
    assert planned == "0"  # planning compiled nothing
    assert prepared.split()[0] != "0" and prepared.split()[1] == "True"  # prepare did; the run added nothing


@needs_jit
@pytest.mark.parametrize(("act", "nodes"), ACTS[:2], ids=ACT_IDS[:2])
@pytest.mark.parametrize(
    ("size", "through_phases"), [(61, True), (58, True), (40, False)], ids=["odd", "even", "narrow"]
)
def test_a_3x3_stride_2_stem_of_wide_rows_goes_through_the_phases(size, through_phases, act, nodes, monkeypatch):
    from runtime.kernels.conv import jit_phases

    called = []
    real = jit_phases.im2col_stride2
    monkeypatch.setattr(jit_phases, "im2col_stride2", lambda *a: (called.append(1), real(*a)))
    monkeypatch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 4096)  # several bands, a shorter last one
    attrs = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    x, w, b = conv_data((1, 3, size, size + 1), (16, 3, 3, 3), True, size)
    want = conv_reference(x, w, b, attrs, nodes)
    assert (want.shape[-1] >= jit_conv.WIDE_ROWS) == through_phases
    got = np.full(want.shape, np.nan, np.float32)
    call_conv("ConvAct" if act else "Conv", x, w, b, got, {**attrs, **act})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert bool(called) == through_phases


@needs_jit
def test_a_stem_through_the_phases_takes_a_quarter_of_the_band_bytes_and_deeper_convs_all():
    geo = window_geometry((1, 3, 224, 224), (1, 16, 112, 112), (3, 3), "NOTSET", [1] * 4, [2, 2], None)
    assert jit_conv.takes_phases(geo, np.dtype(np.float32))
    assert jit_conv.band_bytes(geo, 3, np.dtype(np.float32)) == window.IM2COL_BLOCK_BYTES // 4
    assert jit_conv.band_bytes(geo, 64, np.dtype(np.float32)) == window.IM2COL_BLOCK_BYTES
    narrow = window_geometry((1, 3, 40, 40), (1, 16, 20, 20), (3, 3), "NOTSET", [1] * 4, [2, 2], None)
    assert jit_conv.band_bytes(narrow, 3, np.dtype(np.float32)) == window.IM2COL_BLOCK_BYTES
