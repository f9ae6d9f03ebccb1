"""A depthwise Conv (and ConvAct) written over its own input without a chunk through scratch:
on the banded rows, channels-last and depthwise im2col routes the kernel reads each channel
block (channels-last: the whole image) before writing that block's output, so `planes` calls it on the memory as it is, one batch item at
a time. Checked against onnx.reference over the input's own bytes: batches of 3, one channel
per block (the orders a wrong overlap would corrupt), padded and unpadded, smaller and equal
outputs; the workspace then holds no chunk; the other routes still go through the chunk."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import TensorMeta, get_kernel, planes
from runtime.kernels.conv.conv import conv_workspace
from runtime.kernels.conv.routes import conv_route

RNG = np.random.default_rng(61)

CASES = [  # (spatial, kernel, attrs, route)
    ((14, 14), 3, {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "depthwise_rows"),
    ((14, 14), 5, {"strides": [1, 1], "pads": [2, 2, 2, 2]}, "depthwise_rows"),
    ((12, 12), 3, {"strides": [1, 1]}, "depthwise_rows"),  # unpadded: a smaller output
    ((30, 30), 3, {"strides": [1, 1], "pads": [1, 1, 1, 1]}, "depthwise_taps"),  # wide 3x3: im2col
    ((32, 32), 3, {"strides": [1, 1]}, "depthwise_taps"),  # unpadded: windows read the input itself
]


def _reference(x, w, b, attrs) -> np.ndarray:
    names = [("x", x), ("w", w), ("b", b)]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=x.shape[1], **attrs)
    graph = helper.make_graph(
        [node],
        "dw",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, {"x": x, "w": w, "b": b})[0]


def _workspace(op: str, x, w, b, want, attrs) -> int:
    kernel = get_kernel(op, "memplan" if op == "ConvAct" else "")
    assert kernel is not None and kernel.workspace is not None
    metas_in = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    return kernel.workspace(metas_in, [TensorMeta(want.shape, want.dtype)], group=x.shape[1], **attrs)


def _over_input(op: str, x, w, b, shape, attrs, monkeypatch) -> np.ndarray:
    """Run `op` with its output over a copy of `x`'s bytes; chunks of scratch are refused."""
    kernel = get_kernel(op, "memplan" if op == "ConvAct" else "")
    assert kernel is not None
    memory = x.copy()
    y = memory.reshape(-1)[: int(np.prod(shape))].reshape(shape)

    def no_chunk(*args, **kwargs):
        raise AssertionError("the chunked path ran")

    monkeypatch.setattr(planes, "_in_place", no_chunk)
    ws = np.empty(_workspace(op, x, w, b, y, attrs), np.uint8)
    kernel.fn(memory, w, b, out=y, ws=ws, group=x.shape[1], **attrs)
    return y


