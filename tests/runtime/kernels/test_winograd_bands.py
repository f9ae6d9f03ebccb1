"""Winograd's F(2x2, 3x3) on the bands of a tiled stage (`runtime.kernels.conv.winograd.takes`):
a few rows of a wide map, deep enough, take it by default and match onnx.reference with exactly
the declared workspace; bands where im2col was measured faster (one row at 64 channels, thin
channels, transformed weights too large for the cache over few tiles) keep im2col."""

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
        ((1, 64, 4, 58), 64, BAND),  # two output rows of 56
        ((1, 64, 5, 58), 32, BAND),  # three rows: the last tile row half used
        ((1, 128, 3, 30), 128, BAND),  # one row of 28 at 128 channels
        ((1, 64, 7, 7), 64, {"pads": [1, 1, 1, 1]}),  # a whole small map
    ],
    ids=["2x56", "3x56", "1x28-deep", "7x7-map"],
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
        ((1, 16, 3, 114), 16, BAND),  # 16 channels: the transforms cost more than they save
        ((1, 32, 7, 7), 32, {"pads": [1, 1, 1, 1]}),  # 16 tiles of 32-deep sgemms
        ((1, 512, 7, 7), 512, {"pads": [1, 1, 1, 1]}),  # 16 MB of transformed weights over 16 tiles
    ],
    ids=["1x56", "thin", "7x7-32", "7x7-512"],
)
def test_bands_where_im2col_wins_keep_it(x_shape, filters, attrs):
    height = x_shape[2] if attrs["pads"][0] else x_shape[2] - 2
    width = x_shape[3] if attrs["pads"][1] else x_shape[3] - 2
    out = (1, filters, height, width)
    geo, route = conv_route(x_shape, (filters, x_shape[1], 3, 3), out, attrs)
    assert route in ("im2col", "taps")
    assert not winograd.takes(geo, x_shape, (filters, x_shape[1], 3, 3), 1, np.float32)
