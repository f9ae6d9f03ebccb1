"""Pooling and LRN planned over their own input: a plane-wise kernel writes its smaller output
from the input's first byte, a chunk of planes at a time; LRN keeps its window's halo.
Checked against onnx's reference evaluator or onnxruntime (kernels) and onnxruntime
(models, with the canary poisoning every free byte)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import runtime
from runtime.inplace import alias_hazards
from runtime.kernels import TensorMeta, get_kernel, planes
from runtime.kernels.elementwise import same_memory
from runtime.kernels.planes import same_start
from runtime.oracle import oracle_outputs

RNG = np.random.default_rng(5)
POOLS = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [1, 1], "auto_pad": "SAME_UPPER"}),  # as large as its input
    ("GlobalAveragePool", {}),
    ("GlobalMaxPool", {}),
]


def _one_op(op: str, attrs: dict, x: np.ndarray) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _reference(op: str, attrs: dict, x: np.ndarray) -> np.ndarray:
    return ReferenceEvaluator(_one_op(op, attrs, x)).run(None, {"x": x})[0]


def _onnxruntime(op: str, attrs: dict, x: np.ndarray) -> np.ndarray:
    oracle, want, notes = oracle_outputs(_one_op(op, attrs, x).SerializeToString(), {"x": x}, prefer="onnxruntime")
    assert oracle == "onnxruntime" and want is not None, notes
    return want["y"]


@pytest.mark.parametrize("chunk_bytes", [1, 4096, 1 << 20])  # one plane per chunk, a few, all at once
@pytest.mark.parametrize("scratch", [True, False])
@pytest.mark.parametrize(("op", "attrs"), POOLS, ids=[f"{op}-{i}" for i, (op, _) in enumerate(POOLS)])
def test_output_over_its_input_matches_the_reference(op, attrs, scratch, chunk_bytes, monkeypatch):
    monkeypatch.setattr(planes, "CHUNK_BYTES", chunk_bytes)
    kernel = get_kernel(op)
    assert kernel is not None and kernel.planes and 0 in kernel.inplace
    x = RNG.standard_normal((2, 5, 9, 7)).astype(np.float32)
    want = _reference(op, attrs, x)
    memory = x.copy()  # the input's bytes; the output is written from its first byte
    y = memory.reshape(-1)[: want.size].reshape(want.shape)
    assert np.may_share_memory(memory, y)
    ws = None
    if scratch:
        metas_in = [TensorMeta(x.shape, x.dtype)]
        metas_out = [TensorMeta(want.shape, want.dtype)] + ([None] if op == "MaxPool" else [])
        ws = np.empty(kernel.workspace(metas_in, metas_out, **attrs), dtype=np.uint8)  # type: ignore[misc]
    out = (y, None) if kernel.multi_output else y
    kernel.fn(memory, out=out, ws=ws, **attrs)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_maxpool_with_its_indices_is_not_planned_over_its_input():
    kernel = get_kernel("MaxPool")
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    memory = x.copy()
    y = memory.reshape(-1)[:8].reshape(1, 2, 2, 2)
    indices = np.empty((1, 2, 2, 2), dtype=np.int64)
    with pytest.raises(ValueError, match="output 0 alone"):
        kernel.fn(memory, out=(y, indices), ws=None, kernel_shape=[2, 2], strides=[2, 2])


def pooled_model(*, indices: bool = False) -> onnx.ModelProto:
    """x -> Relu -> MaxPool (stride 2) -> 1x1 Conv -> y: the pool's input dies at the pool."""
    w = numpy_helper.from_array(RNG.standard_normal((3, 4, 1, 1)).astype(np.float32), "w")
    pool_outputs = ["p", "i"] if indices else ["p"]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], pool_outputs, name="pool", kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w"], ["y"], name="conv"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 7, 7])]
    if indices:
        outputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, [2, 4, 7, 7]))
    graph = helper.make_graph(
        nodes, "pooled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 16, 16])], outputs, [w]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(("io", "workspace"), [("arena", True), ("external", False)])
def test_pool_over_its_input_runs_like_onnxruntime(io, workspace):
    model = pooled_model()
    graph = runtime.load_model(model)
    problem = runtime.memory_problem(graph, runtime.MemoryOptions(io=io, workspace=workspace))
    aliases = {b.id: (b.alias_of, b.alias_offset) for b in problem.buffers if b.alias_of}
    assert aliases.get("p") == ("r", 0)
    assert alias_hazards(graph, problem) == []
    apart = runtime.memory_problem(graph, runtime.MemoryOptions(io=io, workspace=workspace, inplace=False))
    import planner

    assert planner.load(problem) < planner.load(apart)
    x = RNG.standard_normal((2, 4, 16, 16)).astype(np.float32)
    session = runtime.Session(graph, "best", runtime.MemoryOptions(io=io, workspace=workspace), canary=True).prepare()
    got = session.run({"x": x})
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
    assert want is not None, notes
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-5)


def test_pool_whose_indices_are_used_keeps_its_own_buffer():
    graph = runtime.load_model(pooled_model(indices=True))
    problem = runtime.memory_problem(graph)
    assert not any(b.id == "p" and b.alias_of for b in problem.buffers)