@pytest.mark.parametrize("blocks", ["whole", "one_channel"])
@pytest.mark.parametrize(("spatial", "k", "attrs", "route"), CASES, ids=[f"{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_depthwise_conv_over_its_own_input_matches_the_reference(spatial, k, attrs, route, blocks, monkeypatch):
    if blocks == "one_channel":
        monkeypatch.setattr("runtime.kernels.conv.depthwise.ROWS_BLOCK_BYTES", 4)
        monkeypatch.setattr("runtime.kernels.conv.dense.DEPTHWISE_BLOCK_BYTES", 4)
    c = 5
    x = RNG.standard_normal((3, c, *spatial)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    want = _reference(x, w, b, attrs)
    _, path = conv_route(x.shape, w.shape, want.shape, {**attrs, "group": c})
    assert path == route
    got = _over_input("Conv", x, w, b, want.shape, attrs, monkeypatch)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


WIDE = [  # (spatial, kernel, attrs): many channels over small maps run channels-last
    ((7, 7), 5, {"strides": [1, 1], "pads": [2, 2, 2, 2]}),
    ((13, 11), 3, {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((9, 9), 3, {"strides": [1, 1]}),  # unpadded: a smaller output
]


@pytest.mark.parametrize("op", ["Conv", "ConvAct"])
@pytest.mark.parametrize(("spatial", "k", "attrs"), WIDE, ids=["same", "strided", "smaller"])
def test_channels_last_over_its_own_input_matches_the_reference(spatial, k, attrs, op, monkeypatch):
    c = 200
    x = RNG.standard_normal((3, c, *spatial)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    want = _reference(x, w, b, attrs)
    _, path = conv_route(x.shape, w.shape, want.shape, {**attrs, "group": c})
    assert path == "depthwise_channels_last"
    act = {"activation": "Relu"} if op == "ConvAct" else {}
    got = _over_input(op, x, w, b, want.shape, {**attrs, **act}, monkeypatch)
    np.testing.assert_allclose(got, np.maximum(want, 0) if act else want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("spatial", "k", "attrs", "route"), CASES[:4], ids=[c[3] for c in CASES[:4]])
def test_fused_conv_act_over_its_own_input_matches_the_reference(spatial, k, attrs, route, monkeypatch):
    c = 4
    x = RNG.standard_normal((2, c, *spatial)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    want = np.clip(_reference(x, w, b, attrs), 0.0, 6.0)
    act = {"activation": "Clip", "lo": 0.0, "hi": 6.0}
    got = _over_input("ConvAct", x, w, b, want.shape, {**attrs, **act}, monkeypatch)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_direct_routes_ask_no_chunk_of_scratch():
    x, w, b, y = (TensorMeta(s, np.dtype(np.float32)) for s in [(1, 8, 14, 14), (8, 1, 3, 3), (8,), (1, 8, 7, 7)])
    attrs = {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}
    kernel = get_kernel("Conv")
    assert kernel is not None and kernel.planes is not None and kernel.workspace is not None
    assert not kernel.planes.chunked(attrs, [x, w, b], y)
    # The same op without `direct` adds one chunk of output planes to the conv's own scratch.
    spec = planes.Planes(channel_inputs=(1, 2), depthwise=True)
    _, chunked, _ = planes.plane_wise(lambda *a, **k: None, conv_workspace, spec)
    direct = kernel.workspace([x, w, b], [y], **attrs)
    assert direct == conv_workspace([x, w, b], [y], **attrs)
    assert chunked([x, w, b], [y], **attrs) == direct + 8 * 7 * 7 * 4


def test_a_one_by_one_depthwise_conv_still_goes_through_the_chunk(monkeypatch):
    # The pointwise route is one matmul from the input: numpy would copy an overlapping operand.
    c = 6
    x = RNG.standard_normal((2, c, 5, 5)).astype(np.float32)
    w = RNG.standard_normal((c, 1, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    want = _reference(x, w, b, {})
    kernel = get_kernel("Conv")
    assert kernel is not None
    memory = x.copy()
    calls = []
    original = planes._in_place
    monkeypatch.setattr(planes, "_in_place", lambda *a: calls.append(1) or original(*a))
    kernel.fn(memory, w, b, out=memory, ws=None, group=c)
    assert calls
    np.testing.assert_allclose(memory, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk_bytes", [1, 1 << 20])
@pytest.mark.parametrize("k", [1, 3])  # the 1x1 conv goes through the chunk, the 3x3 runs directly
def test_a_call_bound_to_its_shapes_matches_the_reference_over_its_input(k, chunk_bytes, monkeypatch):
    monkeypatch.setattr(planes, "CHUNK_BYTES", chunk_bytes)
    c = 6
    x = RNG.standard_normal((2, c, 14, 14)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    attrs = {"strides": [2, 2], "pads": [k // 2] * 4, "group": c}
    want = _reference(x, w, b, {"strides": [2, 2], "pads": [k // 2] * 4})
    kernel = get_kernel("Conv")
    assert kernel is not None and kernel.workspace is not None
    metas_in = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    metas_out = [TensorMeta(want.shape, want.dtype)]
    bound = kernel.bind(metas_in, metas_out, attrs).run
    memory = x.copy()
    y = memory.reshape(-1)[: want.size].reshape(want.shape)
    ws = np.empty(kernel.workspace(metas_in, metas_out, **attrs), np.uint8)
    bound(memory, w, b, out=y, ws=ws, **attrs)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    apart = np.empty_like(want)
    bound(x, w, b, out=apart, ws=ws, **attrs)
    np.testing.assert_allclose(apart, want, rtol=1e-5, atol=1e-5)
