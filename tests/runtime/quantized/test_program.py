"""The whole-model compiled run (`runtime.program`): a Session whose every step is a compiled integer
loop runs as one call, and its outputs and states are the step loop's, byte for byte, and TensorFlow
Lite Micro's (its interpreter's consecutive invocations, states carried). A model with a step the
program cannot express, a canary run and a run with per-step callbacks keep the step loop."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from runtime.kernels.quantized.jit_program import RUN
from runtime.session import Session
from runtime.tflite.writer import Operator, model_bytes
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, run_tflm_steps
from tests.runtime.tflite import shared

I8, I16, I32 = np.int8, np.int16, np.int32
if RUN is None:
    pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)", allow_module_level=True)


def _feeds(graph, rng, runs: int) -> list[list[np.ndarray]]:
    out = []
    for _ in range(runs):
        step = []
        for name in graph.inputs:
            t = graph.tensors[name]
            info = np.iinfo(t.dtype)
            step.append(rng.integers(max(info.min, -3000), min(info.max, 3000), t.shape, endpoint=True).astype(t.dtype))
        out.append(step)
    return out


def _both_routes(data: bytes, runs: int = 4, seed: int = 0) -> tuple[Session, list, list, list]:
    """The program's and the loop's outputs over consecutive runs, and TFLM's for the same feeds."""
    graph = runtime.load_model(data)
    program, loop = Session(graph).prepare(), Session(graph, program=False).prepare()
    assert program.route == "program", program.route_note
    assert loop.route == "steps"
    steps = _feeds(graph, np.random.default_rng(seed), runs)
    got, want = [], []
    for feeds in steps:
        named = dict(zip(graph.inputs, feeds, strict=True))
        got.append([np.array(v) for v in program.run(named).values()])
        assert program.stats is not None and program.stats.route == "program"
        want.append([np.array(v) for v in loop.run(named).values()])
    for name, state in loop.states.arrays.items():
        assert state.tobytes() == program.states.arrays[name].tobytes(), f"state {name} differs between the routes"
    return program, got, want, run_tflm_steps(data, steps, outputs=len(graph.outputs))


def _check(data: bytes, runs: int = 4, varied: bool = True) -> Session:
    session, got, loop, tflm = _both_routes(data, runs)
    for run, (g, w, t) in enumerate(zip(got, loop, tflm, strict=True)):
        for a, b, c in zip(g, w, t, strict=True):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"run {run}: the program differs from the loop"
            assert np.array_equal(a, c), f"run {run}: {int((a != c).sum())} elements differ from TFLM"
    if varied:  # keyword_scrambled's softmax saturates: its states vary, checked by _both_routes
        assert len(np.unique(np.concatenate([g[0].ravel() for g in got]))) > 2, "outputs too uniform to tell"
    return session


@pytest.mark.parametrize("name", ["hello_world_int8", "keyword_scrambled_8bit"])
def test_shared_model_runs_as_one_call_like_the_loop_and_tflm(name):
    data = shared.model_bytes(name)
    session = _check(data, runs=5, varied=name.startswith("hello"))
    session.reset_state()  # states moved into the program's blob reset there: the first run again
    first = dict(zip(session.graph.inputs, _feeds(session.graph, np.random.default_rng(0), 1)[0], strict=True))
    again = [np.array(v) for v in session.run(first).values()]
    expected = run_tflm_steps(data, [list(first.values())], outputs=len(session.graph.outputs))[0]
    assert all(np.array_equal(a, e) for a, e in zip(again, expected, strict=True))
    fresh = Session(session.graph).prepare()
    fresh.run(first)
    for name, state in fresh.states.arrays.items():
        assert state.tobytes() == session.states.arrays[name].tobytes(), f"state {name} after a reset"


def _dense(activation: str, per_channel: bool) -> bytes:
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, (9, 40)).astype(I8)
    scale = q(np.linspace(0.005, 0.02, 9), np.zeros(9, np.int64), 0) if per_channel else q(0.01)
    bias_scale = np.float32(0.05) * np.float32(0.01)
    inputs = [
        Tensor((3, 40), I8, q(0.05, 4)),
        Tensor(w.shape, I8, scale, w),
        Tensor((9,), I32, q(bias_scale), rng.integers(-3000, 3000, 9).astype(I32)),
    ]
    return one_op_model(
        "FULLY_CONNECTED", inputs, [Tensor((3, 9), I8, q(0.2, -3))], {"fused_activation_function": activation}
    )


@pytest.mark.parametrize("activation,per_channel", [("NONE", False), ("RELU", False), ("NONE", True)])
def test_fully_connected(activation, per_channel):
    _check(_dense(activation, per_channel))


