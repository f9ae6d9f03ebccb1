"""LSTM, GRU and RNN through both routes: the compiled loops (`runtime.kernels.jit_rnn`) and the
numpy route (those loops taken away), each against onnxruntime (onnx.reference ignores
sequence_lens, clip and activations) and onnx.reference where it applies, including a first
traced session run that allocates nothing beside the arena (the loops compile at prepare)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import runtime
from runtime.kernels import jit_panels, jit_rnn, rnn
from tests.runtime.kernels.harness import close, one_node, run_kernel, run_ort, run_with_workspace

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
LOOPS = {"GRU": "gru_loop", "LSTM": "lstm_loop", "RNN": "rnn_loop"}


@pytest.fixture(params=["compiled", "panels", "numpy"])
def route(request, monkeypatch):
    """Which route the kernels take: "compiled" reads R's rows, as a direct call does; "panels"
    reads R's panels (`runtime.kernels.jit_panels`), as a session with a constant R does;
    both count the compiled loops' calls."""
    calls: list[str] = []
    for op, name in LOOPS.items():
        loop = getattr(jit_rnn, name)
        if request.param == "numpy":
            monkeypatch.setattr(jit_rnn, name, None)
        elif loop is None:
            pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
        else:
            jit_rnn.prepared(op)  # compiled and warmed before its calls are counted

            def counted(*args, _loop=loop, _op=op):
                calls.append(_op)
                _loop(*args)

            counted.disable_compile = loop.disable_compile  # type: ignore[attr-defined]
            counted.compile = loop.compile  # type: ignore[attr-defined]
            monkeypatch.setattr(jit_rnn, name, counted)
    if request.param == "panels":
        run = rnn._run

        def with_panels(op, x, w, r, *rest, w_t=None, r_panels=None):
            if r_panels is None:  # not made by the constants hook (a direct call): made here
                r_panels = jit_panels.pack(r)
            run(op, x, w, r, *rest, w_t=w_t, r_panels=r_panels)

        monkeypatch.setattr(rnn, "_run", with_panels)
    return request.param, calls


def _case(op: str, *, seq: int, batch: int, size: int, hidden: int, direction: str, layout: int, rng,
          lens=None, initial: bool = True, bias: bool = True, peepholes: bool = False) -> dict:  # fmt: skip
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    feeds = {
        "x": rng.standard_normal((seq, batch, size) if layout == 0 else (batch, seq, size)).astype(np.float32),
        "w": (rng.standard_normal((dirs, gates * hidden, size)) * 0.4).astype(np.float32),
        "r": (rng.standard_normal((dirs, gates * hidden, hidden)) * 0.4).astype(np.float32),
        "b": rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) if bias else None,
        "lens": None if lens is None else np.array(lens, np.int32),
        "h0": rng.standard_normal(state).astype(np.float32) if initial else None,
    }
    if op == "LSTM":
        feeds["c0"] = rng.standard_normal(state).astype(np.float32) if initial else None
        feeds["p"] = rng.standard_normal((dirs, 3 * hidden)).astype(np.float32) if peepholes else None
    return feeds


def _expected(op: str, feeds: dict, attrs: dict, n: int) -> list[np.ndarray]:
    """onnxruntime's outputs; it runs layout 0 only, so batch-major cases go through transposes."""
    if attrs["layout"] == 0:
        return run_ort(one_node(op, feeds, n_outputs=n, opset=14, out_types=[np.float32] * n, **attrs), feeds)
    swap = {k: None if v is None else (v.swapaxes(0, 1) if k in ("x", "h0", "c0") else v) for k, v in feeds.items()}
    model = one_node(op, swap, n_outputs=n, opset=14, out_types=[np.float32] * n, **{**attrs, "layout": 0})
    y, *states = run_ort(model, swap)
    return [y.transpose(2, 0, 1, 3)] + [s.swapaxes(0, 1) for s in states]


