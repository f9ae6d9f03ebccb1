"""Resize on seeded random modes, scales and sizes against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.harness import close, one_node, run_against_reference


@pytest.mark.parametrize("seed", range(24))
def test_resize_random_against_reference(seed):
    rng = np.random.default_rng(700 + seed)
    mode = ["nearest", "linear", "cubic"][seed % 3]
    transform = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"][(seed // 3) % 4]
    x = rng.standard_normal((1, 2, *rng.integers(2, 7, 2))).astype(np.float32)
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    if mode == "nearest":
        attrs["nearest_mode"] = str(rng.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
    roi = np.array([], dtype=np.float32)
    if seed % 2:
        scales = np.array([1, 1, *rng.choice([0.5, 0.75, 1.5, 2.0, 3.0], 2)], dtype=np.float32)
        feeds = {"x": x, "roi": roi, "scales": scales}
    else:
        sizes = np.array([1, 2, *rng.integers(1, 10, 2)], dtype=np.int64)
        feeds = {"x": x, "roi": roi, "scales": np.array([], dtype=np.float32), "sizes": sizes}
    model = one_node("Resize", feeds, opset=19, **attrs)
    got, expected = run_against_reference(model, feeds)
    close(got, expected, rtol=1e-4, atol=1e-5)
