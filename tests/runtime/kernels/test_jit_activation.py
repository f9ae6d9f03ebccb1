"""Compiled activations (`runtime.kernels.jit_activation`) and the numpy routes they replace,
against onnx.reference: the standalone kernels (Sigmoid, HardSigmoid, HardSwish, Clip, Gelu
exact and tanh, Softmax and LogSoftmax over the last axis) on odd sizes with NaN, infinities
and huge values, out of place and in place; the activations ConvAct fuses on both routes; and the compiled exp2 against float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import TensorMeta, attributes_of, call, get_kernel, jit_activation
from tests.runtime.kernels.harness import run_kernel

needs_jit = pytest.mark.skipif(jit_activation.activate is None, reason="compiled loops off or numba missing")

CASES = [  # (op, attributes, extra inputs)
    ("Sigmoid", {}, {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {}),
    ("HardSwish", {}, {}),
    ("Clip", {}, {"lo": np.float32(-0.5), "hi": np.float32(6.0)}),
    ("Gelu", {}, {}),
    ("Gelu", {"approximate": "tanh"}, {}),
    ("Softmax", {"axis": -1}, {}),
    ("LogSoftmax", {"axis": -1}, {}),
]
IDS = ["sigmoid", "hardsigmoid", "hardswish", "clip", "gelu", "gelu-tanh", "softmax", "logsoftmax"]


def _input(seed: int, special: bool) -> np.ndarray:
    rng = np.random.default_rng(300 + seed)
    x = (rng.standard_normal((3, 5, 37)) * 6).astype(np.float32)
    if special:
        x.reshape(-1)[rng.choice(x.size, 8, replace=False)] = [np.nan, np.inf, -np.inf, 1e30, -1e30, 90, -90, 0]
    return x


def _model(op: str, attrs: dict, extra: dict, shape) -> object:
    names = ["x", *extra]
    node = helper.make_node(op, names, ["y"], **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in extra]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _numpy_route(monkeypatch) -> None:
    for name in ("activate", "activate_row", "softmax_rows", "softmax_rows_in_place"):
        monkeypatch.setattr(jit_activation, name, None)


def _check(op, attrs, extra, special, in_place) -> None:
    x = _input(0, special)
    model = _model(op, attrs, extra, x.shape)
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, {"x": x, **extra})[0]
    if in_place:
        kernel = get_kernel(op)
        assert kernel is not None
        y = x.copy()
        ws = None
        if kernel.workspace is not None:
            ws = np.zeros(kernel.workspace([y, *extra.values()], [y], **attrs), np.uint8)
        call(kernel, [y, *extra.values()], [y], ws, attributes_of(model.graph.node[0]), 20)
        got = y
    else:
        got = run_kernel(model, [x, *extra.values()], [want])[0]
    if special and op in ("Softmax", "LogSoftmax"):
        # A row holding NaN or +inf is NaN throughout on every side; check the others.
        rows = np.isfinite(x).all(axis=-1) | (np.isnan(x).sum(axis=-1) == 0) & (x != np.inf).all(axis=-1)
        got, want, x = got[rows], want[rows], x[rows]
    if special and op == "LogSoftmax":
        # onnx.reference takes the log of an exponential that underflowed (-inf) where the
        # exact value is far below: memplan keeps x - max - log(sum).
        gone = want == -np.inf
        assert np.all(got[gone] < -80)
        got, want = got[~gone], want[~gone]
    # The reference's log of a denormal exponential keeps about four digits.
    rtol = 1e-4 if special and op == "LogSoftmax" else 1e-5
    np.testing.assert_allclose(got, want, rtol=rtol, atol=2e-6)


@pytest.mark.parametrize("in_place", [False, True], ids=["apart", "in-place"])
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize(("op", "attrs", "extra"), CASES, ids=IDS)
@pytest.mark.parametrize("route", ["compiled", "numpy"])
def test_standalone_activations_match_the_reference(op, attrs, extra, special, in_place, route, monkeypatch):
    if route == "numpy":
        _numpy_route(monkeypatch)
    elif jit_activation.activate is None:
        pytest.skip("compiled loops off or numba missing")
    _check(op, attrs, extra, special, in_place)


FUSED = [
    ("Relu", {}, lambda x: np.maximum(x, 0)),
    ("Clip", {"lo": -0.5, "hi": 6.0}, lambda x: np.clip(x, -0.5, 6.0)),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, lambda x: np.clip(0.3 * x + 0.4, 0, 1)),
    ("HardSwish", {}, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    ("Sigmoid", {}, lambda x: 1 / (1 + np.exp(-x))),
    ("Silu", {}, lambda x: x / (1 + np.exp(-x))),
]


@pytest.mark.parametrize("route", ["compiled", "numpy"])
@pytest.mark.parametrize(("name", "params", "formula"), FUSED, ids=[f[0] for f in FUSED])
def test_fused_activations_match_their_formula_on_both_routes(name, params, formula, route, monkeypatch):
    if route == "numpy":
        _numpy_route(monkeypatch)
    elif jit_activation.activate is None:
        pytest.skip("compiled loops off or numba missing")
    # Through ConvAct with one channel and a 1x1 filter of 1: the activation of x itself,
    # NaN and infinities included, over an output of a dense conv (the epilogue's path).
    x = _input(1, special=True).reshape(1, 1, 15, 37)
    with np.errstate(all="ignore"):
        want = formula(x.astype(np.float64))
    kernel = get_kernel("ConvAct", "memplan")
    assert kernel is not None and kernel.workspace is not None
    w, b = np.ones((1, 1, 1, 1), np.float32), np.zeros(1, np.float32)
    y = np.empty_like(x)
    attrs = {"activation": name, **params, "kernel_shape": [1, 1]}
    metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    ws = np.zeros(kernel.workspace(metas, [TensorMeta(y.shape, y.dtype)], **attrs), np.uint8)
    kernel.fn(x, w, b, out=y, ws=ws, **attrs)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@needs_jit
def test_exp2_is_within_an_ulp_or_two_and_keeps_its_ends():
    import numba

    exp2 = jit_activation.exp2

    @numba.njit
    def exp2_all(x, y):
        for i in range(x.size):
            y[i] = exp2(x[i])

    x = np.concatenate([np.linspace(-126, 127, 200001), [np.nan, np.inf, -np.inf, 128.5, -200]]).astype(np.float32)
    y = np.empty_like(x)
    exp2_all(x, y)
    want = np.exp2(x[:-5].astype(np.float64))
    assert np.max(np.abs(y[:-5] - want) / want) < 2.5e-7
    assert np.isnan(y[-5]) and y[-4] == np.inf and y[-3] == 0 and y[-2] == np.inf and y[-1] == 0


@needs_jit
def test_gelu_in_one_pass_is_as_close_as_the_numpy_route():
    from scipy.special import erf

    x = np.linspace(-12, 12, 40001).astype(np.float32)
    y = np.empty_like(x)
    jit_activation.run(jit_activation.spec("Gelu"), x, y)
    want = 0.5 * x.astype(np.float64) * (1 + erf(x.astype(np.float64) / math.sqrt(2)))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("in_place", [False, True], ids=["apart", "in-place"])
@pytest.mark.parametrize("route", ["compiled", "numpy"])
def test_masked_attention_scores_softmax_matches_onnxruntime(route, in_place, monkeypatch):
    """Attention scores (batch 2, 3 heads, 197 queries by 197 keys, an odd row length) with a
    mask of float32's minimum added to the last keys of the second batch, one row all masked,
    one holding NaN, rows of negatives only, of -inf every other key, of signed zeros:
    Softmax against onnxruntime, apart and in place."""
    import onnxruntime as ort

    if route == "numpy":
        _numpy_route(monkeypatch)
    elif jit_activation.activate is None:
        pytest.skip("compiled loops off or numba missing")
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 3, 197, 197)) * 4).astype(np.float32)
    lowest = np.finfo(np.float32).min
    x[1, :, :, 150:] += lowest  # a padding mask: those keys get 0
    x[0, 1, 5, :] = lowest  # a row masked throughout: uniform, as onnxruntime gives it
    x[0, 2, 9, 17] = np.nan
    x[0, 0, 3] = -np.abs(x[0, 0, 3]) - 100  # negatives only: the maximum from ordered integers
    x[0, 0, 4, ::2] = -np.inf
    x[0, 0, 6, :] = -0.0
    x[0, 0, 6, 100] = 0.0
    model = _model("Softmax", {"axis": -1}, {}, x.shape)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    oracle = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    want = oracle.run(None, {"x": x})[0]
    if in_place:
        kernel = get_kernel("Softmax")
        assert kernel is not None and kernel.workspace is not None
        got = x.copy()
        ws = np.zeros(kernel.workspace([got], [got], axis=-1), np.uint8)
        call(kernel, [got], [got], ws, {"axis": -1}, 20)
    else:
        got = run_kernel(model, [x], [want])[0]
    assert np.isnan(got[0, 2, 9]).all()
    got[0, 2, 9], want[0, 2, 9] = 0, 0
    assert np.all(got[1, :, :, 150:] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
