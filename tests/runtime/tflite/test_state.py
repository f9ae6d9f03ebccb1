"""States carried from run to run: a Session keeps a `.tflite` model's variable tensors (an SVDF's
memory) between `run` calls and `reset_state` clears them, as TensorFlow Lite Micro's interpreter
does between `invoke` calls and on `reset`. Oracle: TFLM's consecutive invocations, every output
(and every state byte) equal for int8, within float32 rounding for float."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from runtime.session import Session
from tests.runtime.kernels.harness import close
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, run_tflm_steps
from tests.runtime.tflite.shared import model_bytes

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")


def _preserving(data: bytes):
    return tflm.Interpreter.from_bytes(
        data, arena_size=1 << 20, intrepreter_config=tflm.InterpreterConfig.kPreserveAllTensors
    )


def test_keyword_scrambled_carries_every_svdf_state_like_tflm():
    data = model_bytes("keyword_scrambled_8bit")
    graph = runtime.load_model(data)
    svdf = [n for n in graph.nodes if n.op_type == "SVDF"]
    watched = [n.outputs[0] for n in svdf]  # the softmax at the end saturates: the SVDF outputs show more
    states = [n.inputs[4] for n in svdf]
    index = {name: int(name.rsplit("_", 1)[1]) for name in [*watched, *states]}  # the reader's tensor_<i> names
    session, oracle = Session(graph), _preserving(data)
    rng = np.random.default_rng(3)
    for step in range(7):
        if step == 5:  # both start over
            session.reset_state()
            oracle.reset()
        x = rng.integers(-3000, 3000, (1, 96)).astype(np.int16)
        got = session.capture({graph.inputs[0]: x}, watched)
        oracle.set_input(x, 0)
        oracle.invoke()
        for name in watched:
            expected = oracle.GetTensor(index[name], 0)["tensor_data"]
            assert np.array_equal(got[name], expected), f"step {step}: {name} differs from TFLM"
        for name in states:
            expected = oracle.GetTensor(index[name], 0)["tensor_data"]
            assert np.array_equal(session.states.arrays[name], expected), f"step {step}: state {name} differs from TFLM"
    assert (
        len(np.unique(session.states.arrays[states[0]])) > 8
    )  # the scrambled weights saturate the outputs, not the states
    assert session.states.nbytes == sum(graph.tensors[s].nbytes for s in states)


def _svdf(dtype, state_dtype=np.int8, rank=2, batches=2, depth=12, filters=8, memory=5, seed=0):
    rng = np.random.default_rng(seed)
    units = filters // rank
    if dtype == np.float32:
        inputs = [
            Tensor((batches, depth), np.float32),
            Tensor((filters, depth), np.float32, data=rng.standard_normal((filters, depth)).astype(np.float32) * 0.3),
            Tensor((filters, memory), np.float32, data=rng.standard_normal((filters, memory)).astype(np.float32) * 0.3),
            Tensor((units,), np.float32, data=rng.standard_normal(units).astype(np.float32)),
            Tensor((batches, filters * memory), np.float32, variable=True),
        ]
        return inputs, [Tensor((batches, units), np.float32)]
    state_scale, time_scale = (0.02, 0.01) if state_dtype == np.int8 else (0.0005, 0.0004)
    time_info = np.iinfo(state_dtype)
    inputs = [
        Tensor((batches, depth), np.int8, q(0.05, 3)),
        Tensor((filters, depth), np.int8, q(0.004), rng.integers(-127, 128, (filters, depth)).astype(np.int8)),
        Tensor((filters, memory), state_dtype, q(time_scale),
               rng.integers(time_info.min // 2, time_info.max // 2, (filters, memory)).astype(state_dtype)),
        Tensor((units,), np.int32, q(np.float32(state_scale) * np.float32(time_scale)),
               rng.integers(-2000, 2000, units).astype(np.int32)),
        Tensor((batches, filters * memory), state_dtype, q(state_scale, 5 if state_dtype == np.int8 else 0),
               variable=True),
    ]  # fmt: skip
    return inputs, [Tensor((batches, units), np.int8, q(0.08, -4))]


@pytest.mark.parametrize(
    "dtype,state_dtype,route",
    [(np.int8, np.int8, "compiled"), (np.int8, np.int16, "compiled"), (np.int8, np.int8, "numpy"),
     (np.int8, np.int16, "numpy"), (np.float32, np.float32, "numpy")],
    ids=["int8", "int16-state", "int8-numpy", "int16-state-numpy", "float"],
)  # fmt: skip
def test_generated_svdf_runs_like_consecutive_tflm_invocations(monkeypatch, dtype, state_dtype, route):
    from runtime.kernels.quantized import tflite_svdf

    if route == "numpy":
        monkeypatch.setattr(tflite_svdf, "SVDF", None)
    elif tflite_svdf.SVDF is None:
        pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
    inputs, outputs = _svdf(dtype, state_dtype)
    activation = "RELU" if dtype == np.float32 else "NONE"
    data = one_op_model("SVDF", inputs, outputs, {"rank": 2, "fused_activation_function": activation})
    rng = np.random.default_rng(5)
    if dtype == np.float32:
        steps = [[rng.standard_normal((2, 12)).astype(np.float32)] for _ in range(8)]
    else:
        steps = [[rng.integers(-128, 128, (2, 12)).astype(np.int8)] for _ in range(8)]
    expected = [outs[0] for outs in run_tflm_steps(data, steps)]
    graph = runtime.load_model(data)
    session = Session(graph)
    got = [session.run({graph.inputs[0]: feeds[0]})[graph.outputs[0]] for feeds in steps]
    session.reset_state()
    again = session.run({graph.inputs[0]: steps[0][0]})[graph.outputs[0]]
    for step, (g, e) in enumerate(zip(got, expected, strict=True)):
        if dtype == np.float32:
            close([g], [e], rtol=1e-5, atol=1e-5, what=f"step {step}")
        else:
            assert np.array_equal(g, e), f"step {step}: {int((g != e).sum())} elements differ from TFLM"
    np.testing.assert_array_equal(again, got[0])
    assert not np.array_equal(got[-1], got[0]) and len(np.unique(np.concatenate(got))) > 8


@pytest.mark.parametrize("dtype", [np.int8, np.float32], ids=["int8", "float"])
def test_run_verify_judges_the_first_run_of_a_stateful_model(tmp_path, dtype):
    """`memplan run --verify` runs the model several times (memory, then timed runs): the outputs it
    judges are the first run's, from reset states, and TFLM's fresh interpreter agrees."""
    from app.services.execute import run_model
    from runtime import MemoryOptions
    from tests.runtime.quantized.tflite_ops import lstm_tensors

    inputs, outputs = lstm_tensors(dtype, steps=3)
    path = tmp_path / "lstm.tflite"
    options = {"fused_activation_function": "TANH", "time_major": False}
    path.write_bytes(one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, options))
    report = run_model(
        path, dims={}, strategy="greedy_by_size", inputs=None, save_outputs=None, seed=0, repeat=3,
        memory=MemoryOptions(), canary=False, verify=True,
    )  # fmt: skip
    verdict = report["verification"]
    assert verdict["oracle"] == "tflite-micro" and verdict["passed"] is True, verdict
    itemsize = np.dtype(dtype).itemsize
    assert report["state_bytes"] == 2 * 4 * itemsize + 2 * 4 * (2 if dtype == np.int8 else 4)  # hidden, cell


def test_sessions_sharing_parameters_keep_states_of_their_own():
    """Through a ParameterStore the weights are shared, never the states: two sessions of
    keyword_scrambled carry their own memories, and each equals a lone session's."""
    from runtime.params import ParameterStore

    data = model_bytes("keyword_scrambled_8bit")
    graph = runtime.load_model(data)
    store = ParameterStore()
    first, second, alone = Session(graph, params=store), Session(graph, params=store), Session(graph)
    rng = np.random.default_rng(4)
    xs = [rng.integers(-3000, 3000, (1, 96)).astype(np.int16) for _ in range(3)]
    for x in xs:
        for s in (first, alone):
            s.run({graph.inputs[0]: x})
    second.run({graph.inputs[0]: xs[0]})
    name = next(n.inputs[4] for n in graph.nodes if n.op_type == "SVDF")
    assert np.array_equal(first.states.arrays[name], alone.states.arrays[name])
    assert not np.array_equal(first.states.arrays[name], second.states.arrays[name])
