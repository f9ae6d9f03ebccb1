"""Load-time fusions: a 1x1 Conv with the residual Add after it (PointwiseConvAdd), and the
exact GELU spelt in five ops made one Gelu. Same outputs as onnxruntime and onnx's
reference evaluator, one activation fewer at the step they shorten, and only the patterns
that compute exactly that are fused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import planner
import runtime
from runtime.kernels import MEMPLAN_DOMAIN, TensorMeta, fused, get_kernel, supported_ops
from runtime.oracle import oracle_outputs

RNG = np.random.default_rng(11)


def _value(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def residual_model(
    *,
    bias: bool = True,
    op: str = "Add",
    strides: tuple[int, int] = (1, 1),
    group: int = 1,
    expose_conv: bool = False,
    broadcast: bool = False,
    spatial: tuple[int, ...] = (6, 6),
) -> onnx.ModelProto:
    """x -> Relu -> t; t -> 3x3 Conv -> Relu -> h; Add(1x1 Conv(h), t) -> Relu -> y: a ResNet-like block."""
    c = 8
    k = (3,) * len(spatial)
    inits = [
        numpy_helper.from_array(RNG.standard_normal((c, c, *k)).astype(np.float32) * 0.2, "w3"),
        numpy_helper.from_array(RNG.standard_normal((c, c // group, *(1,) * len(spatial))).astype(np.float32), "w1"),
    ]
    pointwise_inputs = ["h", "w1"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "b1"))
        pointwise_inputs.append("b1")
    residual = "t"
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="relu_t"),
        helper.make_node("Conv", ["t", "w3"], ["a"], name="conv3", pads=[1] * (2 * len(spatial))),
        helper.make_node("Relu", ["a"], ["h"], name="relu_h"),
    ]
    pointwise_strides = list(strides[: len(spatial)]) + [1] * (len(spatial) - len(strides))
    nodes.append(
        helper.make_node("Conv", pointwise_inputs, ["p"], name="conv1", strides=pointwise_strides, group=group)
    )
    out_spatial = [-(-s // st) for s, st in zip(spatial, pointwise_strides, strict=True)]
    if broadcast:
        inits.append(numpy_helper.from_array(RNG.standard_normal((c, 1, 1)).astype(np.float32), "shift"))
        residual = "shift"
    elif out_spatial != list(spatial):
        nodes.append(helper.make_node("MaxPool", ["t"], ["xs"], name="pool", kernel_shape=[1, 1], strides=[2, 2]))
        residual = "xs"
    nodes.append(helper.make_node(op, ["p", residual], ["s"], name="add"))
    nodes.append(helper.make_node("Relu", ["s"], ["y"], name="relu_y"))
    outputs = [_value("y", [2, c, *out_spatial])]
    if expose_conv:
        outputs.append(_value("p", [2, c, *out_spatial]))
    graph = helper.make_graph(nodes, "residual", [_value("x", [2, c, *spatial])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run_against_oracle(model: onnx.ModelProto) -> runtime.Graph:
    graph = runtime.load_model(model)
    x = RNG.standard_normal(graph.tensors["x"].shape).astype(np.float32)
    got = runtime.Session(graph, "best").prepare().run({"x": x})
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
    assert want is not None, notes
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)
    return graph


@pytest.mark.parametrize("op", ["Add", "Sum"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("spatial", [(6, 6), (9,), (3, 4, 5)])
def test_fused_block_matches_onnxruntime(op, bias, spatial):
    graph = _run_against_oracle(residual_model(op=op, bias=bias, spatial=spatial))
    assert graph.fusions["pointwise_conv_add"] == 1
    fused = [n for n in graph.nodes if n.domain == MEMPLAN_DOMAIN]
    # The 3x3 Conv's Relu is fused too (runtime.fuse.fuse_conv_activation).
    assert [n.op_type for n in fused] == ["ConvAct", "PointwiseConvAdd"] and "p" not in graph.tensors


@pytest.mark.parametrize(
    "variant",
    [{"strides": (2, 2)}, {"group": 2}, {"expose_conv": True}, {"broadcast": True}],
    ids=["strided", "grouped", "conv-output-is-a-graph-output", "broadcasting-add"],
)
def test_pairs_that_are_not_a_plain_product_and_add_are_left_alone(variant):
    graph = _run_against_oracle(residual_model(**variant))
    assert graph.fusions["pointwise_conv_add"] == 0
    # Only the 3x3 Conv and its Relu are fused (runtime.fuse.fuse_conv_activation).
    assert [n.op_type for n in graph.nodes if n.domain not in ("", "ai.onnx")] == ["ConvAct"]


def test_fusion_removes_the_conv_output_from_the_residual_step(monkeypatch):
    from runtime.kernels.conv import routes as conv_routes

    model = residual_model()
    fused = runtime.load_model(model)
    apart = runtime.load_model(model, fuse=False)
    options = runtime.MemoryOptions(io="external", workspace=False)
    load_fused = planner.load(runtime.memory_problem(fused, options))
    # Apart, the 1x1 Conv writes p over h, its dying input (`runtime.kernels.conv.over`): as low.
    assert planner.load(runtime.memory_problem(apart, options)) == load_fused
    monkeypatch.setattr(conv_routes, "over_of", lambda *args: None)  # no conv over its input
    load_apart = planner.load(runtime.memory_problem(apart, options))
    one_activation = 2 * 8 * 6 * 6 * 4
    # Apart, t, h and p are live at the 1x1 Conv's step; fused, t and h (the sum is written over t).
    assert load_apart - load_fused == one_activation


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("scratch", [True, False])
def test_kernel_matches_the_reference_conv_and_add(in_place, scratch):
    kernel = get_kernel("PointwiseConvAdd", MEMPLAN_DOMAIN)
    assert kernel is not None and kernel.inplace == (3,)
    x = RNG.standard_normal((2, 5, 7, 3)).astype(np.float32)
    w = RNG.standard_normal((300, 5, 1, 1)).astype(np.float32)  # more than one band of channels
    b = RNG.standard_normal(300).astype(np.float32)
    r = RNG.standard_normal((2, 300, 7, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Add", ["c", "r"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "ref",
        [_value("x", list(x.shape)), _value("w", list(w.shape)), _value("b", [300]), _value("r", list(r.shape))],
        [_value("y", list(r.shape))],
    )
    ref = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    (want,) = ref.run(None, {"x": x, "w": w, "b": b, "r": r})
    out = r.copy() if in_place else np.empty_like(r)
    residual = out if in_place else r
    ws = None
    if scratch:
        metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, b, r)]
        ws = np.empty(kernel.workspace(metas, [TensorMeta(r.shape, r.dtype)]), dtype=np.uint8)  # type: ignore[misc]
    kernel.fn(x, w, b, residual, out=out, ws=ws)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_memplan_ops_are_not_listed_as_onnx_ops():
    assert "PointwiseConvAdd" not in supported_ops() and "Conv" in supported_ops()
    assert get_kernel("PointwiseConvAdd") is None  # only in memplan's domain


def gelu_model(*, divisor: float = float(np.sqrt(2.0)), expose: bool = False, swap: bool = False) -> onnx.ModelProto:
    """x -> MatMul -> h; h * 0.5 * (1 + Erf(h / divisor)) as exporters spell it -> MatMul -> y."""
    w1 = numpy_helper.from_array(RNG.standard_normal((8, 32)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(RNG.standard_normal((32, 8)).astype(np.float32), "w2")
    consts = [
        numpy_helper.from_array(np.array(divisor, np.float32), "root2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Div", ["h", "root2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["one", "e"] if swap else ["e", "one"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "h"] if swap else ["h", "a"], ["m"], name="mul"),
        helper.make_node("Mul", ["half", "m"] if swap else ["m", "half"], ["g"], name="mul_half"),
        helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2"),
    ]
    outputs = [_value("y", [4, 8])] + ([_value("e", [4, 32])] if expose else [])
    graph = helper.make_graph(nodes, "gelu", [_value("x", [4, 8])], outputs, [w1, w2, *consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("swap", [False, True])
def test_erf_gelu_becomes_one_gelu_and_matches_onnxruntime(swap):
    model = gelu_model(swap=swap)
    graph = runtime.load_model(model)
    assert graph.fusions["gelu"] == 1
    assert [n.op_type for n in graph.nodes] == ["MatMul", "Gelu", "MatMul"]
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    got = runtime.Session(graph, "best", canary=True).prepare().run({"x": x})
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
    assert want is not None, notes
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)
    options = runtime.MemoryOptions(io="external", workspace=False)
    fused = planner.load(runtime.memory_problem(graph, options))
    apart = planner.load(runtime.memory_problem(runtime.load_model(model, fuse=False), options))
    assert apart - fused == 4 * 32 * 4  # h and an intermediate as large as h were live together


@pytest.mark.parametrize("variant", [{"divisor": 2.0}, {"expose": True}], ids=["not-sqrt2", "intermediate-is-output"])
def test_chains_that_are_not_the_exact_gelu_are_left_alone(variant):
    model = gelu_model(**variant)
    graph = runtime.load_model(model)
    assert graph.fusions["gelu"] == 0 and "Erf" in [n.op_type for n in graph.nodes]
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    got = runtime.Session(graph, "best").prepare().run({"x": x})
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
    assert want is not None, notes
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("channels", "budget_rows"), [(256, 83), (512, 334), (300, 7), (10, 3), (64, 64), (5, 9)])
def test_channel_bands_are_even_and_near_the_budget(channels, budget_rows, monkeypatch):
    plane, itemsize = 21, 4
    monkeypatch.setattr(fused, "BAND_BYTES", budget_rows * plane * itemsize)
    rows = fused._band(channels, plane, itemsize)
    bands = -(-channels // rows)
    assert 8 * rows <= 9 * min(budget_rows, channels)  # at most 1/8 past the budget
    assert channels - (bands - 1) * rows >= rows - bands  # the last band about as wide as the others


def test_kernel_in_evened_bands_matches_the_reference_conv_and_add(monkeypatch):
    monkeypatch.setattr(fused, "BAND_BYTES", 83 * 21 * 4)  # 256 channels: 86, 86, 84 (not 83, 83, 83, 7)
    x = RNG.standard_normal((1, 8, 7, 3)).astype(np.float32)
    w = RNG.standard_normal((256, 8, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(256).astype(np.float32)
    r = RNG.standard_normal((1, 256, 7, 3)).astype(np.float32)
    want = np.maximum(np.einsum("kc,nchw->nkhw", w[:, :, 0, 0], x) + b[:, None, None] + r, 0)
    kernel = get_kernel("PointwiseConvAdd", MEMPLAN_DOMAIN)
    assert kernel is not None and kernel.workspace is not None
    metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, b, r)]
    ws = np.empty(kernel.workspace(metas, [TensorMeta(r.shape, r.dtype)], activation="Relu"), np.uint8)
    assert fused._band(256, 21, 4) == 86
    out = r.copy()
    kernel.fn(x, w, b, out, out=out, ws=ws, activation="Relu")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