def _check(op: str, feeds: dict, attrs: dict, route) -> None:
    name, calls = route
    n = 3 if op == "LSTM" else 2
    model = one_node(op, feeds, n_outputs=n, opset=14, out_types=[np.float32] * n, **attrs)
    expected = _expected(op, feeds, attrs, n)
    inputs = list(feeds.values())
    close(run_kernel(model, inputs, like=expected), expected, rtol=1e-4, atol=2e-5)
    got, _ = run_with_workspace(model, inputs, expected, "exact")  # a workspace of NaN bytes
    close(got, expected, rtol=1e-4, atol=2e-5)
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    assert calls == ([op] * 2 * dirs if name != "numpy" else [])


# Hidden sizes 37 and 9 leave rows past the last block of four in the compiled dot products.
@pytest.mark.parametrize("op", ["GRU", "LSTM", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_and_layouts_with_short_sequences(op, direction, layout, route):
    rng = np.random.default_rng(31 + layout)
    feeds = _case(op, seq=7, batch=3, size=5, hidden=37, direction=direction, layout=layout, rng=rng, lens=[7, 2, 5])
    _check(op, feeds, {"hidden_size": 37, "direction": direction, "layout": layout}, route)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("clip", [None, 0.8])
def test_gru_reset_variants_bias_and_clip(linear_before_reset, bias, clip, route):
    rng = np.random.default_rng(7 + linear_before_reset)
    feeds = _case("GRU", seq=6, batch=2, size=4, hidden=9, direction="bidirectional", layout=0, rng=rng,
                  lens=[6, 3], bias=bias, initial=bias)  # fmt: skip
    attrs = {"hidden_size": 9, "direction": "bidirectional", "layout": 0, "linear_before_reset": linear_before_reset}
    if clip is not None:
        attrs["clip"] = clip
    _check("GRU", feeds, attrs, route)


@pytest.mark.parametrize("peepholes", [False, True])
@pytest.mark.parametrize("input_forget", [0, 1])
@pytest.mark.parametrize("clip", [None, 0.7])
def test_lstm_peepholes_coupled_gates_and_clip(peepholes, input_forget, clip, route):
    rng = np.random.default_rng(3 + 2 * peepholes + input_forget)
    feeds = _case("LSTM", seq=5, batch=2, size=3, hidden=6, direction="bidirectional", layout=0, rng=rng,
                  lens=[5, 4], peepholes=peepholes)  # fmt: skip
    attrs = {"hidden_size": 6, "direction": "bidirectional", "layout": 0, "input_forget": input_forget}
    if clip is not None:
        attrs["clip"] = clip
    _check("LSTM", feeds, attrs, route)


@pytest.mark.parametrize(
    ("op", "activations", "alpha", "beta"),
    [
        ("GRU", ["HardSigmoid", "Softsign"], [0.3], [0.4]),
        ("GRU", ["Sigmoid", "Relu"], None, None),
        ("LSTM", ["Sigmoid", "Elu", "Softplus"], [0.8], None),
        ("LSTM", ["Affine", "ScaledTanh", "LeakyRelu"], [0.5, 0.7, 0.2], [0.25, 1.3]),
        ("RNN", ["ThresholdedRelu"], [0.3], None),
        ("RNN", ["Sigmoid"], None, None),
    ],
)
def test_other_activations(op, activations, alpha, beta, route):
    rng = np.random.default_rng(17)
    feeds = _case(op, seq=4, batch=2, size=3, hidden=5, direction="forward", layout=0, rng=rng)
    attrs: dict = {"hidden_size": 5, "direction": "forward", "layout": 0, "activations": activations}
    if alpha is not None:
        attrs["activation_alpha"] = alpha
    if beta is not None:
        attrs["activation_beta"] = beta
    _check(op, feeds, attrs, route)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_nan_and_infinity_against_onnx_reference(op, route):
    # A NaN in batch entry 0's input at step 2 reaches its state from there on; batch entry 1
    # sees huge inputs, which saturate its gates, and its states stay finite.
    rng = np.random.default_rng(5)
    feeds = _case(op, seq=5, batch=2, size=3, hidden=6, direction="forward", layout=0, rng=rng)
    feeds["x"][2, 0, 1] = np.nan
    feeds["x"][1, 1, :] = [1e30, -1e30, 1e30]
    n = 3 if op == "LSTM" else 2
    model = one_node(op, feeds, n_outputs=n, opset=14, out_types=[np.float32] * n, hidden_size=6)
    expected = ReferenceEvaluator(model).run(None, {k: v for k, v in feeds.items() if v is not None})
    got = run_kernel(model, list(feeds.values()), like=expected)
    assert np.isnan(got[0][2:, 0, 0]).all() and not np.isnan(got[0][:2, 0, 0]).any()
    assert np.isfinite(got[0][:, 0, 1]).all()
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_plain_gru_and_lstm_match_onnx_reference(route):
    rng = np.random.default_rng(23)
    for op in ("GRU", "LSTM"):
        feeds = _case(op, seq=6, batch=2, size=4, hidden=8, direction="bidirectional", layout=0, rng=rng)
        n = 3 if op == "LSTM" else 2
        model = one_node(op, feeds, n_outputs=n, opset=14, out_types=[np.float32] * n, hidden_size=8,
                         direction="bidirectional")  # fmt: skip
        expected = ReferenceEvaluator(model).run(None, {k: v for k, v in feeds.items() if v is not None})
        close(run_kernel(model, list(feeds.values()), like=expected), expected, rtol=1e-4, atol=1e-5)


def _stacked_model() -> tuple:
    """A GRU-audio-like graph: batch-major frames made time-major, a GRU with an initial state,
    then a bidirectional LSTM with sequence lengths."""
    rng = np.random.default_rng(2)
    seq, batch, size, h1, h2 = 12, 2, 10, 48, 20

    def init(name, *shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, (rng.standard_normal(shape) * 0.3).ravel())

    inits = [
        init("gw", 1, 3 * h1, size), init("gr", 1, 3 * h1, h1), init("gb", 1, 6 * h1),
        init("lw", 2, 4 * h2, h1), init("lr", 2, 4 * h2, h2), init("lb", 2, 8 * h2),
        helper.make_tensor("lens", TensorProto.INT32, [batch], [12, 7]), helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
    ]  # fmt: skip
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),  # (seq, batch, size)
        helper.make_node("GRU", ["xt", "gw", "gr", "gb", "", "h0"], ["gy", "gh"], hidden_size=h1,
                         linear_before_reset=1),
        helper.make_node("Squeeze", ["gy", "axes"], ["gs"]),  # (seq, batch, h1)
        helper.make_node("LSTM", ["gs", "lw", "lr", "lb", "lens"], ["ly", "lh", "lc"], hidden_size=h2,
                         direction="bidirectional"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, size]),
         helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, batch, h1])],
        [],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    model.graph.output.extend(inferred[name] for name in ("ly", "lh", "lc", "gh"))
    feeds = {"x": rng.standard_normal((batch, seq, size)).astype(np.float32),
             "h0": rng.standard_normal((1, batch, h1)).astype(np.float32)}  # fmt: skip
    return model, feeds


