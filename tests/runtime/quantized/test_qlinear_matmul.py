"""QLinearMatMul's routes ("rows", "batched", "general") against onnxruntime, each example of the route
table run with exactly its declared workspace; depth chunks that keep the float32 sums exact; a small
attention block (projections, Q @ K^T, scores @ V) through a Session; the general route's per-row
scales against the ONNX definition computed in float64."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime.kernels import TensorMeta
from runtime.kernels.quantized import qlinear_matmul as qm
from runtime.kernels.quantized.qlinear_routes import depth_chunks
from tests.runtime.quantized.test_qlinear_ops import assert_within_one_step, run_both

ort = pytest.importorskip("onnxruntime")
compiled_only = pytest.mark.skipif(not qm.ON, reason="compiled loops off: QLinearMatMul takes its numpy route")


def _route(inputs, out) -> str:
    metas = [TensorMeta(np.shape(v), np.asarray(v).dtype) for v in inputs]
    return qm.QMatMulShape.of(metas, [TensorMeta(out.shape, out.dtype)]).route.name


@compiled_only
@pytest.mark.parametrize("name", sorted(qm.EXAMPLES))
def test_each_example_takes_its_route_and_matches_onnxruntime(name):
    case = qm.EXAMPLES[name]
    inputs = case.inputs(np.random.default_rng(len(name)))
    constants = [i for i in range(1, 8) if i != 3 or case.b_constant]
    expected, got = run_both("QLinearMatMul", inputs, constants=constants, out_dtype=case.dtype)
    assert _route(inputs, got) == case.route
    assert_within_one_step(expected, got, f"QLinearMatMul {name}")


@compiled_only
@pytest.mark.parametrize("route, b_shape", [("rows", (1200, 3)), ("batched", (2, 1200, 3))])
def test_depth_chunks_keep_the_sums_exact(route, b_shape):
    """Extreme values (A at -128 or 127 less a zero point of 3, B at +-127) over a depth of 1,200: each
    row's sums pass 2**24 several times over, so they are summed in int32 over exact float32 chunks."""
    rng = np.random.default_rng(9)
    a = np.where(rng.random((2, 4, 1200)) < 0.5, -128, 127).astype(np.int8)
    b = rng.choice([-127, 127], b_shape).astype(np.int8)
    inputs = [a, np.float32(0.05), np.array(3, np.int8), b, np.float32(0.02), np.array(0, np.int8),
              np.float32(40.0), np.array(-1, np.int8)]  # fmt: skip
    if route == "rows":
        filters = (b.astype(np.float32) - 0).T
        assert depth_chunks(filters, 128).size > 2  # more than one exact chunk
    else:
        assert qm.BATCH_CHUNK < 1200
    expected, got = run_both("QLinearMatMul", inputs, constants=range(1, 8), out_dtype=np.int8)
    assert _route(inputs, got) == route
    assert_within_one_step(expected, got, f"QLinearMatMul {route} in depth chunks")


def test_general_route_per_row_scales_as_the_onnx_definition():
    """Per-row A and Y scales and zero points (the spec's per-row form) and a 16-bit A take the numpy
    route; the oracle dequantizes, multiplies in float64 and quantizes rounding half to even."""
    rng = np.random.default_rng(10)
    a = rng.integers(-600, 600, (5, 7)).astype(np.int16)
    b = rng.integers(0, 256, (7, 4)).astype(np.uint8)
    a_scale, a_zero = rng.uniform(0.01, 0.02, 5).astype(np.float32), rng.integers(-5, 5, 5).astype(np.int16)
    b_scale, b_zero = np.float32(0.03), np.array(128, np.uint8)
    y_scale, y_zero = rng.uniform(0.3, 0.5, 5).astype(np.float32), rng.integers(-3, 3, 5).astype(np.int8)
    out = np.zeros((5, 4), np.int8)
    inputs = [a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero]
    assert _route(inputs, out) == "general"
    from runtime.kernels import call, get_kernel

    call(get_kernel("QLinearMatMul"), inputs, [out], None, {}, 21)
    real = ((a - a_zero[:, None]) * a_scale[:, None].astype(np.float64)) @ ((b.astype(np.float64) - 128) * 0.03)
    want = np.clip(np.rint(real / y_scale[:, None]) + y_zero[:, None], -128, 127)
    assert np.abs(want - out).max() <= 1 and len(np.unique(want)) >= 4


def _attention_model(rng, seq: int, width: int, heads: int):
    """x -> QuantizeLinear -> Q, K, V projections (constant B, per-column scales) -> heads -> Q @ K^T
    -> scores @ V -> DequantizeLinear: QLinearMatMuls as onnxruntime's quantizer writes a transformer's."""
    head = width // heads
    inits = {"xs": np.float32(0.05), "xz": np.int8(0), "ps": np.float32(0.3), "pz": np.int8(0),
             "cs": np.float32(1.5), "cz": np.int8(0), "ws": (rng.uniform(0.5, 1.5, width) * 0.01).astype(np.float32),
             "wz": np.zeros(width, np.int8), "split": np.array([1, seq, heads, head])}  # fmt: skip
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"])]
    for name in "qkv":
        inits[f"w{name}"] = rng.integers(-127, 128, (width, width)).astype(np.int8)
        nodes.append(helper.make_node("QLinearMatMul", ["xq", "xs", "xz", f"w{name}", "ws", "wz", "ps", "pz"], [name]))
        nodes.append(helper.make_node("Reshape", [name, "split"], [f"{name}4"]))
    nodes += [
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("QLinearMatMul", ["qh", "ps", "pz", "kt", "ps", "pz", "cs", "cz"], ["scores"]),
        helper.make_node("QLinearMatMul", ["scores", "cs", "cz", "vh", "ps", "pz", "ps", "pz"], ["mixed"]),
        helper.make_node("DequantizeLinear", ["mixed", "ps", "pz"], ["y"]),
    ]
    tensors = [numpy_helper.from_array(np.asarray(v), name) for name, v in inits.items()]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, heads, seq, head])
    model = helper.make_model(helper.make_graph(nodes, "attention", [x], [y], tensors),
                              opset_imports=[helper.make_opsetid("", 21)])  # fmt: skip
    model.ir_version = 10
    return model


@compiled_only
def test_attention_block_through_a_session_matches_onnxruntime(tmp_path):
    import runtime
    from runtime.session import Session

    rng = np.random.default_rng(11)
    model = _attention_model(rng, seq=6, width=16, heads=2)
    path = tmp_path / "attention.onnx"
    path.write_bytes(model.SerializeToString())
    x = rng.standard_normal((1, 6, 16)).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    graph = runtime.load_model(path)
    session = Session(graph)
    got = session.run({"x": x})[graph.outputs[0]]
    routes = []
    for node in graph.nodes:
        if node.op_type == "QLinearMatMul":
            metas = [TensorMeta(graph.tensors[n].shape, graph.tensors[n].dtype) for n in node.inputs]
            out = graph.tensors[node.outputs[0]]
            routes.append(qm.QMatMulShape.of(metas, [TensorMeta(out.shape, out.dtype)]).route.name)
    assert routes == ["rows", "rows", "rows", "batched", "batched"]
    steps = np.rint(np.asarray(got, np.float64) / 0.3) - np.rint(np.asarray(want, np.float64) / 0.3)
    assert np.abs(steps).max() <= 1 and len(np.unique(want)) >= 4
