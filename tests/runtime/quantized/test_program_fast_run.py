"""`Session.run(inputs)` on the program route (`runtime.fast_run`): the short call gives what the general run
gives, byte for byte, outputs and states over consecutive runs (and TensorFlow Lite Micro's interpreter the
same), refuses what it refuses with the same errors, hands back arrays the caller owns, and keeps the same
stats; every call it does not take (callbacks, caller memory, feeds to cast) goes to the general run."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import runtime
from runtime.errors import FeedError
from runtime.kernels.quantized.jit_program import RUN
from runtime.session import Session
from runtime.tflite.writer import Operator, model_bytes
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, run_tflm_steps
from tests.runtime.tflite import shared

I8, I32 = np.int8, np.int32
if RUN is None:
    pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)", allow_module_level=True)


def _fast(session: Session) -> bool:
    """Whether the session's last run took the short call: it leaves its stats to be made when read."""
    return isinstance(vars(session).get("_last_run_stats"), float | tuple)


def _feeds(graph, seed: int, runs: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {n: rng.integers(-128, 128, graph.tensors[n].shape).astype(graph.tensors[n].dtype) for n in graph.inputs}
        for _ in range(runs)
    ]


@pytest.fixture(scope="module", params=["hello_world_int8", "keyword_scrambled_8bit"])
def shared_model(request):
    data = shared.model_bytes(request.param)
    return data, runtime.load_model(data)


def test_shared_models_like_the_step_loop_and_tflm_over_consecutive_runs(shared_model):
    data, graph = shared_model
    fast, loop = Session(graph).prepare(), Session(graph, program=False).prepare()
    assert fast.route == "program", fast.route_note
    steps = _feeds(graph, 0, 5)
    got, want = [], []
    for feeds in steps:
        got.append(fast.run(feeds))
        assert _fast(fast), "the plain call took the general run"
        want.append(loop.run(feeds))
    tflm = run_tflm_steps(data, [list(f.values()) for f in steps], outputs=len(graph.outputs))
    for run, (g, w, t) in enumerate(zip(got, want, tflm, strict=True)):
        for name, expected in zip(graph.outputs, t, strict=True):
            assert g[name].dtype == w[name].dtype and g[name].tobytes() == w[name].tobytes(), f"run {run}: loop"
            assert np.array_equal(g[name], expected), f"run {run}: {int((g[name] != expected).sum())} differ from TFLM"
    for name, state in loop.states.arrays.items():
        assert state.tobytes() == fast.states.arrays[name].tobytes(), f"state {name} differs after 5 runs"
    assert len(np.unique(np.concatenate([g[n].ravel() for g in got for n in g]))) > 1, "outputs too uniform"


def test_outputs_are_the_callers_own(shared_model):
    _, graph = shared_model
    session = Session(graph).prepare()
    first, second = _feeds(graph, 1, 2)
    out = session.run(first)
    kept = {n: v.copy() for n, v in out.items()}
    again = session.run(second)
    for name, value in out.items():
        assert not np.shares_memory(value, session.arena) and value.flags.writeable and value.flags.owndata
        assert np.array_equal(value, kept[name]), "the next run changed an array already returned"
        assert not np.shares_memory(value, again[name])
        value[...] = 0  # the caller may write it: the session's next run is unchanged
    assert all(np.array_equal(a, b) for a, b in zip(session.run(second).values(), again.values(), strict=True))


def test_stats_are_the_general_runs(shared_model):
    _, graph = shared_model
    session = Session(graph).prepare()
    (feeds,) = _feeds(graph, 2, 1)
    Session.run(session, feeds)  # the general run, on the same session
    general = dict(vars(session.stats))
    session.run(feeds)
    assert _fast(session)
    stats = session.stats
    assert stats is session.stats, "one RunStats per run, the same object on every read"
    made = dict(vars(stats))
    assert made.pop("seconds") > 0 and general.pop("seconds") > 0
    assert made == general and stats.copies == 2 and stats.route == "program" and stats.trace == []
    seconds = [session.run(feeds) and session.stats.seconds for _ in range(3)]
    assert len({id(session.stats), id(stats)}) == 2 and all(s > 0 for s in seconds)
    tracemalloc.start()  # the caller's own tracing, recorded as the general run records it
    try:
        session.run(feeds)
        assert _fast(session) and session.stats.traced and session.stats.measure == "time"
    finally:
        tracemalloc.stop()


def _bad_feeds(graph) -> list[tuple[str, object]]:
    name = graph.inputs[0]
    t = graph.tensors[name]
    good = np.zeros(t.shape, t.dtype)
    return [
        ("float", {name: good.astype(np.float32)}),
        ("shape", {name: np.zeros((*t.shape[:-1], t.shape[-1] + 1), t.dtype)}),  # checked in the compiled call
        ("extra axis", {name: np.zeros((*t.shape, 1), t.dtype)}),
        ("rank", {name: good.reshape(-1)}),
        ("missing", {}),
        ("none", None),
        ("extra", {name: good, "extra": good}),
        ("renamed", {name + "_": good}),
    ]


