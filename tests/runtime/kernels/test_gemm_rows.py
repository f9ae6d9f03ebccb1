"""Gemm of a few rows (a classifier at batch 1): the compiled loop that reads B once against
onnx.reference, over transA/transB, alpha/beta and every bias shape the spec allows, with B as
a constant and as a graph input; the numpy route for the same cases; more rows than the loop
takes; and the bytes beside the arena."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels import matmul
from runtime.oracle import oracle_outputs

RNG = np.random.default_rng(23)
K, N = 37, 29


def _bias_shape(kind: str, m: int) -> tuple[int, ...] | None:
    return {"none": None, "scalar": (), "one": (1,), "row": (N,), "row2d": (1, N), "column": (m, 1), "full": (m, N)}[kind]  # fmt: skip


def gemm_model(m: int, *, trans_a: int, trans_b: int, alpha: float, beta: float, bias: str, b_constant: bool = True,
               elem: int = TensorProto.FLOAT) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:  # fmt: skip
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    a = RNG.standard_normal((K, m) if trans_a else (m, K)).astype(dtype)
    b = RNG.standard_normal((N, K) if trans_b else (K, N)).astype(dtype)
    shape = _bias_shape(bias, m)
    inputs = [helper.make_tensor_value_info("a", elem, list(a.shape))]
    feeds = {"a": a}
    inits = []
    if b_constant:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", elem, list(b.shape)))
        feeds["b"] = b
    names = ["a", "b"]
    if shape is not None:
        inits.append(numpy_helper.from_array(RNG.standard_normal(shape).astype(dtype), "c"))
        names.append("c")
    node = helper.make_node("Gemm", names, ["y"], alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)
    out = helper.make_tensor_value_info("y", elem, [m, N])
    graph = helper.make_graph([node], "gemm", inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), feeds


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    name, want, notes = oracle_outputs(model.SerializeToString(), feeds, prefer="reference")
    assert want is not None and name is not None and "reference" in name, notes
    session = runtime.Session(runtime.load_model(model)).prepare()
    got = session.run(feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


def _counted(monkeypatch) -> list[str] | None:
    """The names of the compiled loops called from now on; None when compiled loops are off
    (no numba, or MEMPLAN_JIT=0: the cases still run, on numpy's route)."""
    if matmul._rows_dot is None:
        return None
    matmul._warm()  # compiled before counting: a session's prepare does it once per process
    calls: list[str] = []
    for name in ("_rows_dot", "_rows_axpy"):
        loop = getattr(matmul, name)

        def counted(*args, loop=loop, name=name):
            calls.append(name)
            return loop(*args)

        monkeypatch.setattr(matmul, name, counted)
    return calls


BIASES = ["none", "scalar", "one", "row", "row2d", "column", "full"]


@pytest.mark.parametrize("bias", BIASES)
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (0.5, 2.0), (1.5, 0.0)])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("m", [1, 3])
def test_few_rows_match_onnx_reference(monkeypatch, m, trans_a, trans_b, alpha, beta, bias):
    calls = _counted(monkeypatch)
    _check(*gemm_model(m, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta, bias=bias))
    takes_bias = bias in ("none", "scalar", "one", "row", "row2d") or beta == 0.0 or m == 1
    contiguous_a = not trans_a or m == 1
    if calls is None:
        return
    if takes_bias and contiguous_a:
        assert calls == ["_rows_dot" if trans_b else "_rows_axpy"]
    else:
        assert calls == []  # numpy's route: a transposed A of several rows, or a bias per row


@pytest.mark.parametrize("bias", BIASES)
@pytest.mark.parametrize("trans_b", [0, 1])
def test_numpy_route_matches_onnx_reference(monkeypatch, trans_b, bias):
    monkeypatch.setattr(matmul, "_rows_dot", None)
    monkeypatch.setattr(matmul, "_rows_axpy", None)
    _check(*gemm_model(1, trans_a=0, trans_b=trans_b, alpha=0.5, beta=2.0, bias=bias))


@pytest.mark.parametrize("trans_b", [0, 1])
def test_b_as_a_graph_input(monkeypatch, trans_b):
    calls = _counted(monkeypatch)
    _check(*gemm_model(1, trans_a=0, trans_b=trans_b, alpha=1.0, beta=1.0, bias="row", b_constant=False))
    assert calls is None or len(calls) == 1


def test_more_rows_than_the_loop_takes_go_to_blas(monkeypatch):
    calls = _counted(monkeypatch)
    _check(*gemm_model(matmul.FEW_ROWS + 1, trans_a=0, trans_b=1, alpha=1.0, beta=1.0, bias="row"))
    _check(*gemm_model(matmul.FEW_ROWS, trans_a=0, trans_b=1, alpha=1.0, beta=1.0, bias="row"))
    assert calls is None or len(calls) == 1


def test_double_stays_on_numpy(monkeypatch):
    calls = _counted(monkeypatch)
    _check(*gemm_model(1, trans_a=0, trans_b=1, alpha=1.0, beta=1.0, bias="row", elem=TensorProto.DOUBLE))
    assert not calls


def test_special_values_pass_through():
    model, feeds = gemm_model(1, trans_a=0, trans_b=1, alpha=1.0, beta=1.0, bias="row")
    feeds["a"][0, :3] = [np.inf, np.nan, -np.inf]
    name, want, notes = oracle_outputs(model.SerializeToString(), feeds, prefer="reference")
    assert want is not None, notes
    got = runtime.Session(runtime.load_model(model)).prepare().run(feeds)
    np.testing.assert_array_equal(np.isnan(got["y"]), np.isnan(want["y"]))


def test_classifier_at_batch_1_allocates_little_beside_the_arena():
    model, feeds = gemm_model(1, trans_a=0, trans_b=1, alpha=1.0, beta=1.0, bias="row")
    session = runtime.Session(runtime.load_model(model), "greedy_by_size").prepare()
    session.run(feeds)
    session.run(feeds, measure="memory")
    outside, arena = session.stats.outside_arena_bytes, session.stats.arena_bytes
    assert outside is not None and outside <= max(arena // 100, 64 * 1024), (outside, arena)
