"""Kernel scratch of a tiled stage, measured by the buffers really held: with scratch planned in the
arena, the band steps take none of the thread's shared scratch (the checker judges their
workspace, the canary guards it); without a workspace they share that buffer beside the arena,
and a traced run counts its bytes among those it reports beside the arena."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import planner
from runtime import CanaryError, MemoryOptions, Session, load_model, memory_problem
from runtime.kernels import shared_scratch, shared_scratch_held
from runtime.tiling import chains, tiled_graph
from tests.runtime.kernels.harness import close

ACTIVATIONS = MemoryOptions(io="external", workspace=False)
SCRATCH = MemoryOptions(io="external")


@pytest.fixture(scope="module")
def model():
    """Two 3x3 convolutions (the second of stride 2) and a 1x1 one, tileable whole, then a pool."""
    rng = np.random.default_rng(0)

    def weights(name: str, *shape: int) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("GlobalAveragePool", ["c3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "band_scratch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])],
        [weights("w1", 16, 8, 3, 3), weights("b1", 16), weights("w2", 16, 16, 3, 3), weights("b2", 16)]
        + [weights("w3", 16, 16, 1, 1)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def graphs(model):
    graph = load_model(model)
    chain = max(chains(graph), key=lambda c: len(c.nodes))
    assert len(chain.nodes) == 3  # the three convolutions, their Relus fused in at load
    return graph, tiled_graph(graph, chain, 2, "stripes")


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, 8, 32, 32)).astype(np.float32)


def _in_a_fresh_thread(graph, image, options: MemoryOptions = ACTIVATIONS) -> dict[str, Any]:
    """A traced run (none without a graph), and the thread's shared scratch after it, in a thread
    of its own (the shared scratch is one buffer per thread: a new thread starts without one)."""
    found: dict[str, Any] = {}

    def body() -> None:
        try:
            if graph is not None:
                session = Session(graph, "greedy_by_size", options, canary=True).prepare()
                found["y"] = session.run({"x": image}, measure="memory")["y"]
                found["outside"] = session.stats.outside_arena_bytes
            found["held"] = shared_scratch(0).nbytes  # the buffer the run's calls took, or a new least one
        except Exception as e:  # told in the test's thread, not lost in this one
            found["error"] = e

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if "error" in found:
        raise found["error"]
    return found


def test_with_scratch_planned_band_steps_take_none_beside_the_arena_and_match_onnxruntime(model, graphs, image):
    _, tiled = graphs
    planned = [b for b in memory_problem(tiled, SCRATCH).buffers if b.kind == "workspace"]
    assert sum("@" in b.id for b in planned) > 1  # the bands' own scratch, in the arena
    banded = _in_a_fresh_thread(tiled, image, SCRATCH)
    least = _in_a_fresh_thread(None, image)["held"]  # a thread's new buffer when no call took one
    assert banded["held"] == least  # no band step took the shared buffer
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": image})
    close([banded["y"]], want, what="tiled run against onnxruntime")


def test_a_traced_tiled_run_without_a_workspace_counts_the_shared_scratch_beside_the_arena(model, graphs, image):
    _, tiled = graphs
    banded = _in_a_fresh_thread(tiled, image)
    assert banded["outside"] >= banded["held"] > _in_a_fresh_thread(None, image)["held"]
    assert shared_scratch_held() == 0  # this thread's loops took none since its last read
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": image})
    close([banded["y"]], want, what="tiled run against onnxruntime")


def test_the_checker_and_the_canary_catch_a_band_scratch_over_rows_a_later_band_reads(graphs, image):
    _, tiled = graphs
    problem = memory_problem(tiled, SCRATCH)
    plan = planner.plan(problem, "greedy_by_size")
    scratch = [b for b in problem.buffers if b.kind == "workspace" and b.size > 0]
    # The rows of a band that a later band still reads, alive across the scratch of another step.
    tiles = [b for b in problem.buffers if b.kind == "activation" and "placed" not in b.id and b.alias_of is None]
    fits = [(t, s) for s in scratch for t in tiles if t.first < s.first < t.last]
    kept, ws = max(
        ((t, s) for t, s in fits if plan.offsets[t.id].offset + s.size <= plan.arena_bytes),
        key=lambda pair: (pair[0].last - pair[0].first, pair[1].size, pair[0].id, pair[1].id),
    )
    offsets = dict(plan.offsets)
    offsets[ws.id] = dataclasses.replace(offsets[ws.id], offset=offsets[kept.id].offset)
    wrong = dataclasses.replace(plan, offsets=offsets)
    assert not planner.check_plan(problem, wrong).ok
    session = Session(tiled, wrong, SCRATCH, canary=True, check=False, problem=problem).prepare()
    with pytest.raises(CanaryError) as caught:
        session.run({"x": image})
    assert kept.id in str(caught.value)
