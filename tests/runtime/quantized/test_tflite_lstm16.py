"""TFLite's 16x8 LSTM (int16 input, hidden state and output, int8 weights, int64 biases, int16
cell state) against TensorFlow Lite Micro: one-operator `.tflite` models of several sizes, run
by memplan's Session and by TFLM's interpreter over consecutive invocations (the states carried
from one to the next), equal bit for bit, on the compiled loop and on the numpy route. The 64-bit
requantization the 16x8 gates use is checked on its own against TFLM's 16x8 FULLY_CONNECTED,
and the variants TFLM refuses are refused by memplan too, saying so."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import runtime
from runtime.session import Session
from tests.runtime.quantized.tflite_ops import Tensor, lstm_tensors, one_op_model, q, recorded_calls, run_tflm_steps

pytest.importorskip("tflite_micro")

LSTM = "UNIDIRECTIONAL_SEQUENCE_LSTM"
OPTIONS = {"fused_activation_function": "TANH", "cell_clip": 0.0, "proj_clip": 0.0, "time_major": False}


def lstm16(time_major=False, cell_clip=0.0, **shape):
    inputs, outputs = lstm_tensors(np.int16, time_major=time_major, **shape)
    options = {**OPTIONS, "time_major": time_major, "cell_clip": cell_clip}
    return inputs, outputs, one_op_model(LSTM, inputs, outputs, options)


def feeds_for(x: Tensor, invocations: int, seed: int, amplitude: int = 6000) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(-amplitude, amplitude, x.shape).astype(np.int16)] for _ in range(invocations)]


def run_session(data: bytes, feeds, memory=None) -> tuple[list[np.ndarray], Session]:
    graph = runtime.load_model(data)
    session = Session(graph, options=memory)
    return [np.array(session.run({graph.inputs[0]: f[0]})[graph.outputs[0]]) for f in feeds], session


def assert_bit_exact(got, expected):
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.dtype == e.dtype == np.int16
        differ = int((g != e).sum())
        assert differ == 0, f"invocation {k}: {differ} of {g.size} elements differ from TFLM"


@pytest.mark.parametrize(
    "batches,steps,depth,units,time_major,cell_clip,cell_scale",
    [
        (2, 3, 5, 4, False, 0.0, 2.0**-11),
        (2, 3, 5, 4, True, 0.0, 2.0**-11),
        (1, 5, 3, 7, False, 0.5, 2.0**-12),
        (3, 2, 8, 2, True, 0.0, 2.0**-15),
        (1, 4, 12, 16, False, 2.0, 2.0**-10),
    ],
    ids=["batch-major", "time-major", "clipped-one-row", "fine-cell", "wide-coarse-cell"],
)
def test_16x8_lstm_is_bit_exact_against_tflm(batches, steps, depth, units, time_major, cell_clip, cell_scale):
    inputs, _, data = lstm16(time_major, cell_clip, batches=batches, steps=steps, depth=depth, units=units,
                             cell_scale=cell_scale, seed=batches + units)  # fmt: skip
    feeds = feeds_for(inputs[0], 3, seed=depth)
    expected = [outs[0] for outs in run_tflm_steps(data, feeds)]
    got, session = run_session(data, feeds)
    assert_bit_exact(got, expected)
    everything = np.concatenate([e.ravel() for e in expected])
    assert len(np.unique(everything)) > everything.size // 2, "the outputs barely vary; the case tests little"
    assert session.states.nbytes == 2 * batches * units * 2  # int16 hidden and cell state
    session.reset_state()  # from reset states the first invocation comes again
    again = session.run({session.graph.inputs[0]: feeds[0][0]})[session.graph.outputs[0]]
    assert np.array_equal(again, expected[0])


@pytest.mark.parametrize("route", ["compiled", "numpy"])
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "as-stored"])
def test_16x8_routes_match_tflm(monkeypatch, route, prepared):
    """The compiled loop and numpy's route (as without numba), with prepared weights on and off
    (off, no constants hook runs: the kernel works its constants out per call), a clipped cell."""
    from runtime import MemoryOptions
    from runtime.kernels.quantized import tflite_lstm

    if route == "numpy":
        monkeypatch.setattr(tflite_lstm, "LSTM", None)
    elif tflite_lstm.LSTM is None:
        pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
    inputs, _, data = lstm16(True, 0.25, steps=4, seed=5)
    feeds = feeds_for(inputs[0], 3, seed=8, amplitude=32767)
    expected = [outs[0] for outs in run_tflm_steps(data, feeds)]
    got, _ = run_session(data, feeds, MemoryOptions(prepared_weights=prepared))
    assert_bit_exact(got, expected)


def test_the_64_bit_requantization_equals_tflms_16x8_fully_connected():
    """TFLM's 16x8 FULLY_CONNECTED (int64 bias) scales its int64 sums with the same 64-bit
    MultiplyByQuantizedMultiplier as the 16x8 LSTM's gates: memplan's, numpy's and compiled, on the
    exact sums, equal TFLM's outputs over a spread of sums and multipliers, where the 32-bit
    requantization would differ."""
    from runtime import quant_arith as qa
    from runtime.kernels.quantized import jit_tflite_lstm as jit

    rng = np.random.default_rng(3)
    for k, (w_scale, out_scale) in enumerate([(0.013, 0.025), (0.31, 0.6), (0.0021, 0.004)]):
        x = rng.integers(-32768, 32768, (64, 24)).astype(np.int16)
        w = rng.integers(-127, 128, (8, 24)).astype(np.int8)
        bias = rng.integers(-(1 << 24), 1 << 24, 8).astype(np.int64)
        x_q, w_q, y_q = q(2.0**-10), q(w_scale), q(out_scale)
        b_q = q(np.float32(2.0**-10) * np.float32(w_scale))
        model = one_op_model(
            "FULLY_CONNECTED",
            [Tensor(x.shape, np.int16, x_q), Tensor(w.shape, np.int8, w_q, w), Tensor((8,), np.int64, b_q, bias)],
            [Tensor((64, 8), np.int16, y_q)],
            {"fused_activation_function": "NONE"},
        )
        expected = run_tflm_steps(model, [[x]])[0][0]
        sums = x.astype(np.int64) @ w.astype(np.int64).T + bias
        multiplier, shift = qa.dense_multiplier(x_q, w_q, y_q)
        got = np.clip(qa.multiply_by_quantized_multiplier_64(sums, multiplier, shift), -32768, 32767)
        assert np.array_equal(got, expected), f"case {k}: {int((got != expected).sum())} differ"
        assert (np.abs(expected) < 32767).mean() > 0.9, f"case {k}: the outputs saturate; the case tests little"
        narrow = np.clip(qa.multiply_by_quantized_multiplier(sums, multiplier, shift), -32768, 32767)
        assert not np.array_equal(narrow, expected), f"case {k} does not tell the 64-bit rounding from the 32-bit"
        if jit.MBQM64 is not None:
            m, s = int(np.ravel(multiplier)[0]), int(np.ravel(shift)[0])
            compiled = np.array([jit.MBQM64(v, m, s) for v in sums.ravel().tolist()]).reshape(sums.shape)
            assert np.array_equal(np.clip(compiled, -32768, 32767), expected), f"compiled, case {k}"


def refused(inputs, outputs, match):
    data = one_op_model(LSTM, inputs, outputs, OPTIONS)
    with pytest.raises(runtime.ModelError, match=match) as caught:
        runtime.load_model(data)
    assert str(caught.value).startswith(f"operator 0 ({LSTM}): "), caught.value
    return data


def tflm_refuses(data: bytes, x: Tensor) -> None:
    with pytest.raises(RuntimeError):
        run_tflm_steps(data, [[np.zeros(x.shape, x.dtype)]])


@pytest.mark.parametrize(
    "index,variant,tensor",
    [
        (10, "peephole", Tensor((4,), np.int16, q(2.0**-15), np.zeros(4, np.int16))),
        (16, "projection", Tensor((4, 4), np.int8, q(0.02), np.zeros((4, 4), np.int8))),
        (20, "layer norm", Tensor((4,), np.int16, q(2.0**-10), np.full(4, 1024, np.int16))),
    ],
)
def test_variants_tflm_refuses_are_refused_saying_so(index, variant, tensor):
    inputs, outputs = lstm_tensors(np.int16)
    inputs = list(inputs)
    inputs[index] = tensor
    data = refused(inputs, outputs, rf"input {index} \(.*\) is given: the {variant} LSTM is not supported, "
                   r"and TensorFlow Lite Micro's LSTM does not take it either")  # fmt: skip
    tflm_refuses(data, inputs[0])


def test_a_coupled_input_gate_is_refused_saying_tflm_refuses_it_too():
    inputs, outputs = lstm_tensors(np.int16)
    inputs = list(inputs)
    inputs[1] = inputs[5] = inputs[12] = None
    data = refused(inputs, outputs, r"input 1 \(input_to_input_weights\) is missing; .*CIFG.*TensorFlow Lite Micro")
    tflm_refuses(data, inputs[0])


def test_a_16_bit_lstm_with_wrong_types_is_named():
    """int32 biases (the 8x8 LSTM's) under int16 activations: TFLM would read them as int64."""
    inputs, outputs = lstm_tensors(np.int16)
    inputs = list(inputs)
    for j in (12, 13, 14, 15):
        b = inputs[j]
        inputs[j] = dataclasses.replace(b, dtype=np.int32, data=b.data.astype(np.int32))
    refused(inputs, outputs, r"input 12 \(input_gate_bias\) is int32; accepted here: int64")
    inputs, outputs = lstm_tensors(np.int16)
    inputs = list(inputs)
    inputs[18] = dataclasses.replace(inputs[18], dtype=np.int8)
    refused(inputs, outputs, r"input 18 \(output_state\) is int8; accepted here: int16")
    inputs, outputs = lstm_tensors(np.int16)
    inputs = list(inputs)
    inputs[3] = dataclasses.replace(inputs[3], dtype=np.int16, data=inputs[3].data.astype(np.int16))
    refused(inputs, outputs, r"input 3 \(input_to_cell_weights\) is int16; accepted here: int8")


def test_run_verify_on_a_16x8_lstm(tmp_path):
    """`memplan run --verify` picks TFLM for the `.tflite` model and judges the first run's outputs."""
    from typer.testing import CliRunner

    from app.cli import app

    _, _, data = lstm16(steps=3)
    path = tmp_path / "lstm16.tflite"
    path.write_bytes(data)
    result = CliRunner().invoke(app, ["run", str(path), "--verify", "--repeat", "1"])
    assert result.exit_code == 0, result.output
    assert "tflite-micro" in result.output.lower() or "tensorflow lite micro" in result.output.lower(), result.output


def test_the_16x8_compiled_loop_is_ready_at_prepare(monkeypatch):
    """The session's prepare calls the loop with the int16 arguments a run passes (one signature),
    so that no run compiles: the first run, traced, allocates next to nothing beside the arena."""
    from runtime.kernels.quantized import tflite_lstm

    if tflite_lstm.LSTM is None:
        pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
    calls = recorded_calls(monkeypatch, tflite_lstm, "LSTM")
    inputs, _, data = lstm16(steps=3)
    graph = runtime.load_model(data)
    session = Session(graph).prepare()
    session.run({graph.inputs[0]: np.zeros(inputs[0].shape, np.int16)}, measure="memory")
    assert len(calls) == 2 and calls[0] == calls[1], calls
    assert session.stats.outside_arena_bytes < 32 << 10, session.stats.outside_arena_bytes


def test_a_16x8_lstm_plan_exported_to_tflm_runs_there_with_identical_outputs():
    """memplan's plan handed to TFLM as offline offsets: TFLM computes the same int16 bytes under it
    as under its own planner, invocation after invocation."""
    import planner
    from runtime.tflite.export import export_plan

    inputs, _, data = lstm16(steps=4)
    graph = runtime.load_model(data)
    for_tflm = runtime.MemoryOptions(inplace=False, concat_inplace=False, workspace=False, alignment=16)
    exported = export_plan(data, graph, planner.plan(runtime.memory_problem(graph, for_tflm), "greedy_by_size"))
    assert set(exported.offsets) == {graph.inputs[0], graph.outputs[0]}
    feeds = feeds_for(inputs[0], 2, seed=12)
    own, ours = run_tflm_steps(data, feeds), run_tflm_steps(exported.data, feeds)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(own, ours, strict=True))
