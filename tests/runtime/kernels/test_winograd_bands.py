"""Winograd's F(2x2, 3x3) on the bands of a tiled stage (`runtime.kernels.conv.winograd.takes`): a
band of at least `MIN_PIXELS` output pixels (its input carrying its rows and zero columns, the conv
unpadded) takes it by default and matches onnx.reference with exactly the declared workspace; a
smaller band keeps im2col (measured no faster with its weights cold, and a larger workspace), and so
does a map whose transformed weights are too large for the cache over few tiles."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels.conv import jit_winograd, winograd
from runtime.kernels.conv.routes import conv_route
from tests.runtime.kernels.harness import call_conv, close, conv_data, conv_reference

needs_jit = pytest.mark.skipif(jit_winograd.inputs is None, reason="compiled loops off or numba missing")

BAND = {"pads": [0, 0, 0, 0]}  # a band's input carries its rows and zero columns: the conv runs unpadded
SAME = {"pads": [1, 1, 1, 1]}


@needs_jit
@pytest.mark.parametrize(
    ("x_shape", "filters"),
    [((1, 64, 6, 58), 64), ((1, 32, 4, 114), 48), ((1, 16, 7, 58), 16)],
    ids=["4x56", "2x112", "5x56-thin"],
)
def test_a_band_of_enough_pixels_takes_winograd_and_matches_the_reference(x_shape, filters, monkeypatch):
    calls = []
    real = winograd.conv_winograd

    def counted(*args, **kwargs):
        calls.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(winograd, "conv_winograd", counted)
    x, w, b = conv_data(x_shape, (filters, x_shape[1], 3, 3), True, 2900)
    want = conv_reference(x, w, b, BAND, [("Relu", {})])
    got = np.full(want.shape, np.nan, np.float32)
    call_conv("ConvAct", x, w, b, got, {**BAND, "activation": "Relu"})
    assert calls, "the band did not take Winograd"
    close([got], [want], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("x_shape", "filters", "attrs"),
    [
        ((1, 64, 3, 58), 64, BAND),  # one row of 56
        ((1, 64, 6, 44), 64, BAND),  # four rows of 42: 168 pixels
        ((1, 128, 6, 30), 128, BAND),  # four rows of 28
        ((1, 384, 14, 14), 384, SAME),  # a whole map, 9.4 MB of transformed weights over 49 tiles
        ((1, 512, 14, 14), 512, SAME),  # 16 MB of them
    ],
    ids=["1x56", "4x42", "4x28-deep", "14x14-384", "14x14-512"],
)
def test_small_bands_and_weights_too_large_for_the_cache_keep_im2col(x_shape, filters, attrs):
    height = x_shape[2] if attrs["pads"][0] else x_shape[2] - 2
    width = x_shape[3] if attrs["pads"][1] else x_shape[3] - 2
    w_shape = (filters, x_shape[1], 3, 3)
    geo, route = conv_route(x_shape, w_shape, (1, filters, height, width), attrs)
    assert route in ("im2col", "taps")
    assert not winograd.takes(geo, x_shape, w_shape, 1, np.float32)


def test_transformed_weights_that_stay_in_cache_keep_winograd_on_a_small_deep_map():
    """256 channels at 14 x 14 (4 MB of transformed weights): measured faster by Winograd."""
    x_shape, w_shape = (1, 256, 14, 14), (256, 256, 3, 3)
    geo, route = conv_route(x_shape, w_shape, (1, 256, 14, 14), SAME)
    assert winograd.takes(geo, x_shape, w_shape, 1, np.float32) is (jit_winograd.inputs is not None)
