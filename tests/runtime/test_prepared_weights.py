"""`MemoryOptions.prepared_weights`: off, no kernel keeps a transformed copy of a weight (beside
the arena or per call in its workspace), outputs still match onnxruntime, the session holds only
the stored parameter bytes, and Winograd's scratch leaves the plan."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

import runtime
from runtime import MemoryOptions
from runtime.kernels.conv import jit_winograd, winograd
from tests.memory_models import recurrent, winograd_convs
from tests.runtime.kernels.harness import run_ort

OFF = MemoryOptions(prepared_weights=False)
needs_jit = pytest.mark.skipif(jit_winograd.inputs is None, reason="compiled loops off or numba missing")


def _stored(model) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def _run(model, feeds, options: MemoryOptions, **kwargs) -> tuple[runtime.Session, list[np.ndarray]]:
    session = runtime.Session(runtime.load_model(model), "greedy_by_size", options, **kwargs).prepare()
    return session, list(session.run(feeds).values())


def _close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-4)


def _count_winograd(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = winograd.conv_winograd
    monkeypatch.setattr(winograd, "conv_winograd", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    return calls


@needs_jit
def test_winograd_convs_off_match_onnxruntime_and_hold_only_the_stored_weights(monkeypatch):
    model, feeds = winograd_convs()
    want = run_ort(model, feeds)
    calls = _count_winograd(monkeypatch)
    on, got_on = _run(model, feeds, MemoryOptions())
    assert len(calls) == 2  # both convs (ConvAct and Conv) by Winograd, with their prepared U
    off, got_off = _run(model, feeds, OFF)
    assert len(calls) == 2  # none more: im2col reads the weights as stored
    _close(got_on, want)
    _close(got_off, want)
    stored = _stored(model)
    assert off.constant_bytes == stored
    # F(4x4) keeps 36 K C floats per weight beside the 9 K C stored: 4x more
    assert on.constant_bytes >= stored + 2 * 36 * 128 * 128 * 4
    assert [s.constants for s in off._steps] == [{"prepared_weights": False}] * 2


@needs_jit
def test_off_plans_im2col_scratch_instead_of_winograd_scratch():
    """Winograd's scratch (a band's V and M, and U made per call for a shared weight) is larger
    than im2col's on 128 channels at 28 x 28: with the switch off the plan only holds im2col's."""
    model, _ = winograd_convs()
    graph = runtime.load_model(model)
    on = {b.id: b.size for b in runtime.memory_problem(graph).buffers if b.kind == "workspace"}
    off = {b.id: b.size for b in runtime.memory_problem(graph, OFF).buffers if b.kind == "workspace"}
    assert on.keys() == off.keys() and len(off) == 2
    assert all(off[k] < on[k] for k in on), (on, off)
    assert runtime.Session(graph, "greedy_by_size", OFF).prepare().plan.arena_bytes < (
        runtime.Session(graph, "greedy_by_size").prepare().plan.arena_bytes
    )


@needs_jit
def test_a_shared_weight_is_not_transformed_per_call_when_off(monkeypatch):
    """A weight bound at run time (unbound at prepare) is made into U in the workspace on each
    call when the switch is on; off, never."""
    model, feeds = winograd_convs(channels=32)
    want = run_ort(model, feeds)
    w2 = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w2"))
    calls = _count_winograd(monkeypatch)
    for options, expected in ((MemoryOptions(), 2), (OFF, 0)):
        calls.clear()
        session = runtime.Session(runtime.load_model(model), "greedy_by_size", options, unbound=["w2"]).prepare()
        session.set_shared_input("w2", w2)
        _close(list(session.run(feeds).values()), want)
        assert len(calls) == expected, options


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_recurrences_off_match_onnxruntime_and_hold_only_the_stored_weights(op):
    model, feeds = recurrent(op)
    want = run_ort(model, feeds)
    on, got_on = _run(model, feeds, MemoryOptions())
    off, got_off = _run(model, feeds, OFF)
    _close(got_on, want)
    _close(got_off, want)
    stored = _stored(model)
    assert off.constant_bytes == stored
    w_bytes = numpy_helper.to_array(model.graph.initializer[0]).nbytes
    assert on.constant_bytes >= stored + w_bytes  # at least W^T beside W (and R's panels when compiled)
    assert off._steps[0].constants == {"prepared_weights": False}
    assert set(on._steps[0].constants) >= {"w_t"}


def test_the_switch_reaches_a_training_problem():
    """A training step's problem sizes its kernels' scratch with the same switch its session runs with."""
    from runtime.training.plans import training_problem

    class Step:  # what training_problem reads of a TrainingStep
        graph = runtime.load_model(winograd_convs(channels=128)[0])
        in_place: dict[str, str] = {}

    if jit_winograd.inputs is None:
        pytest.skip("compiled loops off or numba missing: Winograd's scratch never planned")
    on = training_problem(Step(), MemoryOptions())  # type: ignore[arg-type]
    off = training_problem(Step(), OFF)  # type: ignore[arg-type]
    total = [sum(b.size for b in p.buffers if b.kind == "disposable") for p in (on, off)]
    assert total[1] < total[0]
