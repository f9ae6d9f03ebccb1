"""R's panels (`runtime.kernels.jit_panels`) and a session's bound recurrent call
(`runtime.kernels.rnn_plan`): its plan made once when the session prepares, reused by every run."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels import jit_panels, jit_rnn, rnn_plan
from tests.runtime.kernels.harness import run_ort


@pytest.mark.parametrize(("gates", "hidden"), [(3, 64), (4, 37), (1, 130)])
def test_panels_hold_each_gate_block_state_major_and_zero_padded(gates, hidden):
    r = np.random.default_rng(hidden).standard_normal((2, gates * hidden, hidden)).astype(np.float32)
    packed = jit_panels.pack(r)
    per = jit_panels.panels_per_block(hidden)
    size = hidden * jit_panels.PANEL
    assert packed.shape == (2, gates * per * size) and packed.flags.c_contiguous and packed.ctypes.data % 64 == 0
    for d in range(2):
        for g in range(gates):
            for q in range(per):
                panel = packed[d, (g * per + q) * size :][:size].reshape(hidden, jit_panels.PANEL)
                rows = r[d, g * hidden + q * jit_panels.PANEL : (g + 1) * hidden][: jit_panels.PANEL]
                np.testing.assert_array_equal(panel[:, : len(rows)], rows.T)
                assert not panel[:, len(rows) :].any()


def _gru_model(hidden: int = 40, size: int = 12, seq: int = 9):
    rng = np.random.default_rng(3)
    weights = {
        "w": rng.standard_normal((1, 3 * hidden, size)) * 0.3,
        "r": rng.standard_normal((1, 3 * hidden, hidden)) * 0.3,
        "b": rng.standard_normal((1, 6 * hidden)) * 0.3,
    }
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    node = helper.make_node("GRU", ["x", "w", "r", "b", "", "h0"], ["y", "yh"], hidden_size=hidden,
                            linear_before_reset=1)  # fmt: skip
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, size]),
         helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, 1, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, 1, 1, hidden]),
         helper.make_tensor_value_info("yh", TensorProto.FLOAT, [1, 1, hidden])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), rng


def test_a_session_makes_the_plan_at_prepare_and_reuses_it(monkeypatch):
    """Runs with new values in the same arrays take the plan made at prepare (with R's panels:
    R is constant), and each matches onnxruntime."""
    if jit_rnn.gru_loop is None:
        pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
    model, rng = _gru_model()
    made: list[rnn_plan.Plan] = []
    plan = rnn_plan.plan

    def counted(*args, **kwargs):
        made.append(plan(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(rnn_plan, "plan", counted)
    session = runtime.Session(runtime.load_model(model), "greedy_by_size").prepare()
    assert len(made) == 1 and made[0].arguments[0][3]  # made at prepare, over R's panels
    for _ in range(3):
        feeds = {"x": rng.standard_normal((9, 1, 12)).astype(np.float32),
                 "h0": rng.standard_normal((1, 1, 40)).astype(np.float32)}  # fmt: skip
        got = session.run(feeds)
        for g, want in zip(got.values(), run_ort(model, feeds), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=2e-5)
    assert len(made) == 1


@pytest.mark.parametrize("io", ["external", "arena"])
def test_a_recurrence_reading_a_graph_input_from_outside_the_arena_runs(io, monkeypatch):
    """With graph inputs outside the arena (the caller's arrays, bound at run) and the
    recurrence's outputs inside it, prepare has no x to make the plan from: the plan is made at
    the first run instead, kept by the runs after it (new arrays of the same shapes), and
    matches onnxruntime."""
    made: list[rnn_plan.Plan | None] = []
    plan = rnn_plan.plan

    def counted(*args, **kwargs):
        made.append(plan(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(rnn_plan, "plan", counted)
    model, rng = _gru_model()
    graph = model.graph
    graph.node.append(helper.make_node("Neg", ["y"], ["z"]))  # y into the arena: the call is primed
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [9, 1, 1, 40]))
    session = runtime.Session(runtime.load_model(model), "greedy_by_size", runtime.MemoryOptions(io=io))
    for _ in range(3):
        feeds = {"x": rng.standard_normal((9, 1, 12)).astype(np.float32),
                 "h0": rng.standard_normal((1, 1, 40)).astype(np.float32)}  # fmt: skip
        got = session.run(feeds)
        np.testing.assert_allclose(got["z"], run_ort(model, feeds)[0], rtol=1e-4, atol=2e-5)
    assert len(made) == 1