@pytest.mark.parametrize("state_dtype", [I8, I16])
def test_svdf_state_across_consecutive_runs(state_dtype):
    rng = np.random.default_rng(4)
    batches, depth, filters, memory, rank = 2, 12, 8, 5, 2
    state_scale, time_scale = (0.02, 0.01) if state_dtype == I8 else (0.0005, 0.0004)
    info = np.iinfo(state_dtype)
    inputs = [
        Tensor((batches, depth), I8, q(0.05, 3)),
        Tensor((filters, depth), I8, q(0.004), rng.integers(-127, 128, (filters, depth)).astype(I8)),
        Tensor((filters, memory), state_dtype, q(time_scale),
               rng.integers(info.min // 2, info.max // 2, (filters, memory)).astype(state_dtype)),
        Tensor((filters // rank,), I32, q(np.float32(state_scale) * np.float32(time_scale)),
               rng.integers(-2000, 2000, filters // rank).astype(I32)),
        Tensor((batches, filters * memory), state_dtype, q(state_scale, 5 if state_dtype == I8 else 0), variable=True),
    ]  # fmt: skip
    data = one_op_model("SVDF", inputs, [Tensor((batches, filters // rank), I8, q(0.08, -4))], {"rank": rank})
    session = _check(data, runs=6)
    assert any(s.any() for s in session.states.arrays.values())


@pytest.mark.parametrize(
    "x,y",
    [((I8, 0.05, 3), (I8, 0.11, -1)), ((I16, 0.001, 0), (I8, 0.05, 2)), ((I16, 0.002, 0), (I32, 0.0005, 0)),
     ((I8, 0.05, -2), (I16, 0.001, 0))],
    ids=["int8-int8", "int16-int8", "int16-int32", "int8-int16"],
)  # fmt: skip
def test_quantize_between_integer_types(x, y):
    data = one_op_model("QUANTIZE", [Tensor((5, 7), x[0], q(x[1], x[2]))], [Tensor((5, 7), y[0], q(y[1], y[2]))], {})
    _check(data, runs=1)


@pytest.mark.parametrize("out", [(I8, 1 / 256, -128), (I16, 1 / 65536, -32768)], ids=["int8", "int16"])
@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_softmax(out, beta):
    data = one_op_model("SOFTMAX", [Tensor((4, 13), I8, q(0.05, 3))], [Tensor((4, 13), out[0], q(out[1], out[2]))],
                        {"beta": beta})  # fmt: skip
    _check(data, runs=1)


def test_a_chain_with_a_reshape_between_two_fully_connected():
    """Two layers and the RESHAPE between them (a view: no step of the program) in one call."""
    rng = np.random.default_rng(6)
    tensors = [
        Tensor((3, 40), I8, q(0.05, 4)),
        Tensor((12, 40), I8, q(0.01), rng.integers(-127, 128, (12, 40)).astype(I8)),
        Tensor((12,), I32, q(0.0005), rng.integers(-3000, 3000, 12).astype(I32)),
        Tensor((3, 12), I8, q(0.2, -3)),
        Tensor((2,), I32, None, np.array([6, 6], I32)),
        Tensor((6, 6), I8, q(0.2, -3)),
        Tensor((5, 6), I8, q(0.02), rng.integers(-127, 128, (5, 6)).astype(I8)),
        Tensor((6, 5), I8, q(0.1, 2)),
    ]
    operators = [
        Operator("FULLY_CONNECTED", [0, 1, 2], [3], {"fused_activation_function": "RELU"}),
        Operator("RESHAPE", [3, 4], [5]),
        Operator("FULLY_CONNECTED", [5, 6, -1], [7]),
    ]
    session = _check(model_bytes(tensors, operators, [0], [7]), runs=2)
    assert "for 2 steps" in session.route_note, session.route_note


def test_a_step_without_a_compiled_loop_keeps_the_step_loop():
    data = one_op_model("ADD", [Tensor((2, 5), I8, q(0.05, 1)), Tensor((2, 5), I8, q(0.04, -2))],
                        [Tensor((2, 5), I8, q(0.08, 0))], {"fused_activation_function": "NONE"})  # fmt: skip
    graph = runtime.load_model(data)
    session = Session(graph).prepare()
    assert session.route == "steps" and "ADD" in session.route_note, session.route_note
    session.run({n: np.ones((2, 5), I8) for n in graph.inputs})
    assert session.stats is not None and session.stats.route == "steps" and len(session.stats.trace) == 1


def test_canary_callbacks_and_capture_use_the_loop():
    data = _dense("NONE", False)
    graph = runtime.load_model(data)
    x = {graph.inputs[0]: np.arange(120, dtype=I8).reshape(3, 40)}
    canary = Session(graph, canary=True).prepare()
    assert canary.route == "steps"
    session = Session(graph).prepare()
    expected = session.run(x)[graph.outputs[0]].copy()
    assert session.stats is not None and session.stats.route == "program" and session.stats.trace == []
    seen: list[str] = []
    followed = session.run(x, on_step=lambda i, n, name, s: seen.append(name))[graph.outputs[0]]
    assert session.stats.route == "steps" and seen == [graph.nodes[0].name]
    captured = session.capture(x, [graph.outputs[0]])[graph.outputs[0]]
    assert session.stats.route == "steps"
    for other in (canary.run(x)[graph.outputs[0]], followed, captured):
        assert np.array_equal(other, expected)


def test_invoker_computes_from_the_input_buffer():
    """`invoker()` is the compute alone: what the input buffer holds in, the output buffer out."""
    graph = runtime.load_model(_dense("RELU", False))
    session = Session(graph).prepare()
    x = np.random.default_rng(3).integers(-128, 128, (3, 40)).astype(I8)
    expected = Session(graph, program=False).run({graph.inputs[0]: x})[graph.outputs[0]]
    go = session.invoker()
    session.input_buffer(graph.inputs[0])[...] = x
    go()
    assert np.array_equal(session.output_buffer(graph.outputs[0]), expected)
