"""Conv as one matmul per kernel tap (2-D, stride 1, ungrouped, at most half as many filters as
channels: DenseNet's 3x3 convs) against onnx.reference, in whole images and in bands of rows."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels.conv import uses_taps
from runtime.kernels.window import window_geometry
from tests.kernel_harness import close, one_node, run_against_reference


def _case(seed: int):
    rng = np.random.default_rng(1200 + seed)
    kernel = [int(k) for k in rng.integers(1, 5, 2)]
    if kernel == [1, 1]:
        kernel = [3, 3]
    attrs: dict = {"kernel_shape": kernel, "dilations": [int(d) for d in rng.integers(1, 3, 2)]}
    if seed % 4 == 3:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
    channels = int(rng.integers(4, 17))
    filters = int(rng.integers(1, channels // 2 + 1))
    x = rng.standard_normal((int(rng.integers(1, 3)), channels, *rng.integers(9, 20, 2))).astype(np.float32)
    w = rng.standard_normal((filters, channels, *kernel)).astype(np.float32)
    feeds = {"x": x, "w": w}
    if seed % 3:
        feeds["b"] = rng.standard_normal(filters).astype(np.float32)
    return feeds, attrs


@pytest.mark.parametrize("seed", range(16))
def test_conv_by_taps_against_reference(seed):
    feeds, attrs = _case(seed)
    model = one_node("Conv", feeds, **attrs)
    got, expected = run_against_reference(model, feeds)
    x, w = feeds["x"], feeds["w"]
    geo = window_geometry(x.shape, expected[0].shape, attrs["kernel_shape"], attrs.get("auto_pad", "NOTSET"),
                          attrs.get("pads"), None, attrs["dilations"])  # fmt: skip
    assert uses_taps(x.shape, w.shape, geo, 1)
    close(got, expected)


@pytest.mark.parametrize("seed", [0, 1, 5, 6])
def test_conv_by_taps_in_bands_against_reference(seed, monkeypatch):
    monkeypatch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 64)  # one output row per band
    test_conv_by_taps_against_reference(seed)
