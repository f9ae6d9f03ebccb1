"""The recurrences' route table (`rnn_routes.ROUTES`): one value per route, one meaning per name, and
each route runs within the workspace it declares.

For every example of `rnn_routes.EXAMPLES`, the route the planner-facing workspace function reads is
the route object the call runs: the kernel is called with exactly the bytes the planner's workspace
function gives (`Scratch` refuses a take past the end), by its general call and by the session's
dispatcher (the compiled route's bound call), without allocating more than small ufunc buffers
beside them, and must match onnxruntime. At plan time, a session refuses a plan whose workspace for
a recurrence is short of what its route declares."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest

from runtime import load_model
from runtime.kernels import JIT_ENABLED, TensorMeta, call, get_kernel, loop_ufunc_buffers
from runtime.kernels.rnn_routes import EXAMPLES, GATES, ROUTE_NAMES, ROUTES, RecurrenceCase
from tests.runtime.kernels.harness import close, one_node, refuses_a_short_workspace, run_ort


def _feeds(case, rng) -> dict:
    dirs = 2 if case.attrs.get("direction") == "bidirectional" else 1
    gates, hidden = GATES[case.op], case.hidden
    feeds = {
        "x": rng.standard_normal((case.seq, case.batch, case.size)).astype(case.dtype),
        "w": (rng.standard_normal((dirs, gates * hidden, case.size)) * 0.4).astype(case.dtype),
        "r": (rng.standard_normal((dirs, gates * hidden, hidden)) * 0.4).astype(case.dtype),
        "b": rng.standard_normal((dirs, 2 * gates * hidden)).astype(case.dtype),
        "lens": rng.integers(1, case.seq + 1, case.batch).astype(np.int32) if case.lens else None,
        "h0": rng.standard_normal((dirs, case.batch, hidden)).astype(case.dtype),
    }
    if case.op == "LSTM":
        feeds["c0"] = rng.standard_normal((dirs, case.batch, hidden)).astype(case.dtype)
    return feeds


def test_route_names_are_unique_and_every_route_has_an_example():
    assert len(set(ROUTE_NAMES)) == len(ROUTES)
    assert set(ROUTE_NAMES) == {case.route for case in EXAMPLES.values()}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_route_runs_within_the_workspace_it_declares(name):
    case = EXAMPLES[name]
    feeds = _feeds(case, np.random.default_rng(sorted(EXAMPLES).index(name)))
    attrs = {"hidden_size": case.hidden, **case.attrs}
    n = 3 if case.op == "LSTM" else 2
    # onnxruntime runs float32 recurrences only: a float64 case is judged by its float32 run
    single = {k: None if v is None or v.dtype != np.float64 else v.astype(np.float32) for k, v in feeds.items()}
    single = {k: feeds[k] if single[k] is None else single[k] for k in feeds}
    model = one_node(case.op, single, n_outputs=n, opset=14, out_types=[np.float32] * n, **attrs)
    want = [w.astype(case.dtype) for w in run_ort(model, single)]
    inputs = list(feeds.values())
    metas_in = [None if a is None else TensorMeta(a.shape, a.dtype) for a in inputs]
    metas_out = [TensorMeta(w.shape, w.dtype) for w in want]
    route = RecurrenceCase.of(case.op, metas_in, 0).chosen
    assert route.name == case.route or (not JIT_ENABLED and route.name == "recurrence_numpy")
    kernel = get_kernel(case.op)
    assert kernel is not None and kernel.workspace is not None and kernel.prepare is not None
    size = kernel.workspace(metas_in, metas_out, **attrs)
    assert route.workspace(metas_in, metas_out, layout=0) == size
    kernel.prepare(metas_in, metas_out, **attrs)  # compiled loops built before the traced calls
    for way in ("general", "dispatcher"):
        for traced in (False, True):  # the first call sets numpy's machinery up; the second is measured
            outs = [np.full(w.shape, np.nan, w.dtype) for w in want]
            ws = np.zeros(size, np.uint8)
            if traced:
                tracemalloc.start()
            with loop_ufunc_buffers():
                if way == "general":
                    kernel.fn(*inputs, out=tuple(outs), ws=ws, **attrs)
                else:
                    call(kernel, inputs, outs, ws, attrs, 14)
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                assert peak < 64 * 1024, f"{name} ({way}): {peak:,} bytes beside a workspace of {size:,}"
        for got, expected in zip(outs, want, strict=True):
            close([got], [expected], rtol=1e-4, atol=2e-5, what=f"{name} ({way})")


def test_a_plan_short_of_the_routes_workspace_is_refused_when_the_session_prepares():
    case = EXAMPLES["gru_compiled"]
    feeds = _feeds(case, np.random.default_rng(5))
    model = one_node(case.op, feeds, n_outputs=2, opset=14, out_types=[case.dtype] * 2, hidden_size=case.hidden)
    graph = load_model(onnx.shape_inference.infer_shapes(model, strict_mode=True).SerializeToString())
    refuses_a_short_workspace(graph, r"\(GRU\).*workspace.*declares")
