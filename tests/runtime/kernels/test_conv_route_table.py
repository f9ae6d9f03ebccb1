"""Conv's route table (`conv_routes.ROUTES`): one value per route, one meaning per name, and the
workspace each declares covers what its run takes.

For every example of `conv_routes.EXAMPLES` and variants of its shape (two images, a larger map),
the route the planner-facing workspace function reads is the route object the call runs: its run
is called with exactly the bytes the route declares (`Scratch` refuses a take past the end) and
must match onnx.reference. At plan time, a session refuses to prepare a plan whose workspace for
a Conv is short of what its route declares, naming the node, before any run."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from runtime import Session, load_model
from runtime.kernels import TensorMeta, get_kernel
from runtime.kernels.conv.conv import conv_workspace
from runtime.kernels.conv.routes import EXAMPLES, ROUTE_NAMES, ROUTES, ConvGeometry
from tests.runtime.kernels.harness import refuses_a_short_workspace


def _model(x_shape, w, b, attrs):
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs)
    elem = TensorProto.FLOAT if w.dtype == np.float32 else TensorProto.DOUBLE
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", elem, list(x_shape))],
        [helper.make_tensor_value_info("y", elem, [None] * len(x_shape))],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _variants():
    for name, case in sorted(EXAMPLES.items()):
        yield name, case.x
        yield f"{name}-two_images", (2, *case.x[1:])
        yield f"{name}-larger_map", (*case.x[:2], *(s + 3 for s in case.x[2:]))


def test_route_names_are_unique_and_every_route_has_an_example():
    assert len(set(ROUTE_NAMES)) == len(ROUTES)
    assert set(ROUTE_NAMES) == {case.route for case in EXAMPLES.values()} | {"depthwise_taps"}


@pytest.mark.parametrize(("name", "x_shape"), list(_variants()), ids=[n for n, _ in _variants()])
def test_each_route_runs_within_the_workspace_it_declares(name, x_shape):
    case = EXAMPLES[name.split("-")[0]]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(x_shape).astype(case.dtype)
    w = rng.standard_normal(case.w).astype(case.dtype)
    b = rng.standard_normal(case.w[0]).astype(case.dtype)
    want = ReferenceEvaluator(_model(x_shape, w, b, case.attrs)).run(None, {"x": x})[0]
    c = ConvGeometry.of(x.shape, w.shape, want.shape, case.attrs)
    geo, route = c.chosen
    assert route in ROUTES and route.applies(c, geo)
    assert [r.name for r in ROUTES if r.applies(c, geo)][0] == route.name  # the first that applies
    metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    planned = conv_workspace(metas, [TensorMeta(want.shape, want.dtype)], **case.attrs)
    declared = route.bytes(metas[0], metas[1], geo, c.group)
    assert declared <= planned  # the planner's workspace covers the route (and the over-input route's)
    kernel = get_kernel("Conv")
    assert kernel is not None and kernel.prepare is not None
    kernel.prepare(metas, [TensorMeta(want.shape, want.dtype)], **case.attrs)
    out = np.full(want.shape, np.nan, case.dtype)
    route.call(x, w, b, out, geo, c.group, np.zeros(declared, np.uint8), None)
    tolerance = 1e-4 if case.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out, want, rtol=tolerance, atol=tolerance, err_msg=f"{name} by {route.name}")


@pytest.mark.parametrize("name", ["taps", "winograd_f2", "depthwise_rows"])
def test_a_plan_short_of_the_routes_workspace_is_refused_when_the_session_prepares(name):
    case = EXAMPLES[name]
    rng = np.random.default_rng(3)
    w = rng.standard_normal(case.w).astype(case.dtype)
    b = rng.standard_normal(case.w[0]).astype(case.dtype)
    graph = load_model(_model(case.x, w, b, case.attrs).SerializeToString())
    refuses_a_short_workspace(graph, r"node 'conv' \(Conv\).*workspace.*declares")
    # the same model planned as memplan plans it prepares and runs
    x = rng.standard_normal(case.x).astype(case.dtype)
    want = ReferenceEvaluator(_model(case.x, w, b, case.attrs)).run(None, {"x": x})[0]
    got = Session(graph, plan="first_fit").prepare().run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