def test_stacked_recurrent_model_through_a_session(route):
    """Through the Session against onnxruntime; the first run is the traced one, and it stays
    within the bound on bytes beside the arena: nothing compiles during a run."""
    model, feeds = _stacked_model()
    session = runtime.Session(runtime.load_model(model), "greedy_by_size").prepare()
    outputs = session.run(feeds, measure="memory")
    arena, outside = session.stats.arena_bytes, session.stats.outside_arena_bytes
    assert outside is not None and outside <= max(arena // 100, 64 * 1024), f"{outside:,} beside {arena:,}"
    for got, want in zip(outputs.values(), run_ort(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    name, calls = route
    assert calls == (["GRU", "LSTM", "LSTM"] if name != "numpy" else [])


def test_large_batches_take_numpy(route):
    """Past `MAX_BATCH` entries the loops would read R once per entry and step; BLAS reads it
    once per step: numpy's route runs, and the results still match onnxruntime."""
    rng = np.random.default_rng(41)
    batch = jit_rnn.MAX_BATCH + 1
    feeds = _case("GRU", seq=3, batch=batch, size=4, hidden=8, direction="forward", layout=0, rng=rng)
    model = one_node("GRU", feeds, n_outputs=2, opset=14, out_types=[np.float32] * 2, hidden_size=8)
    expected = run_ort(model, feeds)
    close(run_kernel(model, list(feeds.values()), like=expected), expected, rtol=1e-4, atol=2e-5)
    assert route[1] == []


_FIRST_RUN = """
import sys
import numpy as np
import onnx
import runtime
model = onnx.load(sys.argv[1])
feeds = dict(np.load(sys.argv[2]))
session = runtime.Session(runtime.load_model(model), "greedy_by_size").prepare()
session.run(feeds, measure="memory")
print(session.stats.outside_arena_bytes)
"""


def test_a_fresh_process_first_run_allocates_as_little_as_numpy(tmp_path):
    """In a fresh interpreter (numba's caches empty) the first, traced run of the compiled
    route allocates no more beside the arena than numpy's route, give or take 8 KiB: the loops
    are compiled, and their argument conversions made, when the session prepares."""
    import os
    import subprocess
    import sys

    if jit_rnn.gru_loop is None:
        pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
    model, feeds = _stacked_model()
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "f.npz", **feeds)
    measured = {}
    for value in ("1", "0"):
        env = {**os.environ, "MEMPLAN_JIT": value}
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_RUN, str(tmp_path / "m.onnx"), str(tmp_path / "f.npz")],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        measured[value] = int(done.stdout.split()[-1])
    assert measured["1"] <= measured["0"] + 8 * 1024, measured


def _weights_as_initializers(
    model: onnx.ModelProto, feeds: dict, names: tuple[str, ...], outputs: list
) -> onnx.ModelProto:
    """`model` with the inputs `names` turned into initializers: true constants, which the
    kernels' constants hook sees (and keeps W transposed for); its outputs shaped like `outputs`."""
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept = [v for v in model.graph.input if v.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(numpy_helper.from_array(feeds[n], n) for n in names if feeds[n] is not None)
    shaped = [
        helper.make_tensor_value_info(v.name, TensorProto.FLOAT, a.shape)
        for v, a in zip(model.graph.output, outputs, strict=True)
    ]
    del model.graph.output[:]
    model.graph.output.extend(shaped)
    return model


@pytest.mark.parametrize(
    ("op", "attrs", "batch", "peepholes"),
    [
        ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, 1, False),
        ("GRU", {"direction": "forward", "clip": 0.9}, 3, False),
        ("LSTM", {"direction": "bidirectional"}, 1, True),
        ("LSTM", {"direction": "reverse", "input_forget": 1}, 3, False),
        ("RNN", {"direction": "bidirectional"}, 2, False),
    ],
)
def test_constant_weights_through_a_session_use_the_prepared_transpose(op, attrs, batch, peepholes, route):
    """W as an initializer reaches the kernel as a contiguous W^T made once at prepare (the
    constants hook); a session run with it, sequence lengths and initial states matches
    onnxruntime on both routes, and the hook's copy is W transposed."""
    rng = np.random.default_rng(5)
    lens = [6, 3, 5][:batch]
    feeds = _case(op, seq=6, batch=batch, size=9, hidden=21, direction=attrs["direction"], layout=0, rng=rng,
                  lens=lens, peepholes=peepholes)  # fmt: skip
    n = 3 if op == "LSTM" else 2
    attrs = {"hidden_size": 21, **attrs}
    expected = _expected(op, feeds, {**attrs, "layout": 0}, n)
    model = one_node(op, feeds, n_outputs=n, opset=14, out_types=[np.float32] * n, **attrs)
    constant = _weights_as_initializers(
        model, feeds, ("w", "r", "b", "p") if op == "LSTM" else ("w", "r", "b"), expected
    )
    session = runtime.Session(runtime.load_model(constant), "greedy_by_size").prepare()
    got = session.run({k: v for k, v in feeds.items() if k in ("x", "lens", "h0", "c0") and v is not None})
    close(list(got.values()), expected, rtol=1e-4, atol=2e-5)
    kernel = runtime.kernels.get_kernel(op)
    assert kernel is not None and kernel.constants is not None
    made = kernel.constants([None, feeds["w"]], [], [])
    assert made["w_t"].flags.c_contiguous
    np.testing.assert_array_equal(made["w_t"], feeds["w"].transpose(0, 2, 1))
    assert kernel.constants([None, None], [], []) == {}  # a shared or trained W: no copy, W's view
    name, calls = route
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    assert calls == ([op] * dirs if name != "numpy" else [])
