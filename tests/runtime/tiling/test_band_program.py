"""A float32 tiled stage run as one compiled call (`runtime.tiling.band_program`): the same plan and
arena as the step loop, outputs within the harness tolerance of the step loop's (canary on) and
onnxruntime's; the session says which route it took, and keeps the step loop where the call
cannot say a step or where kernels' scratch is planned in the arena."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import planner
from runtime import MemoryOptions, Session, load_model, memory_problem
from runtime.kernels.jit_bands import RUN
from runtime.tiling import chains, tiled_graph
from runtime.training.models import mobilenet_v2_like
from tests.runtime.kernels.harness import close, run_ort

ACTIVATIONS = MemoryOptions(io="external", workspace=False)  # scratch beside the arena: the compiled route

if RUN is None:
    pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)", allow_module_level=True)


@pytest.fixture(scope="module")
def mobilenet() -> onnx.ModelProto:
    return mobilenet_v2_like(size=40, width=0.35, classes=10)


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((1, 3, 40, 40)).astype(np.float32)


def _stage_steps(session: Session) -> int:
    """Steps of the tiled stage: the schedule's prefix up to its last TileRows."""
    return 1 + max(i for i, node in enumerate(session.graph.nodes) if node.op_type == "TileRows")


def _said(session: Session) -> int:
    """How many of the stage's steps the compiled calls took: steps with no time of their own."""
    assert session.stats is not None and session.stats.step_times is not None
    return int((session.stats.step_times[: _stage_steps(session)] == 0).sum())


@pytest.mark.parametrize(
    ("method", "rows", "io", "workspace"),
    [("stripes", 1, "external", False), ("patches", 2, "arena", False), ("stripes", 2, "external", True)],
)
def test_a_float_stage_runs_in_compiled_calls_to_the_step_loops_and_onnxruntimes_outputs(
    mobilenet, image, method, rows, io, workspace
):
    """Stem, depthwise, pointwise and residual steps, the stage's input outside the arena or in it,
    kernels' scratch beside the arena or planned in it (then the calls use the plan's)."""
    graph = load_model(mobilenet)
    # the longest head whose output has 5 rows
    chain = [c for c in chains(graph) if c.height(graph, c.output) >= 5][-1]
    ops = {n.op_type for n in chain.nodes}
    assert {"ConvAct", "PointwiseConvAdd"} <= ops, ops
    tiled = tiled_graph(graph, chain, rows, method)
    options = MemoryOptions(io=io, workspace=workspace)
    plan = planner.plan(memory_problem(tiled, options), "greedy_by_size")
    fast = Session(tiled, plan, options).prepare()
    assert "compiled call" in fast.stage_note, fast.stage_note
    got = fast.run({"x": image})
    stage = _stage_steps(fast)
    assert _said(fast) > stage * 3 // 4, fast.stage_note  # most of the stage's steps timed as one call's
    loop = Session(tiled, plan, options, canary=True).prepare()  # the canary's run is step by step
    want = loop.run({"x": image})
    assert _said(loop) == 0
    assert fast.plan is loop.plan and fast.arena is not None and loop.arena is not None
    assert fast.arena.nbytes == loop.arena.nbytes == plan.arena_bytes
    close(list(got.values()), list(want.values()), what="compiled stage against the step loop")
    close(list(got.values()), run_ort(mobilenet, {"x": image}), what="compiled stage against onnxruntime")
    flipped = image[:, :, ::-1].copy()  # a new input, read from its slot on every run
    close(list(fast.run({"x": flipped}).values()), run_ort(mobilenet, {"x": flipped}), what="second input")


def test_max_pool_add_and_relu_steps_compile_and_a_step_the_calls_cannot_say_runs_in_the_step_loop():
    """A ResNet-like head (Conv, MaxPool, Conv, Add, Relu) then an average pool, all in the stage:
    the note names the AveragePool left to the step loop, and the run is right."""
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((8, 3, 3, 3)) / 5).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p", "w2"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["d", "p"], ["s"]),
        helper.make_node("Relu", ["s"], ["t"]),
        helper.make_node("AveragePool", ["t"], ["a"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["a"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "pooled",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
            [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    graph = load_model(model)
    chain = next(c for c in chains(graph) if any(n.op_type == "AveragePool" for n in c.nodes))
    assert {"MaxPool", "Add", "Relu"} <= {n.op_type for n in chain.nodes}
    session = Session(tiled_graph(graph, chain, 2, "stripes"), "greedy_by_size", ACTIVATIONS).prepare()
    assert "compiled call" in session.stage_note and "AveragePool" in session.stage_note, session.stage_note
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = session.run({"x": x})
    assert 0 < _said(session) < _stage_steps(session)
    close(list(got.values()), run_ort(model, {"x": x}), what="compiled stage against onnxruntime")
