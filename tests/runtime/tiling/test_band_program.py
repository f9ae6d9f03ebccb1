"""A float32 tiled stage run as one compiled call (`runtime.tiling.band_program`): the same plan and
arena as the step loop, outputs within the harness tolerance of the step loop's (canary on) and
onnxruntime's; the session says which route it took, and keeps the step loop where the call
cannot say a step or where kernels' scratch is planned in the arena."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import planner
from runtime import MemoryOptions, Session, load_model, memory_problem
from runtime.tiling import chains, tiled_graph
from runtime.training.models import mobilenet_v2_like
from tests.runtime.kernels.harness import close

ACTIVATIONS = MemoryOptions(io="external", workspace=False)  # scratch beside the arena: the compiled route


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.fixture(scope="module")
def mobilenet() -> onnx.ModelProto:
    return mobilenet_v2_like(size=40, width=0.35, classes=10)


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((1, 3, 40, 40)).astype(np.float32)


def _stage_steps(session: Session) -> int:
    """Steps of the tiled stage: the schedule's prefix up to its last TileRows."""
    return 1 + max(i for i, node in enumerate(session.graph.nodes) if node.op_type == "TileRows")


@pytest.mark.parametrize(("method", "rows", "io"), [("stripes", 1, "external"), ("patches", 2, "arena")])
def test_a_float_stage_runs_as_one_call_to_the_step_loops_and_onnxruntimes_outputs(mobilenet, image, method, rows, io):
    graph = load_model(mobilenet)
    # the longest head whose output has 5 rows: stem, depthwise, pointwise and residual steps
    chain = [c for c in chains(graph) if c.height(graph, c.output) >= 5][-1]
    ops = {n.op_type for n in chain.nodes}
    assert {"ConvAct", "PointwiseConvAdd"} <= ops, ops
    tiled = tiled_graph(graph, chain, rows, method)
    options = MemoryOptions(io=io, workspace=False)
    plan = planner.plan(memory_problem(tiled, options), "greedy_by_size")
    fast = Session(tiled, plan, options).prepare()
    assert fast.stage_note.startswith("one compiled call"), fast.stage_note
    got = fast.run({"x": image})
    stage = _stage_steps(fast)
    assert fast.stats is not None and fast.stats.step_times is not None
    times = fast.stats.step_times
    assert times[0] > 0 and not times[1:stage].any()  # the stage's time is its first step's: one call
    loop = Session(tiled, plan, options, canary=True).prepare()  # the canary's run is step by step
    want = loop.run({"x": image})
    assert loop.stats is not None and loop.stats.step_times is not None and loop.stats.step_times[1:stage].all()
    assert fast.plan is loop.plan and fast.arena is not None and loop.arena is not None
    assert fast.arena.nbytes == loop.arena.nbytes == plan.arena_bytes
    close(list(got.values()), list(want.values()), what="compiled stage against the step loop")
    close(list(got.values()), _onnxruntime(mobilenet, {"x": image}), what="compiled stage against onnxruntime")
    again = fast.run({"x": image[:, :, ::-1].copy()})  # a new input, read from its slot on every run
    close(list(again.values()), _onnxruntime(mobilenet, {"x": image[:, :, ::-1].copy()}), what="second input")


def test_with_scratch_in_the_arena_the_stage_keeps_the_step_loop(mobilenet, image):
    graph = load_model(mobilenet)
    tiled = tiled_graph(graph, chains(graph)[2], 2, "stripes")
    session = Session(tiled, "greedy_by_size", MemoryOptions(io="external")).prepare()
    assert "workspace" in session.stage_note and "step loop" in session.stage_note
    got = session.run({"x": image})
    assert session.stats is not None and session.stats.step_times is not None
    assert session.stats.step_times[1 : _stage_steps(session)].all()
    close(list(got.values()), _onnxruntime(mobilenet, {"x": image}), what="step loop against onnxruntime")


def test_a_step_the_compiled_stage_cannot_say_leaves_the_stage_to_the_step_loop_and_names_it():
    """A max pool in the head: the note names it, and the run is the step loop's, right."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((8, 3, 3, 3)) / 5).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "pooled",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
            [numpy_helper.from_array(w, "w")],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    graph = load_model(model)
    chain = next(c for c in chains(graph) if any(n.op_type == "MaxPool" for n in c.nodes))
    session = Session(tiled_graph(graph, chain, 2, "stripes"), "greedy_by_size", ACTIVATIONS).prepare()
    assert "step loop" in session.stage_note and "MaxPool" in session.stage_note, session.stage_note
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    close(list(session.run({"x": x}).values()), _onnxruntime(model, {"x": x}), what="step loop against onnxruntime")