def test_bad_feeds_are_refused_as_the_general_run_refuses_them(shared_model):
    _, graph = shared_model
    session = Session(graph).prepare()
    for case, feeds in _bad_feeds(graph):
        with pytest.raises(FeedError) as fast:
            session.run(feeds)
        with pytest.raises(FeedError) as general:
            Session.run(session, feeds)
        assert str(fast.value) == str(general.value), case
        assert graph.inputs[0] in str(fast.value), case  # names the input, and what the model takes
    # nothing ran: the states (keyword_scrambled's SVDFs) are where a fresh session's are
    fresh, (good,) = Session(graph).prepare(), _feeds(graph, 4, 1)
    for a, b in zip(session.run(good).values(), fresh.run(good).values(), strict=True):
        assert a.tobytes() == b.tobytes()
    # a feed the general run casts (within a dtype kind) or converts is taken there, with the same result
    (feeds,) = _feeds(graph, 3, 1)
    name = graph.inputs[0]
    expected = Session(graph, program=False).run(feeds)
    for other in ({name: feeds[name].astype(np.int64)}, {name: feeds[name].tolist()}):
        fresh = Session(graph).prepare()
        got = fresh.run(other)
        assert not _fast(fresh)
        assert all(np.array_equal(got[n], expected[n]) for n in graph.outputs)


def _dense_pair() -> bytes:
    """One input, two FULLY_CONNECTED outputs: the short call's form for several outputs."""
    rng = np.random.default_rng(5)
    tensors = [
        Tensor((3, 12), I8, q(0.05, 4)),
        Tensor((5, 12), I8, q(0.01), rng.integers(-127, 128, (5, 12)).astype(I8)),
        Tensor((5,), I32, q(0.0005), rng.integers(-3000, 3000, 5).astype(I32)),
        Tensor((3, 5), I8, q(0.2, -3)),
        Tensor((4, 12), I8, q(0.02), rng.integers(-127, 128, (4, 12)).astype(I8)),
        Tensor((3, 4), I8, q(0.1, 2)),
    ]
    operators = [Operator("FULLY_CONNECTED", [0, 1, 2], [3]), Operator("FULLY_CONNECTED", [0, 4, -1], [5])]
    return model_bytes(tensors, operators, [0], [3, 5])


def _dense() -> bytes:
    rng = np.random.default_rng(6)
    inputs = [
        Tensor((3, 12), I8, q(0.05, 4)),
        Tensor((5, 12), I8, q(0.01), rng.integers(-127, 128, (5, 12)).astype(I8)),
    ]
    return one_op_model("FULLY_CONNECTED", inputs, [Tensor((3, 5), I8, q(0.2, -3))], {})


@pytest.mark.parametrize("make", [_dense, _dense_pair], ids=["one output", "two outputs"])
def test_strided_inputs_and_several_outputs(make):
    data = make()
    graph = runtime.load_model(data)
    session, loop = Session(graph).prepare(), Session(graph, program=False).prepare()
    rng = np.random.default_rng(7)
    wide = rng.integers(-128, 128, (3, 24)).astype(I8)
    for x in (wide[:, ::2], np.asfortranarray(wide[:, :12]), wide[:, 5:17]):
        feeds = {graph.inputs[0]: x}
        got = session.run(feeds)
        assert _fast(session), "a strided input of the model's dtype takes the short call"
        want = loop.run(feeds)
        tflm = run_tflm_steps(data, [[np.ascontiguousarray(x)]], outputs=len(graph.outputs))[0]
        for name, expected in zip(graph.outputs, tflm, strict=True):
            assert got[name].tobytes() == want[name].tobytes() and np.array_equal(got[name], expected)


def test_callbacks_and_caller_memory_take_the_general_run():
    graph = runtime.load_model(_dense())
    name, out = graph.inputs[0], graph.outputs[0]
    x = np.arange(36, dtype=I8).reshape(3, 12)
    expected = Session(graph, program=False).run({name: x})[out]
    session = Session(graph).prepare()
    seen: list[str] = []
    assert np.array_equal(session.run({name: x}, lambda i, n, node, s: seen.append(node))[out], expected)
    assert seen and session.stats.route == "steps"
    assert np.array_equal(session.run({name: x}, measure="memory")[out], expected)
    assert session.stats.measure == "memory" and session.stats.outside_arena_bytes is not None
    session.measure = "memory"
    session.run({name: x})
    assert not _fast(session) and session.stats.measure == "memory"
    session.measure = "time"
    session.run({name: x})
    assert _fast(session)
    session.output_buffer(out)  # the caller reads the output in place from now on: no copy
    result = session.run({name: x})[out]
    assert not _fast(session) and np.shares_memory(result, session.arena) and np.array_equal(result, expected)
