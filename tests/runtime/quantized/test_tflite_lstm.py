"""UNIDIRECTIONAL_SEQUENCE_LSTM against TensorFlow Lite Micro: one-operator `.tflite` models written
here (24 inputs, the optional ones left out, hidden and cell state as variable tensors), run by
memplan's Session and by TFLM's interpreter over several consecutive invocations, so that the
states carried from run to run are checked too. int8 outputs must equal TFLM's bit for bit; float
ones within float32 rounding (TFLM sums in another order)."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from runtime.session import Session
from tests.runtime.kernels.harness import close
from tests.runtime.quantized.tflite_ops import Tensor, lstm_tensors, one_op_model, q, recorded_calls, run_tflm_steps

pytest.importorskip("tflite_micro")


def run_both(dtype, options, invocations=3, memory=None, **shape):
    inputs, outputs = lstm_tensors(dtype, **shape)
    data = one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, options)
    rng = np.random.default_rng(11)
    x = inputs[0]
    if dtype == np.float32:
        feeds = [[rng.standard_normal(x.shape).astype(np.float32)] for _ in range(invocations)]
    else:
        feeds = [[rng.integers(-128, 128, x.shape).astype(np.int8)] for _ in range(invocations)]
    expected = [outs[0] for outs in run_tflm_steps(data, feeds)]
    graph = runtime.load_model(data)
    session = Session(graph, options=memory)
    got = [np.array(session.run({graph.inputs[0]: f[0]})[graph.outputs[0]]) for f in feeds]
    return got, expected, session


OPTIONS = {"fused_activation_function": "TANH", "cell_clip": 0.0, "proj_clip": 0.0, "time_major": False}


def order_rtol(steps: int, depth: int = 5, units: int = 4) -> float:
    """How far two float32 LSTMs may drift apart by summing in another order (another CPU's vector
    width or fused multiply-adds): each gate sums depth + units products and a bias, a rounding of
    each product and of the running sum, and each step carries the last one's on; `lstm_tensors`'
    default sizes."""
    return 2 * steps * (depth + units + 1) * float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("time_major", [False, True], ids=["batch-major", "time-major"])
def test_float_lstm_matches_tflm_over_consecutive_invocations(time_major):
    got, expected, _ = run_both(np.float32, {**OPTIONS, "time_major": time_major}, time_major=time_major)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        close([g], [e], rtol=order_rtol(3 * 3), atol=1e-6, what=f"invocation {k}")
    assert not np.allclose(got[0], got[1])


@pytest.mark.parametrize(
    "time_major,cell_clip,cell_scale",
    [(False, 0.0, 2.0**-11), (True, 0.0, 2.0**-11), (False, 0.5, 2.0**-12), (False, 0.0, 2.0**-15)],
    ids=["batch-major", "time-major", "clipped", "fine-cell"],
)
def test_int8_lstm_is_bit_exact_against_tflm(time_major, cell_clip, cell_scale):
    options = {**OPTIONS, "time_major": time_major, "cell_clip": cell_clip}
    got, expected, session = run_both(np.int8, options, time_major=time_major, cell_scale=cell_scale, steps=4)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        differ = int((g != e).sum())
        assert differ == 0, f"invocation {k}: {differ} of {g.size} elements differ from TFLM"
    assert len(np.unique(np.concatenate(got))) > 12, "the outputs barely vary; the case tests little"
    session.reset_state()
    assert session.states.nbytes == 2 * 4 + 2 * 4 * 2  # int8 hidden and int16 cell state, 2 rows of 4 units


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
def test_the_int16_lookups_equal_tflms_over_every_int16(op):
    """The LSTM's sigmoid and tanh on Q3.12 against TFLM's own int16 LOGISTIC and TANH, every input."""
    from runtime.kernels.quantized.tflite_lstm_int import SIGMOID_TABLE, logistic16, tanh16

    x = np.arange(-32768, 32768, dtype=np.int16)
    model = one_op_model(op, [Tensor(x.shape, np.int16, q(2.0**-12))], [Tensor(x.shape, np.int16, q(2.0**-15))], {})
    expected = run_tflm_steps(model, [[x]])[0][0]
    got = logistic16(x) if op == "LOGISTIC" else tanh16(x)
    assert got.dtype == np.int16
    differ = np.flatnonzero(got != expected)
    assert differ.size == 0, f"{op}: {differ.size} inputs differ, the first at {x[differ[:5]]}"
    from runtime.kernels.quantized import jit_tflite_lstm as jit

    if jit.LOGISTIC is not None and jit.TANH is not None:  # the compiled loop's own lookups
        table = SIGMOID_TABLE
        compiled = [jit.LOGISTIC(v, table) if op == "LOGISTIC" else jit.TANH(v, 3, 0, table) for v in x.tolist()]
        differ = np.flatnonzero(np.array(compiled) != expected)
        assert differ.size == 0, f"compiled {op}: {differ.size} inputs differ, the first at {x[differ[:5]]}"


@pytest.mark.parametrize("dtype", [np.int8, np.float32], ids=["int8", "float"])
@pytest.mark.parametrize("route", ["compiled", "numpy"])
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "as-stored"])
def test_lstm_routes_match_tflm(monkeypatch, dtype, route, prepared):
    """Both routes (the compiled loop, and numpy's as without numba), with prepared weights on and
    off (off, no constants hook runs: the kernel works its constants out per call), clipped cell."""
    from runtime import MemoryOptions
    from runtime.kernels.quantized import tflite_lstm

    loop = "LSTM" if dtype == np.int8 else "LSTM_FLOAT"
    if route == "numpy":
        monkeypatch.setattr(tflite_lstm, loop, None)
    elif getattr(tflite_lstm, loop) is None:
        pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
    options = {**OPTIONS, "cell_clip": 0.25, "time_major": True}
    got, expected, _ = run_both(dtype, options, memory=MemoryOptions(prepared_weights=prepared), time_major=True)
    for g, e in zip(got, expected, strict=True):
        if dtype == np.int8:
            assert np.array_equal(g, e)
        else:
            close([g], [e], rtol=order_rtol(3 * 3), atol=1e-6)


def test_an_lstm_plan_exported_to_tflm_runs_there_with_identical_outputs():
    """The hand-off: the states are no tensor of the plan (TFLM keeps variable tensors itself), the
    input and output are placed offline, and TFLM computes the same bytes under memplan's plan."""
    import planner
    from runtime.tflite.export import export_plan

    inputs, outputs = lstm_tensors(np.int8, steps=4)
    data = one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, OPTIONS)
    graph = runtime.load_model(data)
    for_tflm = runtime.MemoryOptions(inplace=False, concat_inplace=False, workspace=False, alignment=16)
    made = planner.plan(runtime.memory_problem(graph, for_tflm), "greedy_by_size")
    exported = export_plan(data, graph, made)
    states = {graph.nodes[0].inputs[18], graph.nodes[0].inputs[19]}
    assert not states & set(made.offsets) and set(exported.offsets) == {graph.inputs[0], graph.outputs[0]}
    rng = np.random.default_rng(2)
    feeds = [[rng.integers(-128, 128, inputs[0].shape).astype(np.int8)] for _ in range(2)]
    own, ours = run_tflm_steps(data, feeds), run_tflm_steps(exported.data, feeds)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(own, ours, strict=True))