@pytest.mark.parametrize("chunk_bytes", [1, 300, 1 << 20])  # one channel per chunk, a few, all at once
@pytest.mark.parametrize("size", [1, 3, 5, 7])  # odd: onnxruntime centres even windows unlike the spec
@pytest.mark.parametrize("in_place", [True, False])
def test_lrn_by_chunks_matches_the_reference_over_its_own_input(chunk_bytes, size, in_place, monkeypatch):
    from runtime.kernels import norm

    monkeypatch.setattr(norm, "LRN_CHUNK_BYTES", chunk_bytes)
    attrs = {"size": size, "alpha": 0.02, "beta": 0.75, "bias": 2.0}
    x = RNG.standard_normal((2, 7, 3, 4)).astype(np.float32)
    want = _onnxruntime("LRN", attrs, x)  # onnx.reference's LRN disagrees with the spec's numpy here
    kernel = get_kernel("LRN")
    assert kernel is not None and 0 in kernel.inplace
    memory = x.copy()
    out = memory if in_place else np.empty_like(x)
    ws = np.empty(kernel.workspace([TensorMeta(x.shape, x.dtype)], [TensorMeta(x.shape, x.dtype)], **attrs), np.uint8)
    kernel.fn(memory, out=out, ws=ws, **attrs)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


DEPTHWISE = [
    {"strides": [2, 2], "pads": [1, 1, 1, 1]},  # MobileNet's downsampling step: a smaller output
    {"strides": [1, 1], "pads": [1, 1, 1, 1]},  # as large as its input
]


@pytest.mark.parametrize("chunk_bytes", [1, 200, 1 << 20])
@pytest.mark.parametrize("attrs", DEPTHWISE, ids=["stride2", "stride1"])
def test_depthwise_conv_over_its_input_matches_the_reference(attrs, chunk_bytes, monkeypatch):
    monkeypatch.setattr(planes, "CHUNK_BYTES", chunk_bytes)
    c = 6
    x = RNG.standard_normal((2, c, 7, 9)).astype(np.float32)
    w = RNG.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, **attrs)
    graph = helper.make_graph(
        [node],
        "dw",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in (("x", x), ("w", w), ("b", b))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = ReferenceEvaluator(model).run(None, {"x": x, "w": w, "b": b})[0]
    kernel = get_kernel("Conv")
    assert kernel is not None and kernel.planes is not None and 0 not in kernel.inplace
    memory = x.copy()
    y = memory.reshape(-1)[: want.size].reshape(want.shape)
    metas_in = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    ws = np.empty(kernel.workspace(metas_in, [TensorMeta(want.shape, want.dtype)], group=c, **attrs), np.uint8)  # type: ignore[misc]
    kernel.fn(memory, w, b, out=y, ws=ws, group=c, **attrs)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_an_ordinary_conv_refuses_its_output_over_its_input():
    # A dense strided conv is neither plane-wise nor pixel-wise (a 1x1 stride-1 one is, see
    # test_conv_over_input): output pixels read input pixels of other positions.
    kernel = get_kernel("Conv")
    memory = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 4, 1, 1)).astype(np.float32)
    with pytest.raises(ValueError, match="plane-wise"):
        kernel.fn(memory, w, None, out=memory.reshape(-1)[:36].reshape(1, 4, 3, 3), ws=None, strides=[2, 2])


def depthwise_model(group: int) -> onnx.ModelProto:
    """x -> Relu -> 3x3 Conv (stride 2, `group` groups) -> 1x1 Conv -> y."""
    dw = numpy_helper.from_array(RNG.standard_normal((8, 8 // group, 3, 3)).astype(np.float32), "dw")
    pw = numpy_helper.from_array(RNG.standard_normal((4, 8, 1, 1)).astype(np.float32), "pw")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "dw"], ["d"], name="dw", group=group, strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "pw"], ["y"], name="pw"),
    ]
    graph = helper.make_graph(
        nodes,
        "dw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 6, 6])],
        [dw, pw],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("group", [8, 2])
def test_only_a_depthwise_conv_is_planned_over_its_input(group):
    model = depthwise_model(group)
    graph = runtime.load_model(model)
    problem = runtime.memory_problem(graph, runtime.MemoryOptions(io="external", workspace=False))
    aliased = {b.id: b.alias_of for b in problem.buffers if b.alias_of}
    assert (aliased.get("d") == "r") == (group == 8)
    assert alias_hazards(graph, problem) == []
    x = RNG.standard_normal((2, 8, 12, 12)).astype(np.float32)
    got = (
        runtime.Session(graph, "best", runtime.MemoryOptions(io="external", workspace=False), canary=True)
        .prepare()
        .run({"x": x})
    )
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
    assert want is not None, notes
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)


def test_address_checks_allocate_nothing_lasting():
    """The in-place checks (`planes` before running over the input, `_blocks.same_memory`) read
    addresses through `same_start`. `__array_interface__`, read before, interned its dict's keys
    anew on every call, so every ~12,000 calls CPython rebuilt its table of interned strings
    (about 1 MB in this process), which a traced run counted beside the arena: a MobileNetV3's
    first traced run after a whole benchmark set showed 30% of its arena."""
    import tracemalloc

    memory = np.zeros((2, 3, 4), np.float32)
    same, other = memory.reshape(2, 12), memory[1]
    calls = 30_000  # over two rebuilds' worth of the old churn
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(calls):
            assert same_start(memory, same) and not same_start(memory, other)
            assert same_memory(memory, memory) and not same_memory(memory, same)
        grown = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert grown < 16 * 1024, f"{grown:,} bytes allocated over {calls:,} address checks"
