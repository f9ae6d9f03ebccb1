"""QuantizeLinear over its own dying input (`Kernel.narrowing`): the kernel, given its int8/uint8/int16
output over its float input's first bytes, writes exactly what it writes elsewhere and what onnx.reference
and onnxruntime compute; a planned QDQ model takes the alias, runs with the canary on and matches
onnxruntime, in a smaller arena, and declines it where the arena would not shrink; a graph input bound
zero-copy to the caller's array is never written; the alias checker refuses the alias over an input still
read, and a widening DequantizeLinear over its input."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from planner.bounds import live_bytes
from runtime.arena import aligned_arena
from runtime.errors import PlanError
from runtime.kernels import TensorMeta, call, get_kernel
from runtime.kernels.quantized import quantize
from runtime.options import MemoryOptions
from runtime.problem import check_aliases
from runtime.session import Session
from tests.runtime.kernels.harness import one_node, run_kernel, run_ort
from tests.runtime.quantized.calibrated import calibrated

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

CHUNK = quantize.QUANTIZE_CHUNK


def _data(shape: tuple[int, ...], scale: float, seed: int) -> np.ndarray:
    """Spread values with exact ties at `scale`, values past every range and infinities first."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 60 * scale).astype(np.float32)
    flat = x.reshape(-1)
    ties = (np.arange(-8, 8, dtype=np.float32) + np.float32(0.5)) * np.float32(scale)
    special = np.array([1e9, -1e9, np.inf, -np.inf, 0.0, -0.0], np.float32)
    head = np.concatenate([ties, special])[: flat.size]
    flat[: head.size] = head
    return x


def _over_itself(x: np.ndarray, scale, zero, attrs: dict) -> np.ndarray:
    """QuantizeLinear run as a planned session runs it over its dying input: one block of memory
    holding x, the output a view of its first bytes."""
    kernel = get_kernel("QuantizeLinear")
    assert kernel is not None and kernel.narrowing and 0 in kernel.inplace
    dtype = np.dtype(zero.dtype)
    memory = aligned_arena(x.nbytes, 64)
    held = memory.view(x.dtype).reshape(x.shape)
    held[...] = x
    out = memory[: x.size * dtype.itemsize].view(dtype).reshape(x.shape)
    metas = [TensorMeta(x.shape, x.dtype), TensorMeta(scale.shape, scale.dtype), TensorMeta(zero.shape, dtype)]
    ws = None
    if kernel.workspace is not None:
        ws = np.zeros(kernel.workspace(metas, [TensorMeta(x.shape, dtype)], **attrs), np.uint8)
    call(kernel, [held, scale, zero], [out], ws, attrs, 21)
    return out.copy()


