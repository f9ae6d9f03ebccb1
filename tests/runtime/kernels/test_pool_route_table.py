"""The pools' route table (`pool_routes.ROUTES`): one value per route, one meaning per name, and
each route runs within the workspace it declares.

For every example of `pool_routes.EXAMPLES` and variants of its shape (two images, a larger map),
the route the planner-facing workspace function reads is the route object the call runs: the
kernel is called with exactly the bytes the planner's workspace function gives (`Scratch` refuses
a take past the end), by its general call and by the session's dispatcher (its bound call where
the route has one), without allocating more than small ufunc buffers beside them, and must match
onnx.reference (onnxruntime for GlobalLpPool, which onnx.reference lacks). At plan time, a session refuses a plan whose workspace for a pool is short of what
its route declares."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime import load_model
from runtime.kernels import JIT_ENABLED, TensorMeta, call, get_kernel, loop_ufunc_buffers
from runtime.kernels.pool_routes import EXAMPLES, ROUTE_NAMES, ROUTES, PoolCase
from tests.runtime.kernels.harness import close, refuses_a_short_workspace, run_ort

_ELEM = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(op: str, x_shape, dtype, attrs: dict, indices: bool):
    outputs = ["y", "i"] if indices else ["y"]
    node = helper.make_node(op, ["x"], outputs, name="pool", **attrs)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", _ELEM[dtype], list(x_shape))],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
    )  # fmt: skip
    opset = 18 if op == "LpPool" else 19
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)  # typed outputs, which a session needs


def _variants():
    for name, case in sorted(EXAMPLES.items()):
        yield name, case.x
        yield f"{name}-two_images", (2, *case.x[1:])
        if not case.op.startswith("Global") and "kernel_shape" in case.attrs and case.route.endswith("taps"):
            yield f"{name}-larger_map", (*case.x[:2], *(s + 3 for s in case.x[2:]))


def test_route_names_are_unique_and_every_route_has_an_example():
    assert len(set(ROUTE_NAMES)) == len(ROUTES)
    assert set(ROUTE_NAMES) == {case.route for case in EXAMPLES.values()}


@pytest.mark.parametrize(("name", "x_shape"), list(_variants()), ids=[n for n, _ in _variants()])
def test_each_route_runs_within_the_workspace_it_declares(name, x_shape):
    case = EXAMPLES[name.split("-")[0]]
    x = np.random.default_rng(len(name)).standard_normal(x_shape).astype(case.dtype)
    model = _model(case.op, x_shape, case.dtype, case.attrs, case.indices)
    # onnx.reference has no GlobalLpPool: onnxruntime judges it
    want = run_ort(model, {"x": x}) if case.op == "GlobalLpPool" else ReferenceEvaluator(model).run(None, {"x": x})
    metas_in = [TensorMeta(x.shape, x.dtype)]
    metas_out = [TensorMeta(w.shape, w.dtype) for w in want]
    c = PoolCase.of(case.op, metas_in[0], metas_out[0], case.attrs, case.indices)
    geo, route = c.chosen
    compiled_off = not JIT_ENABLED and EXAMPLES[name.split("-")[0]].route.endswith("compiled")
    assert route.name == case.route or compiled_off, f"{name} takes {route.name}, not {case.route}"
    assert [r.name for r in ROUTES if r.op == case.op and r.applies(c, geo)][0] == route.name
    kernel = get_kernel(case.op)
    assert kernel is not None
    size = kernel.workspace(metas_in, metas_out, **case.attrs) if kernel.workspace else 0
    assert route.bytes(c, geo) <= size  # the planner's workspace covers the route's (and its chunks)
    if kernel.prepare is not None:
        kernel.prepare(metas_in, metas_out, **case.attrs)
    for way in ("general", "dispatcher"):
        for traced in (False, True):  # the first call sets numpy's machinery up; the second is measured
            outs = [np.full(w.shape, -7, w.dtype) for w in want]
            ws = np.zeros(size, np.uint8) if kernel.workspace else None
            if traced:
                tracemalloc.start()
            with loop_ufunc_buffers():
                if way == "general":
                    extra = {"ws": ws} if kernel.workspace else {}
                    kernel.fn(x, out=tuple(outs) if kernel.multi_output else outs[0], **extra, **case.attrs)
                else:
                    call(kernel, [x], outs, ws, case.attrs, 19)
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                assert peak < 64 * 1024, f"{name} ({way}): {peak:,} bytes beside a workspace of {size:,}"
        tolerance = 1e-2 if case.dtype == np.float16 else 1e-5
        for got, expected in zip(outs, want, strict=True):
            close([got], [expected], rtol=tolerance, atol=tolerance, what=f"{name} ({way})")


@pytest.mark.parametrize("name", ["max_separable", "average_separable", "lp_taps"])
def test_a_plan_short_of_the_routes_workspace_is_refused_when_the_session_prepares(name):
    case = EXAMPLES[name]
    graph = load_model(_model(case.op, case.x, case.dtype, case.attrs, case.indices).SerializeToString())
    refuses_a_short_workspace(graph, rf"node 'pool' \({case.op}\).*workspace.*declares")
