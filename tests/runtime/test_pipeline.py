"""Pipelines: a step model feeding an output layer through one buffer, against separate sessions
(4 copies) and onnxruntime; one joint arena against the sum of separate ones; bad connections."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from runtime import MemoryOptions, ModelError, Session, load_model
from runtime.pipeline import Pipeline
from tests.memory_models import mlp, rnn_feeds, rnn_output, rnn_step

V, H, N = 500, 32, 4


@pytest.fixture(scope="module")
def graphs():
    return load_model(rnn_step(V, H), {"N": N}), load_model(rnn_output(V, H), {"N": N})


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.fixture(scope="module")
def expected():
    feeds = rnn_feeds(N, V, H)
    h = _ort(rnn_step(V, H), feeds)
    return _ort(rnn_output(V, H), {"h": h})


def test_naive_path_copies_four_times_and_zero_copy_pipeline_none():
    first_model, second_model = mlp(features=16, classes=8, seed=1), mlp(features=8, classes=5, seed=2)
    first, second = (Session(load_model(m, {"N": N})).prepare() for m in (first_model, second_model))
    x = np.random.default_rng(3).standard_normal((N, 16)).astype(np.float32)
    y = second.run({"x": first.run({"x": x})["y"]})["y"]
    assert first.stats.copies + second.stats.copies == 4  # x in, y out; y in, y out
    assert first.stats.copied_bytes + second.stats.copied_bytes == x.nbytes + 2 * (N * 8 * 4) + y.nbytes
    np.testing.assert_allclose(y, _ort(second_model, {"x": _ort(first_model, {"x": x})}), rtol=1e-5, atol=1e-6)

    pipe = Pipeline(
        {"a": first.graph, "b": second.graph}, {"a:y": "b:x"}, options=MemoryOptions(io="external")
    ).prepare()
    out = np.empty_like(y)
    assert pipe.bind_input("a:x", x).zero_copy and pipe.bind_output("b:y", out).zero_copy
    assert pipe.run()["b:y"] is out
    assert (pipe.stats.copies, pipe.stats.copied_bytes) == (0, 0)
    np.testing.assert_array_equal(out, y)  # the same kernels on the same data: identical


def test_step_model_feeds_output_layer_without_copies(graphs, expected):
    step, head = graphs
    feeds = rnn_feeds(N, V, H)
    first, second = Session(step).prepare(), Session(head).prepare()
    probs = second.run({"h": first.run(feeds)["h"]})["probs"]
    assert first.stats.copies + second.stats.copies == 5  # two inputs of the step model, then as above
    np.testing.assert_allclose(probs, expected, rtol=1e-4, atol=1e-6)

    pipe = Pipeline({"step": step, "head": head}, {"step:h": "head:h"}, options=MemoryOptions(io="external")).prepare()
    out = np.empty((N, V), np.float32)
    for name in ("tokens", "h_prev"):
        assert pipe.bind_input(f"step:{name}", feeds[name]).zero_copy
    assert pipe.bind_output("head:probs", out).zero_copy
    pipe.run()
    assert (pipe.stats.copies, pipe.stats.copied_bytes) == (0, 0)
    np.testing.assert_array_equal(out, probs)


def test_connected_tensor_is_one_buffer_in_one_joint_arena(graphs):
    step, head = graphs
    pipe = Pipeline({"step": step, "head": head}, {"step:h": "head:h"}).prepare()
    assert pipe.graph.inputs == ("step:tokens", "step:h_prev") and pipe.graph.outputs == ("head:probs",)
    h = pipe.problem.buffer("step:h")
    assert h.kind == "activation" and "head:h" not in pipe.graph.tensors
    assert h.first == [n.name for n in pipe.graph.nodes].index("step:tanh")
    assert h.last == [n.name for n in pipe.graph.nodes].index("head:decode")
    separate = pipe.separate_arena_bytes()
    assert pipe.plan.arena_bytes < sum(separate.values())
    assert pipe.plan.arena_bytes >= max(separate.values()) - h.size


def test_three_models_and_canary(graphs, expected):
    step, head = graphs
    # the step model twice: the second continues from the first's state
    pipe = Pipeline(
        {"s1": step, "s2": step, "head": head},
        {"s1:h": "s2:h_prev", "s2:h": "head:h"},
        canary=True,
    ).prepare()
    feeds = rnn_feeds(N, V, H)
    got = pipe.run({"s1:tokens": feeds["tokens"], "s1:h_prev": feeds["h_prev"], "s2:tokens": feeds["tokens"]})
    h1 = _ort(rnn_step(V, H), feeds)
    h2 = _ort(rnn_step(V, H), {"tokens": feeds["tokens"], "h_prev": h1})
    np.testing.assert_allclose(got["head:probs"], _ort(rnn_output(V, H), {"h": h2}), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("connections", "message"),
    [
        ({"step:h": "head:x"}, "'x' is not one of model 'head''s inputs ['h']"),
        ({"step:nope": "head:h"}, "'nope' is not one of model 'step''s outputs ['h']"),
        ({"tail:h": "head:h"}, "source must be '<model>:<tensor>' with a model among ['step', 'head', 'other']"),
        ({"head:probs": "step:h_prev"}, "model 'head' must run before model 'step'"),
        ({"step:h": "other:x"}, "'step:h' is float32[4, 32] but 'other:x' takes float32[4, 7]"),
    ],
)
def test_bad_connections_name_the_tensors(graphs, connections, message):
    step, head = graphs
    other = load_model(mlp(features=7), {"N": N})
    with pytest.raises(ModelError) as info:
        Pipeline({"step": step, "head": head, "other": other}, connections)
    assert message in str(info.value)
