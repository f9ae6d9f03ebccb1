"""The normalisations (and the Lp pools) on seeded random shapes and attributes against onnxruntime."""

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


@pytest.mark.parametrize("seed", range(8))
def test_more_normalisations_and_lp_pools_against_onnxruntime(seed):
    rng = np.random.default_rng(1000 + seed)
    x = rng.standard_normal((2, 6, 5, 4)).astype(np.float32)
    cases = [
        ("LpNormalization", {"x": x}, 1, {"axis": int(rng.integers(-4, 4)), "p": 1 + seed % 2}),
        (
            "MeanVarianceNormalization",
            {"x": x},
            13,
            {"axes": [int(a) for a in sorted(rng.choice(4, 2, replace=False))]},
        ),
        ("GlobalLpPool", {"x": x}, 2, {"p": 1 + seed % 3}),
        ("LpPool", {"x": x}, 18, {"kernel_shape": [2, 3], "p": 1 + seed % 3, "pads": [1, 1, 0, 1], "strides": [1, 2]}),
        (
            "GroupNormalization",
            {"x": x, "s": rng.standard_normal(6).astype(np.float32), "b": rng.standard_normal(6).astype(np.float32)},
            21,
            {"num_groups": [1, 2, 3, 6][seed % 4]},
        ),
        ("RMSNormalization", {"x": x, "s": rng.standard_normal(4).astype(np.float32)}, 23, {}),
    ]
    for op, feeds, opset, attrs in cases:
        model = one_node(op, feeds, opset=opset, **attrs)
        if op == "RMSNormalization":
            got, expected = run_against_reference(model, feeds)  # newer than this onnxruntime
        else:
            expected = run_ort(model, feeds)
            got = run_kernel(model, list(feeds.values()), like=expected)
        close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "axis", "with_bias", "stats"),
    [((2, 7, 33), -1, True, False), ((2, 7, 33), 1, False, True), ((3, 5), 0, True, True), ((1, 128, 384), 2, True, False),
     ((4, 3, 2, 5), -2, True, True)],
)  # fmt: skip
def test_layer_normalization_against_onnxruntime(shape, axis, with_bias, stats):
    # Workspace full of garbage, axes anywhere, with and without bias, the optional mean and
    # 1/std outputs; a scale and bias per normalised element.
    rng = np.random.default_rng(len(shape) + axis)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    normalised = shape[axis:] if axis >= 0 else shape[len(shape) + axis :]
    feeds = {"x": x, "s": rng.standard_normal(normalised).astype(np.float32)}
    if with_bias:
        feeds["b"] = rng.standard_normal(normalised).astype(np.float32)
    n = 3 if stats else 1
    model = one_node("LayerNormalization", feeds, n_outputs=n, opset=17, out_types=[np.float32] * n, axis=axis)
    expected = run_ort(model, feeds)
    got, _ = run_with_workspace(model, list(feeds.values()), expected, "exact")
    close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_of_zero_and_underflowing_vectors_matches_onnxruntime(p):
    """A zero vector, and one whose squares underflow to a zero norm, are divided by 1 (as
    onnxruntime does); the norms and that mask live in the workspace."""
    x = np.zeros((4, 5), np.float32)
    x[1] = [1, 2, 3, 4, 5]
    x[2, 0] = 1e-45  # a subnormal: its square is 0 in float32
    x[3] = -7
    model = one_node("LpNormalization", {"x": x}, opset=17, axis=-1, p=p)
    want = run_ort(model, {"x": x})
    for mode in ("exact", "none"):
        got, _ = run_with_workspace(model, [x], want, mode)
        close(got, want, rtol=1e-6, atol=1e-40)  # onnxruntime flushes the subnormal result to 0
