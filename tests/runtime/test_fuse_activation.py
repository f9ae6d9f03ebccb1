"""Load-time fusion of a Conv with the activation after it (memplan's ConvAct): Relu, Clip
(bounds as inputs and, before opset 11, as attributes), HardSigmoid, HardSwish, Sigmoid and
x * Sigmoid(x), on every Conv route (1x1, im2col, per-tap, depthwise by banded rows or by
im2col, grouped, strided, dilated, batch 2), each model against onnxruntime; and the chains
that must be left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels import MEMPLAN_DOMAIN
from runtime.oracle import oracle_outputs

RNG = np.random.default_rng(31)

# (channels in, filters, kernel, attributes): one per Conv route.
CONVS = {
    "pointwise": (8, 12, 1, {}),
    "im2col-strided": (6, 10, 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "taps": (12, 4, 3, {"pads": [1, 0, 1, 2], "dilations": [1, 2]}),
    "grouped": (8, 8, 3, {"pads": [1, 1, 1, 1], "group": 2}),
    "depthwise-rows": (10, 10, 5, {"pads": [2, 2, 2, 2], "group": 10}),
    "depthwise-rows-strided": (10, 10, 3, {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 10}),
    "depthwise-im2col": (6, 6, 3, {"pads": [1, 1, 1, 1], "group": 6}),
}


def _model(conv: str, act: str, *, spatial=(13, 13), opset: int = 17, extra_reader: bool = False):
    channels, filters, k, attrs = CONVS[conv]
    w = RNG.standard_normal((filters, channels // attrs.get("group", 1), k, k)).astype(np.float32) * 0.4
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(RNG.standard_normal(filters).astype(np.float32), "b"),
    ]
    if act == "DepthwiseWide":  # a 3x3 stride-1 depthwise conv over a map wider than the banded route takes
        spatial = (5, 40)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs)]
    if act == "Silu":
        nodes += [
            helper.make_node("Sigmoid", ["c"], ["g"], name="gate"),
            helper.make_node("Mul", ["c", "g"], ["y"], name="mul"),
        ]
    elif act == "Clip" and opset < 11:
        nodes.append(helper.make_node("Clip", ["c"], ["y"], name="act", min=-0.5, max=1.5))
    elif act == "Clip":
        inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="act"))
    elif act == "ClipLow":
        inits.append(numpy_helper.from_array(np.array(-0.25, np.float32), "lo"))
        nodes.append(helper.make_node("Clip", ["c", "lo"], ["y"], name="act"))
    elif act == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", ["c"], ["y"], name="act", alpha=0.3, beta=0.4))
    else:
        nodes.append(helper.make_node("Relu" if act == "DepthwiseWide" else act, ["c"], ["y"], name="act"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["y0", "y1", "y2", "y3"])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["c"], ["z"], name="also_reads_c"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["z0", "z1", "z2", "z3"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, channels, *spatial])
    graph = helper.make_graph(nodes, "conv_act", [x], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run_against_onnxruntime(model: onnx.ModelProto) -> runtime.Graph:
    graph = runtime.load_model(model)
    x = RNG.standard_normal(graph.tensors["x"].shape).astype(np.float32) * 2
    # With the canary (every step writes only what it declares) and without any workspace.
    without = runtime.MemoryOptions(workspace=False)
    for session in (runtime.Session(graph, canary=True).prepare(), runtime.Session(graph, options=without).prepare()):
        got = session.run({"x": x})
        _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
        assert want is not None, notes
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
    return graph


@pytest.mark.parametrize("act", ["Relu", "Clip", "ClipLow", "HardSigmoid", "HardSwish", "Sigmoid", "Silu"])
@pytest.mark.parametrize("conv", list(CONVS))
def test_conv_and_activation_fused_match_onnxruntime(conv, act):
    graph = _run_against_onnxruntime(_model(conv, act))
    assert graph.fusions["conv_activation"] == 1
    assert [(n.op_type, n.domain) for n in graph.nodes] == [("ConvAct", MEMPLAN_DOMAIN)]
    assert "c" not in graph.tensors and "g" not in graph.tensors


def test_clip_bounds_as_attributes_before_opset_11():
    graph = _run_against_onnxruntime(_model("pointwise", "Clip", opset=10))
    assert graph.nodes[0].attributes["lo"] == -0.5 and graph.nodes[0].attributes["hi"] == 1.5


def test_wide_depthwise_3x3_with_activation():
    graph = _run_against_onnxruntime(_model("depthwise-im2col", "DepthwiseWide"))
    assert [n.op_type for n in graph.nodes] == ["ConvAct"]


@pytest.mark.parametrize("act", ["Relu", "Silu"])
def test_a_conv_output_read_elsewhere_is_not_fused(act):
    graph = _run_against_onnxruntime(_model("im2col-strided", act, extra_reader=True))
    assert graph.fusions["conv_activation"] == 0 and "Conv" in [n.op_type for n in graph.nodes]


def test_fusion_can_be_switched_off_and_saves_a_tensor():
    model = _model("depthwise-rows", "Silu")
    fused = runtime.memory_problem(runtime.load_model(model), runtime.MemoryOptions(inplace=False))
    plain = runtime.memory_problem(runtime.load_model(model, fuse=False), runtime.MemoryOptions(inplace=False))
    ids = {b.id for b in fused.buffers}
    assert {"c", "g"} <= {b.id for b in plain.buffers} and not {"c", "g"} & ids


def _residual_model(act: str) -> onnx.ModelProto:
    """Add(1x1 Conv(Relu(x)), x) -> act: a PointwiseConvAdd that takes the activation."""
    c = 8
    inits = [
        numpy_helper.from_array(RNG.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.4, "w"),
        numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="relu"),
        helper.make_node("Conv", ["x" if act == "Self" else "t", "w", "b"], ["p"], name="conv"),
        helper.make_node("Add", ["p", "x"], ["c"], name="add"),
    ]
    if act == "Self":  # Conv(x) + x, no activation
        nodes[-1].output[0] = "y"
    elif act == "Silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["g"], name="gate"), helper.make_node("Mul", ["g", "c"], ["y"])]
    else:
        nodes.append(helper.make_node(act, ["c"], ["y"], name="act"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 9, 7])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 9, 7])
    graph = helper.make_graph(nodes, "residual_act", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("act", ["Relu", "HardSwish", "Silu"])
def test_pointwise_conv_add_takes_the_activation_after_it(act):
    graph = _run_against_onnxruntime(_residual_model(act))
    assert [n.op_type for n in graph.nodes] == ["Relu", "PointwiseConvAdd"]
    assert graph.nodes[1].attributes["activation"] == act and "c" not in graph.tensors


def test_a_conv_of_its_own_residual_is_not_fused():
    # Add(Conv(x), x): the fused kernel could be planned over x, which every band still reads.
    graph = _run_against_onnxruntime(_residual_model("Self"))
    assert [n.op_type for n in graph.nodes] == ["Relu", "Conv", "Add"]
