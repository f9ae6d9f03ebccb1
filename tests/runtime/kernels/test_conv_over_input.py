"""A dense Conv (and ConvAct) written over its own input: the pixel-wise route of a 1x1 conv
and the row-lagged route of a KxK 'same' conv (`runtime.kernels.conv.over`). The output
starts at the input's first byte in one block of max(input, output) bytes, as the planner
places it; checked against onnx.reference with more and fewer output channels than input
channels, one and two batch items, one row or column per band (the orders a wrong lag
would corrupt) and whole bands, with and without a fused activation, with the workspace
the kernel declares and without one. Also: where the argument does not hold (stride 2,
N = 2 with Cout > Cin, groups, a smaller output) the kernel does not claim the route and
refuses its output over its input."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import TensorMeta, get_kernel, window
from runtime.kernels.conv import over as conv_over
from runtime.kernels.conv.over import over_route
from runtime.kernels.conv.routes import conv_route, writes_over_input
from runtime.kernels.window import window_geometry

RNG = np.random.default_rng(83)

CASES = [  # (batch, channels in, channels out, kernel, attrs)
    (1, 8, 24, 1, {}),  # MobileNetV2's expansion: a larger output
    (1, 24, 8, 1, {}),
    (2, 24, 8, 1, {}),
    (2, 8, 8, 1, {}),
    (1, 6, 16, 3, {"pads": [1, 1, 1, 1]}),
    (1, 16, 6, 3, {"pads": [1, 1, 1, 1]}),
    (2, 16, 6, 3, {"pads": [1, 1, 1, 1]}),
    (2, 8, 8, 3, {"pads": [1, 1, 1, 1]}),  # ResNet's 3x3: same shape in and out
    (1, 4, 10, 5, {"pads": [2, 2, 2, 2]}),
    (2, 10, 4, 5, {"pads": [2, 2, 2, 2]}),
    (2, 8, 4, 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    (1, 4, 6, 2, {"auto_pad": "SAME_UPPER"}),  # pads 0 before, 1 after
    (1, 4, 6, 2, {"auto_pad": "SAME_LOWER"}),  # pads 1 before, 0 after
    (1, 3, 5, 3, {"pads": [1, 2, 1, 0]}),  # 'same' with uneven pads (3 x 1 + 1 x 3 in effect)
]
ACTIVATIONS = {"": {}, "Relu": {"activation": "Relu"}, "Clip": {"activation": "Clip", "lo": 0.0, "hi": 6.0}}


def _reference(x, w, b, attrs, act: str) -> np.ndarray:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if act else "y"], **attrs)]
    inits = []
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif act == "Clip":
        inits = [
            helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]),
            helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0]),
        ]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in (("x", x), ("w", w), ("b", b))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, {"x": x, "w": w, "b": b})[0]


def _kernel(act: str):
    kernel = get_kernel("ConvAct", "memplan") if act else get_kernel("Conv")
    assert kernel is not None and kernel.workspace is not None
    return kernel


def _case(batch, cin, cout, k, attrs, spatial=(7, 6)):
    x = RNG.standard_normal((batch, cin, *spatial)).astype(np.float32)
    w = (RNG.standard_normal((cout, cin, k, k)) / k).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    return x, w, b


def _over_input(kernel, x, w, b, shape, attrs, scratch: bool) -> np.ndarray:
    """Run the kernel with its output from the first byte of a block holding `x`."""
    size = int(np.prod(shape))
    block = np.full(max(x.size, size), np.nan, np.float32)
    block[: x.size] = x.reshape(-1)
    xv, yv = block[: x.size].reshape(x.shape), block[:size].reshape(shape)
    metas_in = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    ws = np.empty(kernel.workspace(metas_in, [TensorMeta(tuple(shape), np.dtype(np.float32))], **attrs), np.uint8)
    kernel.fn(xv, w, b, out=yv, ws=ws if scratch else None, **attrs)
    return yv.copy()


@pytest.mark.parametrize("bands", ["one_row", "whole"])
@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize(
    ("batch", "cin", "cout", "k", "attrs"),
    CASES,
    ids=[f"{c[0]}x{c[1]}-{c[2]}-k{c[3]}-{i}" for i, c in enumerate(CASES)],
)
def test_dense_conv_over_its_own_input_matches_the_reference(batch, cin, cout, k, attrs, act, bands, monkeypatch):
    if bands == "one_row":
        monkeypatch.setattr(window, "IM2COL_BLOCK_BYTES", 1)
        monkeypatch.setattr(window, "MIN_BAND_PIXELS", 1)  # bands as small as the budget says
        monkeypatch.setattr(conv_over, "COLUMNS_BYTES", 1)
    x, w, b = _case(batch, cin, cout, k, attrs)
    want = _reference(x, w, b, attrs, act)
    assert want.shape[2:] == x.shape[2:]
    kernel = _kernel(act)
    assert writes_over_input(attrs, [x, w, b], want)
    got = _over_input(kernel, x, w, b, want.shape, {**attrs, **ACTIVATIONS[act]}, scratch=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("batch", "cin", "cout", "k", "attrs"), [CASES[0], CASES[6], CASES[9]], ids=["1x1", "3x3", "5x5"]
)
def test_without_a_workspace_the_routes_allocate_their_scratch(batch, cin, cout, k, attrs):
    x, w, b = _case(batch, cin, cout, k, attrs, spatial=(12, 9))
    want = _reference(x, w, b, attrs, "")
    got = _over_input(_kernel(""), x, w, b, want.shape, attrs, scratch=False)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_routes_are_right_on_separate_memory_too(k, monkeypatch):
    monkeypatch.setattr(window, "IM2COL_BLOCK_BYTES", 1)
    monkeypatch.setattr(window, "MIN_BAND_PIXELS", 1)  # bands as small as the budget says
    attrs = {"pads": [k // 2] * 4}
    x, w, b = _case(2, 6, 4, k, attrs, spatial=(9, 5))
    want = _reference(x, w, b, attrs, "")
    geo = window_geometry(x.shape, want.shape, (k, k), "NOTSET", attrs["pads"], None, None)
    out = np.full_like(want, np.nan)
    scratch = conv_over.Scratch(None, "test")
    route = conv_over.OVER_COLUMNS if k == 1 else conv_over.OVER_ROWS
    route.run(x, w, b, out, geo, None, scratch)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_a_not_aliased_conv_keeps_its_usual_route():
    """The over routes run only where output and input overlap: apart, the kernel takes its
    usual route (here the one with a padded image, which the over route never builds)."""
    attrs = {"pads": [1, 1, 1, 1]}
    x, w, b = _case(1, 16, 4, 3, attrs)
    want = _reference(x, w, b, attrs, "")
    kernel = _kernel("")
    _, path = conv_route(x.shape, w.shape, want.shape, {"pads": attrs["pads"]})
    assert path == "taps"
    out = np.empty_like(want)
    metas_in = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    ws = np.empty(kernel.workspace(metas_in, [TensorMeta(want.shape, want.dtype)], **attrs), np.uint8)
    kernel.fn(x, w, b, out=out, ws=ws, **attrs)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


REFUSED = [  # (x shape, w shape, y shape, attrs, why)
    ((1, 8, 8, 8), (8, 8, 3, 3), (1, 8, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "stride 2"),
    ((1, 8, 8, 8), (8, 8, 1, 1), (1, 8, 4, 4), {"strides": [2, 2]}, "1x1 stride 2"),
    ((2, 4, 6, 6), (8, 4, 1, 1), (2, 8, 6, 6), {}, "N=2, Cout > Cin (1x1)"),
    ((2, 4, 6, 6), (8, 4, 3, 3), (2, 8, 6, 6), {"pads": [1, 1, 1, 1]}, "N=2, Cout > Cin (3x3)"),
    ((1, 8, 6, 6), (8, 4, 3, 3), (1, 8, 6, 6), {"pads": [1, 1, 1, 1], "group": 2}, "group 2"),
    ((1, 8, 6, 6), (8, 8, 3, 3), (1, 8, 4, 4), {}, "unpadded 3x3: a smaller output"),
]


@pytest.mark.parametrize(("xs", "ws", "ys", "attrs", "why"), REFUSED, ids=[r[4] for r in REFUSED])
def test_the_route_is_refused_where_the_argument_does_not_hold(xs, ws, ys, attrs, why):
    f32 = np.dtype(np.float32)
    metas = [TensorMeta(xs, f32), TensorMeta(ws, f32), None]
    y = TensorMeta(ys, f32)
    assert not writes_over_input(attrs, metas, y), why
    geo = window_geometry(
        xs, ys, ws[2:], attrs.get("auto_pad", "NOTSET"), attrs.get("pads"), attrs.get("strides"), None
    )
    assert over_route(xs, ws, ys, attrs.get("group", 1), geo) is None
    kernel = get_kernel("Conv")
    assert kernel is not None and kernel.planes is not None and not kernel.planes.overlaps(attrs, metas, y)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    block = np.zeros(max(x.size, int(np.prod(ys))), np.float32)
    block[: x.size] = x.reshape(-1)
    with pytest.raises(ValueError, match="plane-wise"):
        kernel.fn(block[: x.size].reshape(xs), w, None, out=block[: int(np.prod(ys))].reshape(ys), ws=None, **attrs)


def test_the_workspace_covers_the_larger_of_both_routes():
    f32 = np.dtype(np.float32)
    kernel = _kernel("")
    # A 1x1 conv's usual route needs no scratch; over its input it needs one chunk of columns.
    pointwise = [TensorMeta((1, 256, 28, 28), f32), TensorMeta((64, 256, 1, 1), f32), None]
    assert kernel.workspace(pointwise, [TensorMeta((1, 64, 28, 28), f32)]) == 64 * 784 * 4  # the image's columns
    # One item, more output channels: planes past the input need no chunk, so 64 rows, not 256.
    spilling = [TensorMeta((1, 64, 56, 56), f32), TensorMeta((256, 64, 1, 1), f32), None]
    assert kernel.workspace(spilling, [TensorMeta((1, 256, 56, 56), f32)]) == conv_over.COLUMNS_BYTES
    assert conv_over.OVER_COLUMNS.layout((1, 64, 56, 56), (256, 64, 1, 1), f32, None)[0][0] == (64, 1024)
    apart = [TensorMeta((2, 64, 28, 28), f32), TensorMeta((256, 64, 1, 1), f32), None]
    assert kernel.workspace(apart, [TensorMeta((2, 256, 28, 28), f32)]) == 0  # no route over the input


def _random_case(rng: np.random.Generator):
    """A random conv the over routes accept: one item with any channels, or two with fewer out."""
    batch = int(rng.integers(1, 3))
    cin = int(rng.integers(1, 9))
    cout = int(rng.integers(1, 13)) if batch == 1 else int(rng.integers(1, cin + 1))
    k = int(rng.choice([1, 2, 3, 5]))
    dilation = int(rng.integers(1, 3)) if k > 1 else 1
    extent = (k - 1) * dilation
    top, left = int(rng.integers(0, extent + 1)), int(rng.integers(0, extent + 1))
    attrs = {"pads": [top, left, extent - top, extent - left], "dilations": [dilation, dilation]}
    spatial = (int(rng.integers(1, 12)), int(rng.integers(1, 12)))
    return batch, cin, cout, k, attrs, spatial


@pytest.mark.parametrize("seed", range(12))
def test_random_convs_over_their_own_input_match_the_reference(seed, monkeypatch):
    rng = np.random.default_rng(1000 + seed)
    monkeypatch.setattr(window, "IM2COL_BLOCK_BYTES", int(rng.choice([1, 600, 1 << 20])))
    monkeypatch.setattr(window, "MIN_BAND_PIXELS", 1)  # bands as small as the budget says
    monkeypatch.setattr(conv_over, "COLUMNS_BYTES", int(rng.choice([1, 100, 1 << 18])))
    for _ in range(4):
        batch, cin, cout, k, attrs, spatial = _random_case(rng)
        x, w, b = _case(batch, cin, cout, k, attrs, spatial=spatial)
        want = _reference(x, w, b, attrs, "")
        assert writes_over_input(attrs, [x, w, b], want), (batch, cin, cout, k, attrs, spatial)
        got = _over_input(_kernel(""), x, w, b, want.shape, attrs, scratch=True)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str((batch, cin, cout, k, attrs, spatial)))
