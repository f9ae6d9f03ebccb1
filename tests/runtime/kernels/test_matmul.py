"""Gemm, the integer products (MatMulInteger, ConvInteger) and Einsum on seeded random attributes and shapes,
against onnx.reference or onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.harness import (
    close,
    one_node,
    run_against_reference,
    run_kernel,
    run_ort,
    run_with_workspace,
)


@pytest.mark.parametrize("seed", range(20))
def test_gemm_random_against_reference(seed):
    rng = np.random.default_rng(300 + seed)
    m, k, n = (int(v) for v in rng.integers(1, 7, 3))
    trans_a, trans_b = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c_shape = [(), (n,), (1, n), (m, 1), (m, n), None][seed % 6]
    c = None if c_shape is None else rng.standard_normal(c_shape).astype(np.float32)
    attrs = {"alpha": float(rng.choice([1.0, 0.5, -2.0])), "beta": float(rng.choice([1.0, 0.0, 3.0]))}
    feeds = {"a": a, "b": b, "c": c}
    model = one_node("Gemm", feeds, transA=trans_a, transB=trans_b, **attrs)
    got, expected = run_against_reference(model, {k: v for k, v in feeds.items() if v is not None})
    close(got, expected)


@pytest.mark.parametrize("seed", range(8))
def test_integer_products_random_against_onnxruntime(seed):
    rng = np.random.default_rng(900 + seed)
    if seed % 2:
        a = rng.integers(0, 256, (3, 5), dtype=np.uint8)
        b = rng.integers(0, 256, (5, 4), dtype=np.uint8)
        feeds = {"a": a, "b": b, "az": np.array(rng.integers(0, 256), dtype=np.uint8)}
        feeds["bz"] = rng.integers(0, 256, 4, dtype=np.uint8) if seed % 4 == 1 else np.array(7, dtype=np.uint8)
        model = one_node("MatMulInteger", feeds, opset=10, out_types=[np.int32])
    else:
        group = 1 + seed % 3
        x = rng.integers(0, 256, (1, 2 * group, 6, 5), dtype=np.uint8)
        w = rng.integers(0, 256, (3 * group, 2, 3, 3), dtype=np.uint8)
        feeds = {"x": x, "w": w, "xz": np.array(rng.integers(0, 256), dtype=np.uint8)}
        feeds["wz"] = np.array(rng.integers(0, 256), dtype=np.uint8)
        model = one_node("ConvInteger", feeds, opset=10, out_types=[np.int32], group=group, pads=[1, 0, 1, 2])
    expected = run_ort(model, feeds)
    got = run_kernel(model, list(feeds.values()), like=expected)
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bij,bjk->bik", [(4, 5, 6), (4, 6, 7)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)]),
        ("bhqk,bhkd->bqhd", [(2, 3, 5, 7), (2, 3, 7, 8)]),
        ("i,i->", [(5,), (5,)]),
        ("abc,cd->dba", [(2, 3, 4), (4, 5)]),
        ("ij,kj->ikj", [(3, 4), (5, 4)]),
        ("bij,bjk->bik", [(1, 5, 6), (4, 6, 7)]),  # a broadcast batch: numpy's einsum path
        ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: numpy's einsum path
    ],
)
def test_einsum_against_onnxruntime_with_garbage_workspace(equation, shapes):
    rng = np.random.default_rng(len(equation))
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    model = one_node("Einsum", feeds, opset=12, equation=equation)
    expected = run_ort(model, feeds)
    got, _ = run_with_workspace(model, list(feeds.values()), expected, "exact")
    close(got, expected, rtol=1e-5, atol=1e-5)
