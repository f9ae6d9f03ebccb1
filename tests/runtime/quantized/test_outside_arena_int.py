"""Integer kernels allocate little beside the arena: one-op models (and the shared int8 MobileNetV2) run
through the Session under tracemalloc, their bytes beside the arena held under a bound derived from the
kernel, their outputs equal to TensorFlow Lite Micro's (or within one step of onnxruntime's, for
QLinearConv's fixed-point requantization against its float one).

The cases are sized so that the routes these tests replaced fail them by far: TFLite's int8 ADD, SUB and
MUL made about eight int64 temporaries of the output's size (3 MB here), MEAN five of its output's, and
QLinearConv's bound calls without a workspace each kept blocks of their own between runs (one set per
node, all of them held at once)."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels import JIT_ENABLED as ENABLED
from runtime.kernels import UFUNC_BUFFER
from runtime.kernels.quantized.tflite_elementwise import NUMPY_BLOCK
from runtime.options import MemoryOptions
from runtime.problem import memory_problem
from tests.runtime.kernels.harness import close, run_ort
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, run_tflm
from tests.runtime.tflite.shared import model_bytes

I8 = np.int8
RNG = np.random.default_rng(29)
OBJECTS = 16 * 1024  # Python's own objects in a call: views, tuples, a kernel's parameters of a few values


def _traced(model, feeds: list[np.ndarray], options: MemoryOptions | None = None):
    """The session's outputs, bytes beside the arena on a traced run (after an untraced one: numpy sets
    its own machinery up on a first call) and arena bytes."""
    graph = runtime.load_model(model)
    session = runtime.Session(graph, "greedy_by_size", options).prepare()
    named = dict(zip(graph.inputs, feeds, strict=True))
    session.run(named)
    outputs = session.run(named, measure="memory")
    assert session.stats.outside_arena_bytes is not None
    return list(outputs.values()), session.stats.outside_arena_bytes, session.stats.arena_bytes


def _int8(shape) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype(I8)


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize("second", [(1, 32, 32, 48), (1, 1, 1, 48)], ids=["same_shape", "broadcast"])
def test_tflite_binary_keeps_its_sums_in_the_workspace(op, second):
    shape = (1, 32, 32, 48)
    inputs = [Tensor(shape, I8, q(0.05, 3)), Tensor(second, I8, q(0.031, -7))]
    model = one_op_model(op, inputs, [Tensor(shape, I8, q(0.05 if op == "MUL" else 0.04, 2))],
                         {"fused_activation_function": "RELU6"})  # fmt: skip
    feeds = [_int8(shape), _int8(second)]
    got, outside, _ = _traced(model, feeds)
    # Compiled: nothing of the output's size (its block of sums is workspace). numpy's route: a block of
    # NUMPY_BLOCK elements at a time, at most eight int64 temporaries of it.
    bound = OBJECTS + (0 if ENABLED else 8 * 8 * NUMPY_BLOCK)
    assert outside <= bound, f"{op}: {outside:,} bytes beside the arena (bound {bound:,})"
    want = run_tflm(model, feeds)[0]
    np.testing.assert_array_equal(got[0], want)
    assert len(np.unique(want)) > 20  # not saturated everywhere


def test_tflite_mean_requantizes_from_its_workspace():
    shape, out_shape = (1, 2, 2, 4096), (1, 1, 1, 4096)
    inputs = [Tensor(shape, I8, q(0.05, 3)), Tensor((2,), np.int32, None, np.array([1, 2], np.int32))]
    model = one_op_model("MEAN", inputs, [Tensor(out_shape, I8, q(0.02, -1))], {"keep_dims": True})
    feeds = [_int8(shape)]
    got, outside, _ = _traced(model, feeds)
    # The sums are workspace; numpy's reduction buffers its int8-to-int64 cast a ufunc buffer at a time.
    bound = OBJECTS + 9 * UFUNC_BUFFER + (0 if ENABLED else 5 * 8 * 4096)
    assert outside <= bound, f"MEAN: {outside:,} bytes beside the arena (bound {bound:,})"
    np.testing.assert_array_equal(got[0], run_tflm(model, feeds)[0])


def _conv_weights(layers: int = 6, channels: int = 32) -> list[list[onnx.TensorProto]]:
    """Per layer: an int8 1x1 filter with per-channel scales, its zero points and int32 bias."""
    made = []
    for i in range(layers):
        made.append([
            numpy_helper.from_array(RNG.integers(-127, 128, (channels, channels, 1, 1)).astype(I8), f"w{i}"),
            numpy_helper.from_array((RNG.random(channels) * 0.004 + 0.001).astype(np.float32), f"ws{i}"),
            numpy_helper.from_array(np.zeros(channels, I8), f"wz{i}"),
            numpy_helper.from_array(RNG.integers(-500, 500, channels).astype(np.int32), f"b{i}"),
        ])  # fmt: skip
    return made


def _conv_chain(weights: list[list[onnx.TensorProto]], first: int, last: int, size: int = 24) -> onnx.ModelProto:
    """Layers first..last (1x1 QLinearConvs, each read by the next): input x or y{first - 1}, output y{last}."""
    nodes = []
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(2, I8), "z")]
    for i in range(first, last + 1):
        inits += weights[i]
        x = "x" if i == 0 else f"y{i - 1}"
        inputs = [x, "s", "z", f"w{i}", f"ws{i}", f"wz{i}", "s", "z", f"b{i}"]
        nodes.append(helper.make_node("QLinearConv", inputs, [f"y{i}"], name=f"conv{i}"))
    shape = [1, int(weights[0][0].dims[0]), size, size]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info(nodes[0].input[0], TensorProto.INT8, shape)],
        [helper.make_tensor_value_info(f"y{last}", TensorProto.INT8, shape)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


COMPILED_ROUTES = pytest.mark.skipif(not ENABLED, reason="the numpy routes of convolutions make their own temporaries")


@COMPILED_ROUTES
def test_qlinear_conv_without_workspace_shares_one_scratch():
    """With scratch outside the arena (workspace=False) every QLinearConv takes the thread's one shared
    buffer: what a traced run holds beside the arena is the largest node's scratch, not their sum. Each
    layer's output is within one step of onnxruntime's (its float requantization against TFLite's fixed
    point) on the same input, the layer before's as memplan wrote it."""
    weights = _conv_weights()
    model = _conv_chain(weights, 0, len(weights) - 1)
    planned = memory_problem(runtime.load_model(model), MemoryOptions(io="external"))
    scratch = [b.size for b in planned.buffers if b.kind == "workspace"]
    assert len(scratch) == 6 and max(scratch) > OBJECTS  # each node has scratch, more than the slack
    x = _int8((1, 32, 24, 24))
    # In a thread of its own: the thread's shared scratch is then this model's, not a larger one an earlier
    # test in the process left (a traced run counts the buffer the thread holds).
    found: list[int] = []
    thread = threading.Thread(
        target=lambda: found.append(_traced(model, [x], MemoryOptions(io="external", workspace=False))[1])
    )
    thread.start()
    thread.join()
    (outside,) = found
    bound = max(scratch) + OBJECTS
    assert outside <= bound, f"{outside:,} bytes beside the arena (bound {bound:,}; the nodes' scratch {scratch})"
    session = runtime.Session(runtime.load_model(model), "greedy_by_size", MemoryOptions(workspace=False))
    layers = session.capture({"x": x}, [f"y{i}" for i in range(len(weights))])
    for i in range(len(weights)):
        given = x if i == 0 else layers[f"y{i - 1}"]
        want = run_ort(_conv_chain(weights, i, i), {"x" if i == 0 else f"y{i - 1}": given})[0]
        close([layers[f"y{i}"].astype(np.float32)], [want.astype(np.float32)], rtol=0, atol=1, what=f"conv{i}")
        assert len(np.unique(want)) > 20  # not saturated everywhere


