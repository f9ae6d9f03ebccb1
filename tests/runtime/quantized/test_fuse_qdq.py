"""QDQ models (onnxruntime's quantizer, QDQ format) folded at load into integer ops and run in the
arena, against onnxruntime running the same file; `fuse=False` keeps the graph as written."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.session import Session
from tests.runtime.quantized.calibrated import calibrated

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

SHAPE = (1, 3, 16, 16)


def _float_model() -> onnx.ModelProto:
    """Conv+Relu, MaxPool, a residual Conv+Add, Concat, Sigmoid, global pooling, Flatten and Gemm."""
    rng = np.random.default_rng(0)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["a2"]),
        helper.make_node("BatchNormalization", ["a2", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Sum", ["bn", "p1"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a2", "c3"], ["cat"], axis=1),
        helper.make_node("Sigmoid", ["cat"], ["s"]),
        helper.make_node("Mul", ["s", "cat"], ["m"]),
        helper.make_node("GlobalAveragePool", ["m"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8), init("w2", 8, 8, 3, 3, scale=0.2), init("b2", 8),
             init("w3", 8, 1, 3, 3), init("b3", 8), init("wf", 10, 16), init("bf", 10), init("beta", 8),
             init("mean", 8), numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32), "var")]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "qdq_test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 10))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _calibration() -> list[dict[str, np.ndarray]]:
    return [{"x": np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32)} for i in range(4)]


@pytest.fixture(scope="module")
def qdq_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qdq")
    float_path, qdq = folder / "float.onnx", folder / "qdq.onnx"
    onnx.save(_float_model(), float_path)

    calibrated(float_path, qdq, _calibration())
    return float_path, qdq


def _ort(path, x, optimized=True):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_qdq_groups_become_integer_ops(qdq_path):
    _, path = qdq_path
    graph = runtime.load_model(path)
    ops = Counter(n.op_type for n in graph.nodes)
    assert graph.fusions["qdq"] >= 10
    # BatchNormalization becomes a depthwise 1x1 QLinearConv, Sum -> Relu a QLinearAdd and a clamp.
    assert ops["QLinearConv"] == 4 and ops["QGemm"] == 1 and ops["QLinearConcat"] == 1
    # The SiLU (Sigmoid, then Mul by its own input) is one table of the pair's integers.
    assert ops["QLinearAdd"] == 2 and ops["QLinearSigmoidMul"] == 1 and not {"QLinearMul", "QLinearSigmoid"} & set(ops)
    assert ops["QLinearUnary"] == 1
    assert not {"Conv", "Gemm", "Add", "Concat", "BatchNormalization", "Sum", "Relu"} & set(ops)
    # Between the first QuantizeLinear and the last DequantizeLinear every activation is one byte.
    inner = [t for t in graph.tensors.values() if t.kind == "activation" and t.producer and
             graph.node(t.producer).op_type not in ("DequantizeLinear",)]  # fmt: skip
    assert inner and all(t.dtype.itemsize == 1 for t in inner), [
        (t.name, t.dtype) for t in inner if t.dtype.itemsize > 1
    ]
    # ... and carries its scale and zero point, as a .tflite tensor does (the model page shows them).
    assert all(t.quant is not None and t.quant.scale.size == 1 for t in inner)
    weights = [graph.tensors[n.inputs[3]] for n in graph.nodes if n.op_type == "QLinearConv"]
    assert all(w.quant is not None and w.quant.axis == 0 and w.quant.scale.size == w.shape[0] for w in weights)


def test_folded_model_matches_onnxruntime(qdq_path):
    _, path = qdq_path
    graph = runtime.load_model(path)
    last_dq = graph.node(graph.tensors["y"].producer)
    scale = float(graph.constants[last_dq.inputs[1]].value())
    for seed in range(3):
        x = np.random.default_rng(10 + seed).standard_normal(SHAPE).astype(np.float32)
        ours = np.asarray(Session(graph).run({"x": x})["y"])
        expected = _ort(path, x)
        steps = np.rint(np.abs(ours.astype(np.float64) - expected) / scale)
        print(
            f"seed {seed}: {int((steps > 0).sum())} of {steps.size} outputs differ from onnxruntime, by at most {int(steps.max())} step"
        )
        assert steps.max() <= 1


def test_fuse_off_keeps_the_graph_as_written(qdq_path):
    float_path, path = qdq_path
    graph = runtime.load_model(path, fuse=False)
    ops = Counter(n.op_type for n in graph.nodes)
    assert graph.fusions["qdq"] == 0 and ops["Conv"] == 3 and ops["QuantizeLinear"] > 5 and ops["Sum"] == 1
    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    ours = np.asarray(Session(graph).run({"x": x})["y"])
    np.testing.assert_allclose(ours, _ort(path, x, optimized=False), rtol=1e-4, atol=1e-4)


def test_integer_activations_take_less_of_the_arena(qdq_path):
    # Activations only: at this toy size the kernels' scratch would outweigh them (the bench
    # measures whole arenas on real models). The graph input stays float32 in both.
    float_path, path = qdq_path
    arenas = {}
    for name, p in (("float", float_path), ("int8", path)):
        session = Session(runtime.load_model(p), options=runtime.MemoryOptions(workspace=False))
        session.run({"x": np.zeros(SHAPE, np.float32)})
        arenas[name] = session.plan.arena_bytes
    assert arenas["int8"] < 0.6 * arenas["float"], arenas


@pytest.mark.parametrize("op,attrs", [("HardSwish", {}), ("HardSigmoid", {"alpha": 0.25}), ("Tanh", {})])
def test_one_input_float_op_becomes_a_table(op, attrs):
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zero = numpy_helper.from_array(np.array(3, np.int8), "z")
    out_scale = numpy_helper.from_array(np.array(0.02, np.float32), "so")
    out_zero = numpy_helper.from_array(np.array(-5, np.int8), "zo")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node(op, ["xd"], ["f"], **attrs),
        helper.make_node("QuantizeLinear", ["f", "so", "zo"], ["fq"]),
        helper.make_node("DequantizeLinear", ["fq", "so", "zo"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "unary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 64))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 64))], [scale, zero, out_scale, out_zero],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    loaded = runtime.load_model(model)
    assert [n.op_type for n in loaded.nodes] == ["QuantizeLinear", "QLinearUnary", "DequantizeLinear"]
    x = (np.random.default_rng(4).standard_normal((4, 64)) * 3).astype(np.float32)
    ours = np.asarray(Session(loaded).run({"x": x})["y"])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    steps = np.rint(np.abs(ours - expected) / 0.02)
    print(f"{op}: {int((steps > 0).sum())} of {steps.size} differ from onnxruntime, by at most {int(steps.max())} step")
    assert steps.max() <= 1 and len(np.unique(expected)) > 20


def test_qoperator_model_loads_and_matches_onnxruntime(qdq_path, tmp_path):
    """The QOperator format (uint8 activations): com.microsoft's QLinear ops, typed by memplan since
    onnx's inference does not know them, run as written."""
    float_path, _ = qdq_path
    path = tmp_path / "qop.onnx"

    calibrated(float_path, path, _calibration(), qoperator=True)
    graph = runtime.load_model(path)
    ops = Counter(n.op_type for n in graph.nodes)
    assert ops["QLinearConv"] >= 3 and ops["QLinearAdd"] >= 1 and ops["QGemm"] == 1 and ops["QLinearConcat"] == 1
    assert all(t.dtype == np.uint8 for t in graph.tensors.values() if t.producer and t.kind == "activation" and
               graph.node(t.producer).op_type.startswith("QLinear"))  # fmt: skip
    x = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    ours = np.asarray(Session(graph).run({"x": x})["y"])
    expected = _ort(path, x)
    scale = float(graph.constants[graph.node(graph.tensors["y"].producer).inputs[1]].value())
    steps = np.rint(np.abs(ours.astype(np.float64) - expected) / scale)
    print(
        f"QOperator: {int((steps > 0).sum())} of {steps.size} outputs differ from onnxruntime, by at most {int(steps.max())} step"
    )
    assert steps.max() <= 1
