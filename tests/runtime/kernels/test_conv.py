"""Conv and ConvTranspose beyond onnx's backend cases (those are in test_backend_cases).

Seeded random attributes (1-D to 3-D, pads, auto_pad, strides, dilations, groups) against
onnx.reference, and ConvTranspose against onnxruntime, each in whole images and in bands of
rows; Conv as one matmul per kernel tap (2-D, stride 1, ungrouped, at most half as many filters
as channels: DenseNet's 3x3 convs); and Conv's per-shape route cache (the same kernel called
with lists and tuples, shapes changing)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import TensorMeta
from runtime.kernels.conv.conv import conv, conv_workspace
from runtime.kernels.conv.routes import uses_taps
from runtime.kernels.window import window_geometry
from tests.runtime.kernels.harness import close, one_node, random_window, run_against_reference, run_kernel, run_ort


def _case(seed: int):
    rng = np.random.default_rng(1200 + seed)
    kernel = [int(k) for k in rng.integers(1, 5, 2)]
    if kernel == [1, 1]:
        kernel = [3, 3]
    attrs: dict = {"kernel_shape": kernel, "dilations": [int(d) for d in rng.integers(1, 3, 2)]}
    if seed % 4 == 3:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
    channels = int(rng.integers(4, 17))
    filters = int(rng.integers(1, channels // 2 + 1))
    x = rng.standard_normal((int(rng.integers(1, 3)), channels, *rng.integers(9, 20, 2))).astype(np.float32)
    w = rng.standard_normal((filters, channels, *kernel)).astype(np.float32)
    feeds = {"x": x, "w": w}
    if seed % 3:
        feeds["b"] = rng.standard_normal(filters).astype(np.float32)
    return feeds, attrs


@pytest.mark.parametrize("seed", range(16))
def test_conv_by_taps_against_reference(seed):
    feeds, attrs = _case(seed)
    model = one_node("Conv", feeds, **attrs)
    got, expected = run_against_reference(model, feeds)
    x, w = feeds["x"], feeds["w"]
    geo = window_geometry(x.shape, expected[0].shape, attrs["kernel_shape"], attrs.get("auto_pad", "NOTSET"),
                          attrs.get("pads"), None, attrs["dilations"])  # fmt: skip
    assert uses_taps(x.shape, w.shape, geo, 1)
    close(got, expected)


@pytest.mark.parametrize("seed", [0, 1, 5, 6])
def test_conv_by_taps_in_bands_against_reference(seed, monkeypatch):
    monkeypatch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 64)  # one output row per band
    monkeypatch.setattr("runtime.kernels.window.MIN_BAND_PIXELS", 1)  # bands as small as the budget says
    test_conv_by_taps_against_reference(seed)


@pytest.mark.parametrize("seed", range(40))
def test_conv_random_against_reference(seed):
    rng = np.random.default_rng(seed)
    rank = 3 if seed % 10 == 9 else 1 + seed % 2
    group = int(rng.choice([1, 1, 2, 3]))
    depthwise = seed % 7 == 0
    per_group_in = 1 if depthwise else int(rng.integers(1, 4))
    per_group_out = 1 if depthwise else int(rng.integers(1, 4))
    kernel, attrs = random_window(rng, rank)
    spatial = [int(s) for s in rng.integers(4, 9 if rank < 3 else 6, rank)]
    x = rng.standard_normal((int(rng.integers(1, 3)), group * per_group_in, *spatial)).astype(np.float32)
    w = rng.standard_normal((group * per_group_out, per_group_in, *kernel)).astype(np.float32)
    b = rng.standard_normal(group * per_group_out).astype(np.float32) if seed % 3 else None
    model = one_node("Conv", {"x": x, "w": w, "b": b}, group=group, **attrs)
    got, expected = run_against_reference(model, {"x": x, "w": w, **({"b": b} if b is not None else {})})
    close(got, expected)


@pytest.mark.parametrize("seed", [0, 3, 7, 14, 21, 22])
def test_conv_in_small_bands_against_reference(seed, monkeypatch):
    # Tiny band budgets force one output row (one channel, depthwise) per im2col band.
    monkeypatch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 64)
    monkeypatch.setattr("runtime.kernels.window.MIN_BAND_PIXELS", 1)  # bands as small as the budget says
    monkeypatch.setattr("runtime.kernels.conv.dense.DEPTHWISE_BLOCK_BYTES", 64)
    test_conv_random_against_reference(seed)


@pytest.mark.parametrize("seed", range(25))
def test_conv_transpose_random_against_onnxruntime(seed):
    # onnx.reference mixes up the weights' axes when group > 1, so onnxruntime is the oracle.
    rng = np.random.default_rng(200 + seed)
    rank = 3 if seed % 8 == 7 else 1 + seed % 2
    group = int(rng.choice([1, 2]))
    kernel = [int(k) for k in rng.integers(1, 4, rank)]
    strides = [int(s) for s in rng.integers(1, 4, rank)]
    dilations = [int(d) for d in rng.integers(1, 3, rank)]
    attrs: dict = {"strides": strides, "dilations": dilations, "group": group}
    spatial = [int(s) for s in rng.integers(2, 6, rank)]
    if seed % 3 == 0:
        # A shape the inputs can reach: the full transposed length less a little padding.
        full = [(n - 1) * st + (k - 1) * d + 1 for n, st, k, d in zip(spatial, strides, kernel, dilations, strict=True)]
        attrs["output_shape"] = [max(1, f - int(rng.integers(0, 2))) for f in full]
    else:
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
        attrs["output_padding"] = [
            int(rng.integers(0, min(s, d))) if max(s, d) > 1 else 0 for s, d in zip(strides, dilations, strict=True)
        ]
    x = rng.standard_normal((int(rng.integers(1, 3)), 2 * group, *spatial)).astype(np.float32)
    w = rng.standard_normal((2 * group, int(rng.integers(1, 3)), *kernel)).astype(np.float32)
    b = rng.standard_normal(w.shape[1] * group).astype(np.float32)
    feeds = {"x": x, "w": w, "b": b}
    model = one_node("ConvTranspose", feeds, **attrs)
    expected = run_ort(model, feeds)
    close(run_kernel(model, [x, w, b], like=expected), expected)


@pytest.mark.parametrize("seed", [0, 1, 4, 7, 9])
def test_conv_transpose_in_small_bands_against_onnxruntime(seed, monkeypatch):
    monkeypatch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 64)  # one input row per band
    monkeypatch.setattr("runtime.kernels.window.MIN_BAND_PIXELS", 1)  # bands as small as the budget says
    test_conv_transpose_random_against_onnxruntime(seed)


def _reference_conv(x, w, b, **attrs) -> np.ndarray:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info(n, f, a.shape) for n, a in (("x", x), ("w", w), ("b", b))],
        [helper.make_tensor_value_info("y", f, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    return ReferenceEvaluator(model).run(None, {"x": x, "w": w, "b": b})[0]


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((1, 8, 6, 6), (4, 8, 1, 1), {"strides": [1, 1]}),  # pointwise: one matmul
        ((2, 8, 7, 7), (6, 8, 1, 1), {"strides": [2, 2]}),  # strided 1x1: im2col
        ((1, 8, 9, 9), (4, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # taps
        ((1, 4, 9, 9), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # im2col, padded
        ((1, 6, 8, 8), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),  # depthwise
    ],
)
def test_conv_routes_match_reference_across_repeated_calls(x_shape, w_shape, attrs) -> None:
    """Each route twice, with attributes as lists then tuples, another shape between: the cached
    route of one shape never leaks into another."""
    rng = np.random.default_rng(len(x_shape) + w_shape[0])
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    for spatial in (x_shape[2], x_shape[2] + 2, x_shape[2]):
        x = rng.standard_normal((*x_shape[:2], spatial, spatial)).astype(np.float32)
        want = _reference_conv(x, w, b, **attrs)
        for form in (list, tuple):
            given = {k: form(v) if isinstance(v, list) else v for k, v in attrs.items()}
            metas = [TensorMeta(x.shape, x.dtype), TensorMeta(w.shape, w.dtype)]
            nbytes = conv_workspace(metas, [TensorMeta(want.shape, want.dtype)], **given)
            ws = np.empty(nbytes, np.uint8) if nbytes else None
            out = np.empty_like(want)
            conv(x, w, b, out=out, ws=ws, **given)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
