"""Folding BatchNormalization into the Conv before it: same outputs, fewer nodes and bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import planner
import runtime
from runtime.oracle import oracle_outputs


def conv_bn_model(*, bias: bool, extra_reader: bool = False, training_outputs: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(7)

    def const(name, *shape, positive=False):
        values = rng.standard_normal(shape).astype(np.float32)
        return numpy_helper.from_array(np.abs(values) + 0.1 if positive else values, name)

    inits = [
        const("w", 8, 3, 3, 3),
        const("scale", 8),
        const("shift", 8),
        const("mean", 8),
        const("var", 8, positive=True),
    ]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(const("b", 8))
        conv_inputs.append("b")
    nodes = [
        helper.make_node("Conv", conv_inputs, ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"], name="bn", epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 10, 10])]
    if extra_reader:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"], name="also_reads_c"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8, 10, 10]))
    graph = helper.make_graph(
        nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10, 10])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("bias", [True, False])
def test_folded_model_matches_onnxruntime(bias):
    model = conv_bn_model(bias=bias)
    graph = runtime.load_model(model)
    assert graph.fusions["batchnorm_into_conv"] == 1
    # The Relu after the folded Conv is fused into it too (runtime.fuse.fuse_conv_activation).
    assert [n.op_type for n in graph.nodes] == ["ConvAct"] and graph.fusions["conv_activation"] == 1
    x = np.random.default_rng(1).standard_normal((2, 3, 10, 10)).astype(np.float32)
    got = runtime.Session(graph).prepare().run({"x": x})
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
    assert want is not None, notes
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-5)


def test_fusing_saves_a_tensor_and_can_be_switched_off():
    model = conv_bn_model(bias=True)
    fused = runtime.memory_problem(runtime.load_model(model), runtime.MemoryOptions(inplace=False))
    plain = runtime.memory_problem(runtime.load_model(model, fuse=False), runtime.MemoryOptions(inplace=False))
    assert "c" in {b.id for b in plain.buffers} and "c" not in {b.id for b in fused.buffers}
    assert planner.naive(fused) < planner.naive(plain)


def test_a_conv_output_read_elsewhere_is_not_fused():
    graph = runtime.load_model(conv_bn_model(bias=True, extra_reader=True))
    assert graph.fusions["batchnorm_into_conv"] == 0 and "BatchNormalization" in [n.op_type for n in graph.nodes]


def test_planning_reads_no_weights():
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    graph = runtime.load_model(light)
    runtime.memory_problem(graph)
    big = [c for c in graph.constants.values() if c.source == "folded" and c.nbytes > 1 << 16]
    assert graph.fusions["batchnorm_into_conv"] == 53 and big and not any(c.loaded for c in big)
