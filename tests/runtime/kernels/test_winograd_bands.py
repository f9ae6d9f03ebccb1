"""Winograd's F(2x2, 3x3) on the bands of a tiled stage (`runtime.kernels.conv.winograd.takes`):
two rows of tiles or more of a wide map, deep enough, take it by default and match onnx.reference
with exactly the declared workspace; where im2col was measured as fast or faster (one row of tiles,
thin channels, transformed weights too large for the cache over few tiles) it keeps im2col."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels.conv import jit_winograd, winograd
from runtime.kernels.conv.routes import conv_route
from tests.runtime.kernels.harness import call_conv, conv_data, conv_reference

needs_jit = pytest.mark.skipif(jit_winograd.inputs is None, reason="compiled loops off or numba missing")

BAND = {"pads": [0, 0, 0, 0]}  # a band's input carries its rows and zero columns: the conv runs unpadded


@needs_jit
@pytest.mark.parametrize(
    ("x_shape", "filters", "attrs"),
    [
        ((1, 64, 6, 44), 64, BAND),  # four output rows of 42 (two rows of tiles)
        ((1, 64, 7, 30), 32, BAND),  # five rows of 28: the last tile row half used
        ((1, 128, 6, 30), 128, BAND),  # four rows of 28 at 128 channels
        ((1, 64, 7, 7), 64, {"pads": [1, 1, 1, 1]}),  # a whole small map
    ],
    ids=["4x42", "5x28", "4x28-deep", "7x7-map"],
)
def test_a_band_takes_winograd_and_matches_the_reference(x_shape, filters, attrs, monkeypatch):
    calls = []
    real = winograd.conv_winograd

    def counted(*args, **kwargs):
        calls.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(winograd, "conv_winograd", counted)
    x, w, b = conv_data(x_shape, (filters, x_shape[1], 3, 3), True, 2900)
    want = conv_reference(x, w, b, attrs, [("Relu", {})])
    assert np.prod(want.shape[2:]) < winograd.MIN_PIXELS  # below the whole-map threshold
    got = np.full(want.shape, np.nan, np.float32)
    call_conv("ConvAct", x, w, b, got, {**attrs, "activation": "Relu"})
    assert calls, "the band did not take Winograd"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_jit
@pytest.mark.parametrize(
    ("x_shape", "filters", "attrs"),
    [
        ((1, 64, 3, 58), 64, BAND),  # one row of 56 at 64 channels: half of each tile wasted
        ((1, 256, 4, 16), 256, BAND),  # one row of tiles: no gain once the weights are cold
        ((1, 32, 6, 44), 32, BAND),  # 32 channels: the transforms cost more than they save
        ((1, 32, 7, 7), 32, {"pads": [1, 1, 1, 1]}),  # 16 tiles of 32-deep sgemms
        ((1, 512, 7, 7), 512, {"pads": [1, 1, 1, 1]}),  # 16 MB of transformed weights over 16 tiles
        ((1, 384, 14, 14), 384, {"pads": [1, 1, 1, 1]}),  # a whole map, 9.4 MB of them over 49 tiles
    ],
    ids=["1x56", "2x14-deep", "thin", "7x7-32", "7x7-512", "14x14-384"],
)
def test_bands_where_im2col_wins_keep_it(x_shape, filters, attrs):
    height = x_shape[2] if attrs["pads"][0] else x_shape[2] - 2
    width = x_shape[3] if attrs["pads"][1] else x_shape[3] - 2
    out = (1, filters, height, width)
    geo, route = conv_route(x_shape, (filters, x_shape[1], 3, 3), out, attrs)
    assert route in ("im2col", "taps")
    assert not winograd.takes(geo, x_shape, (filters, x_shape[1], 3, 3), 1, np.float32)
