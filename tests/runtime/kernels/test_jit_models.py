"""The mobile models whose depthwise convs and activations take the compiled loops, whole, against
onnxruntime: MobileNetV3-Small and EfficientNet-B0 as `bench/real_models.py` exports them
(random weights), run in one planned arena with the canary (every step writes only what it
declares), their depthwise steps planned over their own inputs where the planner puts them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import runtime
from runtime.kernels import JIT_ENABLED
from runtime.oracle import oracle_outputs

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.mark.skipif(not JIT_ENABLED, reason="compiled loops off or numba missing")
@pytest.mark.parametrize("name", ["mobilenetv3_small", "efficientnet_b0"])
def test_a_mobile_model_with_compiled_loops_matches_onnxruntime(name, tmp_path):
    pytest.importorskip("torch")
    sys.path.insert(0, str(BENCH))
    try:
        import real_models
    finally:
        sys.path.remove(str(BENCH))
    path = real_models.export(name, tmp_path)
    feeds = dict(np.load(tmp_path / f"{name}.npz"))
    graph = runtime.load_model(path)
    session = runtime.Session(graph, canary=True).prepare()
    got = session.run(feeds)
    _, want, notes = oracle_outputs(path.read_bytes(), feeds)
    assert want is not None, notes
    for output, value in want.items():
        np.testing.assert_allclose(got[output], value, rtol=1e-4, atol=1e-4)
