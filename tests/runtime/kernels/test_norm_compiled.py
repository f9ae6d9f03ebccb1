"""LayerNormalization and RMSNormalization through both routes: the compiled row loops
(`runtime.kernels.jit_norm`) and the numpy routes (those loops taken away), against
onnx.reference: axes, epsilon, bias or none, the optional Mean and InvStdDev outputs, NaN and
infinities, a scale broadcast over the normalised axes (numpy's route only), and a
transformer-sized run through the Session whose first, traced run stays within the bound
beside the arena."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import runtime
from runtime.kernels import jit_norm
from tests.runtime.kernels.harness import close, one_node, run_against_reference, run_ort, run_with_workspace

LOOPS = ("layer_norm_loop", "rms_norm_loop")


@pytest.fixture(params=["compiled", "numpy"])
def route(request, monkeypatch):
    """Which route the kernels take; "compiled" also counts the compiled loops' calls (rows)."""
    calls: list[int] = []
    for name in LOOPS:
        loop = getattr(jit_norm, name)
        if request.param == "numpy":
            monkeypatch.setattr(jit_norm, name, None)
        elif loop is None:
            pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
        else:
            jit_norm.prepared(name)  # compiled before its calls are counted

            def counted(*args, _loop=loop):
                calls.append(args[0].shape[0])
                _loop(*args)

            monkeypatch.setattr(jit_norm, name, counted)
    return request.param, calls


def _model(feeds: dict, n: int, **attrs) -> onnx.ModelProto:
    return one_node("LayerNormalization", feeds, n_outputs=n, opset=17, out_types=[np.float32] * n, **attrs)


@pytest.mark.parametrize(
    ("shape", "axis", "epsilon", "with_bias", "outputs"),
    [((2, 7, 33), -1, 1e-5, True, 1), ((2, 7, 33), 1, 1e-3, False, 3), ((3, 5), 0, 1e-5, True, 3),
     ((1, 16, 384), 2, 1e-12, True, 2), ((4, 3, 2, 5), -2, 0.1, True, 3), ((6, 1), -1, 1e-5, False, 3),
     ((3, 11, 197), 2, 1e-5, False, 1), ((197, 192), -1, 1e-6, True, 1)],
)  # fmt: skip
def test_layer_normalization_against_onnx_reference(shape, axis, epsilon, with_bias, outputs, route):
    rng = np.random.default_rng(len(shape) * 10 + axis)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    normalised = shape[axis:] if axis >= 0 else shape[len(shape) + axis :]
    feeds = {"x": x, "s": rng.standard_normal(normalised).astype(np.float32)}
    if with_bias:
        feeds["b"] = rng.standard_normal(normalised).astype(np.float32)
    model = _model(feeds, outputs, axis=axis, epsilon=epsilon)
    got, expected = run_against_reference(model, feeds)
    close(got, expected, rtol=1e-4, atol=1e-5)
    got, _ = run_with_workspace(model, list(feeds.values()), expected, "exact")  # NaN bytes in the workspace
    close(got, expected, rtol=1e-4, atol=1e-5)
    name, calls = route
    assert len(calls) == (2 if name == "compiled" else 0)


def test_nan_and_infinity_stay_in_their_rows(route):
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    x[1, 3], x[2, 0] = np.nan, np.inf
    feeds = {"x": x, "s": np.ones(16, np.float32), "b": np.zeros(16, np.float32)}
    model = _model(feeds, 3)
    got, expected = run_against_reference(model, feeds)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, equal_nan=True)
    y = got[0]
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all() and np.isfinite(y[[0, 3]]).all()


def test_a_scale_broadcast_over_the_normalised_axes_takes_numpy(route):
    rng = np.random.default_rng(8)
    feeds = {
        "x": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "s": rng.standard_normal((1, 4)).astype(np.float32),
    }
    model = _model(feeds, 1, axis=1)
    got, expected = run_against_reference(model, feeds)
    close(got, expected, rtol=1e-4, atol=1e-5)
    assert route[1] == []


def test_float64_takes_numpy(route):
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((3, 8)), "s": rng.standard_normal(8), "b": rng.standard_normal(8)}
    model = one_node("LayerNormalization", feeds, n_outputs=1, opset=17)
    got, expected = run_against_reference(model, feeds)
    close(got, expected, rtol=1e-10, atol=1e-12)
    assert route[1] == []


def test_layer_norms_through_a_session(route):
    """Two LayerNormalizations of a transformer's shape through the Session against
    onnxruntime; the first run is the traced one and stays within the bound beside the arena."""
    rng = np.random.default_rng(4)
    width = 384
    inits = [
        helper.make_tensor(n, TensorProto.FLOAT, [width], rng.standard_normal(width).astype(np.float32))
        for n in ("s1", "b1", "s2", "b2")
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "s1", "b1"], ["h"], epsilon=1e-12),
        helper.make_node("Add", ["h", "x"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "s2", "b2"], ["y"], epsilon=1e-5),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, width])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": (rng.standard_normal((1, 128, width)) * 2).astype(np.float32)}
    session = runtime.Session(runtime.load_model(model), "greedy_by_size").prepare()
    outputs = session.run(feeds, measure="memory")
    arena, outside = session.stats.arena_bytes, session.stats.outside_arena_bytes
    assert outside is not None and outside <= max(arena // 100, 64 * 1024), f"{outside:,} beside {arena:,}"
    np.testing.assert_allclose(outputs["y"], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
    name, calls = route
    assert calls == ([128, 128] if name == "compiled" else [])


@pytest.mark.parametrize(
    ("shape", "axis", "epsilon"), [((2, 7, 33), -1, 1e-5), ((3, 4, 5), 1, 0.1), ((1, 16, 384), 2, 1e-6)]
)
def test_rms_normalization_against_onnx_reference(shape, axis, epsilon, route):
    rng = np.random.default_rng(60 + axis)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    x.flat[5] = np.nan  # its row only
    normalised = shape[axis:] if axis >= 0 else shape[len(shape) + axis :]
    feeds = {"x": x, "s": rng.standard_normal(normalised).astype(np.float32)}
    model = one_node("RMSNormalization", feeds, opset=23, axis=axis, epsilon=epsilon)
    got, expected = run_against_reference(model, feeds)  # newer than this onnxruntime
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5, equal_nan=True)
    assert np.isnan(got[0]).sum() == int(np.prod(normalised))
    name, calls = route
    rows = int(np.prod(shape)) // int(np.prod(normalised))
    assert calls == ([rows] if name == "compiled" else [])


def test_rms_normalization_with_a_broadcast_scale_takes_numpy(route):
    rng = np.random.default_rng(61)
    feeds = {
        "x": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "s": rng.standard_normal((1, 4)).astype(np.float32),
    }
    model = one_node("RMSNormalization", feeds, opset=23, axis=1)
    got, expected = run_against_reference(model, feeds)
    close(got, expected, rtol=1e-4, atol=1e-5)
    assert route[1] == []
