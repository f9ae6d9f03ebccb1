"""The normalisations (and the Lp pools) on seeded random shapes and attributes against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.harness import close, one_node, run_against_reference, run_kernel, run_ort


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