CASES = [  # (shape, dtype, per axis, axis): odd sizes, chunk edges, one scale and one per channel
    ((2 * CHUNK + 3,), np.int8, False, 1),
    ((CHUNK - 1,), np.uint8, False, 1),
    ((3, 7, 13), np.uint8, False, 1),
    ((1, 5, 9, 11), np.int8, True, 1),
    ((2, 3, 5, 7), np.uint8, True, -1),
    ((5, 3, CHUNK // 3 + 1), np.int16, False, 1),
    ((4, 257), np.uint16, True, 0),
]


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # onnx.reference's, past int32
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize(("shape", "dtype", "per_axis", "axis"), CASES)
def test_quantize_over_its_input_is_the_out_of_place_result(shape, dtype, per_axis, axis, compiled, monkeypatch):
    if not compiled:  # the route memplan takes with compiled loops off: chunks through the workspace
        monkeypatch.setattr(quantize, "QUANTIZE", None)
    elif quantize.QUANTIZE is None:
        pytest.skip("compiled loops are off")
    rng = np.random.default_rng(len(shape) + shape[-1])
    n = shape[axis] if per_axis else 1
    scale = rng.uniform(0.01, 0.05, n).astype(np.float32).reshape(() if not per_axis else (n,))
    info = np.iinfo(dtype)
    zero = rng.integers(info.min // 4, info.max // 4, n, endpoint=True).astype(dtype).reshape(scale.shape)
    x = _data(shape, float(scale.reshape(-1)[0]), seed=shape[-1])
    feeds = {"x": x, "scale": scale, "zero": zero}
    model = one_node("QuantizeLinear", feeds, out_types=[dtype], axis=axis)
    apart = run_kernel(model, [x, scale, zero], [np.empty(shape, dtype)])[0]
    got = _over_itself(x, scale, zero, {"axis": axis})
    np.testing.assert_array_equal(got, apart)
    reference = onnx.reference.ReferenceEvaluator(model).run(None, feeds)[0]
    within = np.abs(x) < 1e6  # onnx.reference casts to int32 before it clamps: past that, garbage
    np.testing.assert_array_equal(got[within], reference[within])
    np.testing.assert_array_equal(got, run_ort(model, feeds)[0])


def test_narrowing_is_refused_where_the_output_is_wider():
    """DequantizeLinear widens (int8 to float32): written forward over its input it would overwrite
    elements not read yet, so it declares no such alias and none is planned."""
    kernel = get_kernel("DequantizeLinear")
    assert kernel is not None and not kernel.narrowing and not kernel.inplace


# ---- a planned QDQ model ----------------------------------------------------------------------------

TAKEN = (1, 3, 160, 160)  # a 3x3 stride-2 convolution after the quantize: the quantize step is the peak
DECLINED = (1, 16, 23, 29)  # 1x1 convolutions whose scratch outgrows the float input


def _float_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    channels, (height, width) = shape[1], shape[2:]
    if channels == 3:
        w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])]
        out, inits = (1, 4, height // 2, width // 2), [w]
    else:
        w1 = numpy_helper.from_array((rng.standard_normal((4, channels, 1, 1)) * 0.3).astype(np.float32), "w1")
        w2 = numpy_helper.from_array((rng.standard_normal((2, 4, 1, 1)) * 0.5).astype(np.float32), "w2")
        nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
                 helper.make_node("Conv", ["r1", "w2"], ["y"])]  # fmt: skip
        out, inits = (1, 2, height, width), [w1, w2]
    graph = helper.make_graph(
        nodes,
        "quantize_over_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _input(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _quantized(folder, shape: tuple[int, ...]):
    float_path, path = folder / f"float{shape[1]}.onnx", folder / f"qdq{shape[1]}.onnx"
    onnx.save(_float_model(shape), float_path)

    return calibrated(float_path, path, [{"x": _input(shape, seed)} for seed in range(2)])


@pytest.fixture(scope="module")
def qdq_paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quantize_over_input")
    return {shape: _quantized(folder, shape) for shape in (TAKEN, DECLINED)}


def _entry(graph) -> str:
    node = graph.nodes[0]
    assert node.op_type == "QuantizeLinear" and node.inputs[0] == "x", [n.op_type for n in graph.nodes]
    return node.outputs[0]


def _aliases(session: Session) -> dict[str, str | None]:
    return {b.id: b.alias_of for b in session.problem.buffers}


def test_planned_qdq_model_quantizes_over_its_input(qdq_paths):
    path = qdq_paths[TAKEN]
    graph = runtime.load_model(path)
    quantized = _entry(graph)
    with_alias = Session(graph, canary=True).prepare()
    plain = Session(graph, options=MemoryOptions(inplace=False), canary=True).prepare()
    assert _aliases(with_alias)[quantized] == "x"
    x_bytes, q_bytes = graph.tensors["x"].nbytes, graph.tensors[quantized].nbytes
    scratch = sum(b.size for b in plain.problem.buffers if b.kind == "workspace" and b.first == 0)  # numpy route's
    # The first step holds the float input alone, where it held the input and its int8 copy.
    assert live_bytes(with_alias.problem)[0] == x_bytes + scratch
    assert live_bytes(plain.problem)[0] == x_bytes + q_bytes + scratch
    assert with_alias.plan.arena_bytes < plain.plan.arena_bytes
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    oracle = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    last = graph.node(graph.tensors["y"].producer)
    step = float(graph.constants[last.inputs[1]].value())  # the output's quantization step
    for seed in (11, 12):
        x = _input(TAKEN, seed)
        ours = np.asarray(with_alias.run({"x": x})["y"])
        np.testing.assert_array_equal(ours, plain.run({"x": x})["y"])
        expected = oracle.run(None, {"x": x})[0]
        steps = np.abs(ours.astype(np.float64) - expected) / step
        assert steps.max() <= 1.001, f"{int((steps > 0.5).sum())} elements differ, by up to {steps.max():.2f} steps"
        assert (steps > 0.5).mean() <= 0.02


def test_alias_declined_where_it_would_not_shrink_the_arena(qdq_paths):
    """Here the 1x1 convolution's scratch, not the quantize step, is the peak: bound to the input,
    the int8 copy would push the convolution's scratch above it (greedy_by_size: 96,064 bytes
    instead of 66,732), so the schedule keeps the two apart."""
    graph = runtime.load_model(qdq_paths[DECLINED])
    quantized = _entry(graph)
    session = Session(graph, canary=True).prepare()
    plain = Session(graph, options=MemoryOptions(inplace=False)).prepare()
    assert _aliases(session)[quantized] is None
    assert session.plan.arena_bytes == plain.plan.arena_bytes
    x = _input(DECLINED, 5)
    np.testing.assert_array_equal(session.run({"x": x})["y"], plain.run({"x": x})["y"])


def test_input_bound_zero_copy_is_never_overwritten(qdq_paths):
    """With inputs held by the caller (io="external") the input is outside the arena: no alias is made
    onto it and the caller's array, read in place, keeps its values; inside the arena the alias holds
    and the arena's copy of the input is what gets overwritten, never the caller's array."""
    graph = runtime.load_model(qdq_paths[TAKEN])
    quantized = _entry(graph)
    x = _input(TAKEN, 21)
    kept = x.copy()
    outside = Session(graph, options=MemoryOptions(io="external"), canary=True).prepare()
    binding = outside.bind_input("x", x)
    assert binding.zero_copy, binding.reason
    assert all(alias != "x" for alias in _aliases(outside).values())
    got = np.asarray(outside.run({})["y"])
    np.testing.assert_array_equal(x, kept)
    inside = Session(graph, canary=True).prepare()
    assert _aliases(inside)[quantized] == "x"
    copied = inside.bind_input("x", x)
    assert not copied.zero_copy
    np.testing.assert_array_equal(inside.run({})["y"], got)
    np.testing.assert_array_equal(x, kept)


# ---- the planner's side: what may and may not be written over --------------------------------------


def _chain() -> onnx.ModelProto:
    """x -> QuantizeLinear -> q -> DequantizeLinear -> d, and x read again by the final Add: x is still
    needed after the quantize, so nothing may be written over it there."""
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zero = numpy_helper.from_array(np.array(3, np.int8), "z")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quantize"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dequantize"),
        helper.make_node("Add", ["d", "x"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 5))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3, 5))],
        [scale, zero],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _forced(problem, buffer_id: str, target: str):
    buffers = tuple(dataclasses.replace(b, alias_of=target) if b.id == buffer_id else b for b in problem.buffers)
    return problem.replace(buffers=buffers)


def test_the_checker_refuses_a_quantize_over_an_input_still_read_and_a_dequantize_over_its_input():
    graph = runtime.load_model(_chain(), fuse=False)
    problem = runtime.memory_problem(graph)
    assert all(b.alias_of is None for b in problem.buffers if b.id in ("q", "d"))  # x lives on; d is wider
    with pytest.raises(PlanError, match="'quantize' \\(QuantizeLinear\\) writes 'q' over the bytes of 'x'.*read at"):
        check_aliases(graph, _forced(problem, "q", "x"))
    with pytest.raises(
        PlanError, match="'dequantize' \\(DequantizeLinear\\) writes 'd' over the bytes of 'q'.*may not"
    ):
        check_aliases(graph, _forced(problem, "d", "q"))
