"""Executing plans whose alias groups change size over time (concat in place, in-place ops,
pooling over its input): every strategy's plan passes the checker and the runtime's alias
check, runs with the canary on, and gives onnxruntime's outputs (and onnx.reference's)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import planner
from planner.aliases import rigid
from planner.placement import Blocks
from runtime import MemoryOptions, Session, load_model, memory_problem
from runtime.inplace import alias_hazards


def dense_inception_block() -> onnx.ModelProto:
    """A stem, then a DenseNet-like block (each conv's output concatenated with what came
    before, written in place into its slice), an Inception-like block of parallel branches
    (a pooling branch among them) concatenated, MaxPool over the concat and a head."""
    rng = np.random.default_rng(7)
    inits = []

    def conv(name, x, cin, cout, k):
        inits.append(
            numpy_helper.from_array((rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32), name + "_w")
        )
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), name + "_b"))
        pad = k // 2
        return helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], name=name, pads=[pad] * 4)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 6, 6])
    nodes = [
        conv("stem", "x", 4, 8, 3),
        helper.make_node("Relu", ["stem"], ["s"], name="stem_relu"),
        # dense block: d1 from s, d2 from [d1, s]... each concat takes what came before
        conv("d1", "s", 8, 4, 1),
        helper.make_node("Relu", ["d1"], ["d1r"], name="d1_relu"),
        conv("d2", "d1r", 4, 4, 3),
        helper.make_node("Sigmoid", ["d2"], ["d2s"], name="d2_sigmoid"),
        helper.make_node("Concat", ["d1r", "d2s"], ["dense"], name="dense_cat", axis=1),
        # inception block over the dense output
        conv("i1", "dense", 8, 4, 1),
        conv("i2a", "dense", 8, 4, 1),
        helper.make_node("Relu", ["i2a"], ["i2ar"], name="i2a_relu"),
        conv("i2", "i2ar", 4, 6, 3),
        helper.make_node(
            "AveragePool", ["dense"], ["ipool"], name="ipool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]
        ),
        conv("i3", "ipool", 8, 2, 1),
        helper.make_node("Concat", ["i1", "i2", "i3"], ["incept"], name="incept_cat", axis=1),
        helper.make_node("Relu", ["incept"], ["ir"], name="incept_relu"),
        helper.make_node("MaxPool", ["ir"], ["pooled"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        conv("head", "pooled", 12, 5, 1),
        helper.make_node("Tanh", ["head"], ["y"], name="head_tanh"),
    ]
    graph = helper.make_graph(nodes, "dense_inception", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


MODEL = dense_inception_block()
FEEDS = {"x": np.random.default_rng(8).standard_normal((1, 4, 12, 12)).astype(np.float32)}
OPTIONS = MemoryOptions(fuse=False)  # keep every Relu a node of its own, to go in place


@pytest.fixture(scope="module")
def graph():
    return load_model(MODEL, fuse=False)


@pytest.fixture(scope="module")
def expected():
    return ort.InferenceSession(MODEL.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, FEEDS)[0]


def test_the_model_has_groups_whose_size_changes(graph):
    problem = memory_problem(graph, OPTIONS)
    links = {b.id: (b.alias_of, b.alias_offset) for b in problem.buffers if b.alias_of}
    assert links["d1r"] == ("d1", 0) and links["d2s"] == ("d2", 0)  # Relu, Sigmoid in place
    assert links["i1"] == ("incept", 0)  # a concat slice
    assert links["i2"] == ("i2ar", 0) and links["i3"] == ("ipool", 0)  # convs over their dying input
    assert links["ir"] == ("incept", 0)  # Relu in place over the concat
    assert links["ipool"] == ("dense", 0)  # AveragePool over its dying input, same size
    assert links["pooled"] == ("ir", 0)  # MaxPool over its dying input: a smaller output
    assert Blocks.of(problem).profiles  # some group is not one rectangle
    assert not alias_hazards(graph, problem)
    # Counted step by step, the groups hold fewer bytes than as rectangles.
    assert planner.load(problem) <= planner.load(rigid(problem))
    assert planner.live_bytes(problem).sum() < planner.live_bytes(rigid(problem)).sum()


@pytest.mark.parametrize("strategy", planner.names())
def test_every_strategy_runs_the_model_with_the_canary_on(graph, expected, strategy):
    session = Session(graph, strategy, OPTIONS, canary=True).prepare()
    assert planner.check_plan(session.problem, session.plan).ok
    assert not alias_hazards(graph, session.problem)
    got = session.run(FEEDS)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_outputs_match_onnx_reference(graph):
    want = ReferenceEvaluator(MODEL).run(None, FEEDS)[0]
    got = Session(graph, "optimal", OPTIONS, canary=True).run(FEEDS)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_plan_uses_a_group_s_upper_bytes_while_they_are_free(graph, expected):
    """The point of profiles: some tensor sits inside a group's full rectangle, at a step
    where the group's live members do not reach that high; and the run is still right."""
    problem = memory_problem(graph, OPTIONS)
    session = Session(graph, "optimal", OPTIONS, canary=True).prepare()
    plan = session.plan
    # Smaller than any plan of rigid groups can be: their LOAD is a lower bound on those.
    assert plan.arena_bytes < planner.load(rigid(problem))
    blocks = Blocks.of(problem)
    bufs = problem.buffers
    used = False
    for k, pieces in blocks.profiles.items():
        members = {bufs[i].id for i, _ in blocks.members_of(k)}
        base = plan.offset(blocks.ids[k])
        top = base + int(blocks.size[k])
        for b in bufs:
            if b.id in members or not b.size:
                continue
            at = plan.offset(b.id)
            for first, last, height in pieces:
                if b.first <= last and first <= b.last and at < top and base + height <= at:
                    used = True
    assert used
    np.testing.assert_allclose(session.run(FEEDS)["y"], expected, rtol=1e-5, atol=1e-5)