@COMPILED_ROUTES
def test_int8_mobilenet_v2_allocates_little_beside_the_arena():
    """The shared int8 MobileNetV2 untiled with scratch planned: under max(1% of the arena, 64 KiB) as the
    float models (tests/runtime/test_outside_arena.py); its largest ADD alone held 4.9 MB before."""
    model = model_bytes("mobilenet_v2_quantized_1x3x224x224")
    graph = runtime.load_model(model)
    feeds = [_int8(graph.tensors[name].shape) for name in graph.inputs]
    _, outside, arena = _traced(model, feeds)
    bound = max(arena // 100, 64 * 1024)
    assert outside <= bound, f"{outside:,} bytes beside an arena of {arena:,} (bound {bound:,})"


@pytest.mark.parametrize("workspace", [True, False])
def test_fully_connected_prepares_with_its_input_held_by_the_caller(workspace):
    """hello_world's first FULLY_CONNECTED reads the graph input, which io="external" leaves to the caller:
    the session prepares without that array (its compiled loop primed on the input's meta), and the run
    equals TensorFlow Lite Micro's and holds little beside the arena."""
    model = model_bytes("hello_world_int8")
    graph = runtime.load_model(model)
    feeds = [_int8(graph.tensors[name].shape) for name in graph.inputs]
    got, outside, _ = _traced(model, feeds, MemoryOptions(io="external", workspace=workspace))
    np.testing.assert_array_equal(got[0], run_tflm(model, feeds)[0])
    assert outside <= OBJECTS