def test_float_lstm_matches_the_tflite_interpreter_too():
    """The float oracle of the issue's float models: the TFLite interpreter (LiteRT), one invocation."""
    pytest.importorskip("ai_edge_litert")
    from runtime.tflite.oracle import outputs_of

    inputs, outputs = lstm_tensors(np.float32, steps=4, units=6)
    data = one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, {**OPTIONS, "cell_clip": 0.75})
    graph = runtime.load_model(data)
    feeds = {graph.inputs[0]: np.random.default_rng(9).standard_normal(inputs[0].shape).astype(np.float32)}
    expected = outputs_of("litert", data, feeds)[graph.outputs[0]]
    got = Session(graph).run(feeds)[graph.outputs[0]]
    close([got], [expected], rtol=order_rtol(4, units=6), atol=1e-6)
    assert np.abs(expected).max() > 0.1


def test_an_int8_lstm_with_the_converters_intermediates_equals_tflm_and_the_tflite_interpreter():
    """Converted integer LSTMs carry five intermediate tensors (the gates' and the hidden state's
    scales): TFLM ignores them, the TFLite interpreter's integer LSTM reads them; memplan's bytes
    equal both here (the gates at 2**-12, the hidden state's own scale and zero point)."""
    from runtime.tflite.oracle import outputs_of

    inputs, outputs = lstm_tensors(np.int8, steps=4)
    gates = [Tensor((0,), np.int16, q(2.0**-12), name=f"gate_{k}") for k in range(4)]
    between = [*gates, Tensor((0,), np.int8, inputs[18].quant, name="hidden")]
    data = one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, OPTIONS, between)
    graph = runtime.load_model(data)
    rng = np.random.default_rng(6)
    feeds = [[rng.integers(-128, 128, inputs[0].shape).astype(np.int8)] for _ in range(3)]
    session = Session(graph)
    got = [np.array(session.run({graph.inputs[0]: f[0]})[graph.outputs[0]]) for f in feeds]
    expected = [outs[0] for outs in run_tflm_steps(data, feeds)]
    assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert (the test extra) is not installed")
    litert = outputs_of("litert", data, {graph.inputs[0]: feeds[0][0]})[graph.outputs[0]]
    assert np.array_equal(got[0], litert)


@pytest.mark.parametrize("dtype", [np.int8, np.float32], ids=["int8", "float"])
def test_the_compiled_loop_is_ready_at_prepare(monkeypatch, dtype):
    """The session's prepare calls the loop with arguments of the very types a run passes (numba
    compiles, or loads from its cache, one signature per set of types), so that no run compiles:
    the first run, traced, allocates next to nothing beside the arena."""
    from runtime.kernels.quantized import tflite_lstm

    name = "LSTM" if dtype == np.int8 else "LSTM_FLOAT"
    if getattr(tflite_lstm, name) is None:
        pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
    calls = recorded_calls(monkeypatch, tflite_lstm, name)
    inputs, outputs = lstm_tensors(dtype, steps=3)
    graph = runtime.load_model(one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, OPTIONS))
    session = Session(graph).prepare()
    session.run({graph.inputs[0]: np.zeros(inputs[0].shape, dtype)}, measure="memory")
    assert len(calls) == 2 and calls[0] == calls[1], calls
    assert session.stats.outside_arena_bytes < 32 << 10, session.stats.outside_arena_bytes
