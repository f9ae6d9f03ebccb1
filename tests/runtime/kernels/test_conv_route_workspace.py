"""Every Conv route runs within the workspace it declares: for each example of `conv_routes.EXAMPLES` (the
route asserted from `conv_routes.conv_route`, the one choice the workspace function, the call and
the bound call read), the kernel is called with exactly the declared bytes of workspace, by the
general call and by the session's dispatcher (its bound call where it has one), and must match
onnx.reference without allocating more than small ufunc buffers beside it. `Scratch` refuses a
take past the workspace's end, so a route taking more than it declared fails here."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import TensorMeta, call, get_kernel, loop_ufunc_buffers
from runtime.kernels.conv.conv import conv_workspace
from runtime.kernels.conv.routes import EXAMPLES, conv_route


def _reference(x, w, b, attrs) -> np.ndarray:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "conv", [], [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(a, n) for n, a in (("x", x), ("w", w), ("b", b))],
    )  # fmt: skip
    return ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).run(None, {})[0]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_route_runs_within_its_declared_workspace(name):
    case = EXAMPLES[name]
    route, x_shape, w_shape, attrs, dtype = case.route, case.x, case.w, case.attrs, case.dtype
    rng = np.random.default_rng(sorted(EXAMPLES).index(name))
    x, w = (rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape))
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    want = _reference(x, w, b, attrs)
    _, path = conv_route(x_shape, w_shape, want.shape, attrs)
    numpy_depthwise = ("depthwise_rows", "depthwise_taps")
    if route in numpy_depthwise and path in numpy_depthwise:
        route = path  # which of the two numpy depthwise routes depends on the map's size
    assert path == route, f"{name} takes {path}, not {route}"
    kernel = get_kernel("Conv")
    assert kernel is not None
    metas_in = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    metas_out = [TensorMeta(want.shape, want.dtype)]
    size = conv_workspace(metas_in, metas_out, **attrs)
    kernel.prepare(metas_in, metas_out, **attrs)  # compiled loops built before the traced calls
    for way in ("general", "dispatcher"):
        for traced in (False, True):  # the first call sets numpy's machinery up; the second is measured
            out = np.full(want.shape, np.nan, dtype)
            ws = np.zeros(size, np.uint8)
            if traced:
                tracemalloc.start()
            with loop_ufunc_buffers():
                if way == "general":
                    kernel.fn(x, w, b, out=out, ws=ws, **attrs)
                else:
                    call(kernel, [x, w, b], [out], ws, attrs, 17)
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                assert peak < 64 * 1024, f"{name} ({way}): {peak:,} bytes beside a workspace of {size:,}"
        tolerance = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(out, want, rtol=tolerance, atol=tolerance, err_msg=f"{name} ({way})")
