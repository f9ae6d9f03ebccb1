"""Depthwise Conv by banded row products and channels-last (`runtime.kernels.conv.depthwise`) against
onnx.reference: seeded random geometries (kernel sizes, strides, dilations, pads, auto_pad, odd
sizes, batch up to 3, with and without bias), each checked to take its route; the banded rows
in channel blocks of one channel; and the route rules themselves."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels.conv.depthwise import tile_width, uses_channels_last, uses_rows
from runtime.kernels.conv.routes import conv_route
from runtime.kernels.window import spatial_geometry
from tests.runtime.kernels.harness import close, one_node, run_against_reference


def _case(seed: int, many_channels: bool = False):
    rng = np.random.default_rng((8200 if many_channels else 4100) + seed)
    kernel = [int(k) for k in rng.integers(1, 6, 2)]
    strides = [int(s) for s in rng.integers(1, 3, 2)]
    attrs: dict = {"kernel_shape": kernel, "strides": strides, "dilations": [int(d) for d in rng.integers(1, 3, 2)]}
    if seed % 5 == 4:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["pads"] = [int(rng.integers(0, k + 1)) for k in kernel * 2]
    channels = int(rng.integers(192, 260)) if many_channels else int(rng.integers(1, 12))
    batch = int(rng.integers(1, 4))
    # Many channels over small maps: outputs of at most 14 x 14 (odd sizes, non-square).
    spatial = [int(s) for s in rng.integers(5, 15, 2)] if many_channels else [int(s) for s in rng.integers(9, 31, 2)]
    x = rng.standard_normal((batch, channels, *spatial)).astype(np.float32)
    w = rng.standard_normal((channels, 1, *kernel)).astype(np.float32)
    feeds = {"x": x, "w": w}
    if seed % 3:
        feeds["b"] = rng.standard_normal(channels).astype(np.float32)
    return feeds, {**attrs, "group": channels}


def _check(seed: int, route: str = "depthwise_rows", many_channels: bool = False) -> bool:
    """Run one case against onnx.reference; whether it took `route`."""
    feeds, attrs = _case(seed, many_channels)
    model = one_node("Conv", feeds, **attrs)
    got, expected = run_against_reference(model, feeds)
    close(got, expected)
    x, w = feeds["x"], feeds["w"]
    _, path = conv_route(x.shape, w.shape, expected[0].shape, attrs)
    return path == route


def test_depthwise_rows_against_reference():
    banded = [seed for seed in range(48) if _check(seed)]
    # Most cases take the banded route (the others are checked all the same, on im2col).
    assert len(banded) >= 30, banded


def test_depthwise_channels_last_against_reference():
    channels_last = [seed for seed in range(16) if _check(seed, "depthwise_channels_last", many_channels=True)]
    # A 1x1, stride-1, unpadded filter is a plain matmul: the others all run channels-last.
    assert len(channels_last) >= 12, channels_last


@pytest.mark.parametrize("seed", [0, 1, 2, 5, 7])
def test_depthwise_rows_one_channel_per_block_against_reference(seed, monkeypatch):
    monkeypatch.setattr("runtime.kernels.conv.depthwise.ROWS_BLOCK_BYTES", 4)
    _check(seed)


def test_tile_width_divides_or_covers_the_row():
    assert tile_width(112) == 14 and tile_width(7) == 7 and tile_width(13) == 13
    assert tile_width(24) == 12 and tile_width(29) is None


def test_wide_stride_one_3x3_stays_on_im2col():
    def geo(size, kernel, stride):
        out = (size - kernel) // stride + 1
        return spatial_geometry((size, size), (out, out), (kernel, kernel), strides=[stride, stride])

    assert not uses_rows(geo(58, 3, 1))
    assert uses_rows(geo(58, 3, 2)) and uses_rows(geo(60, 5, 1)) and uses_rows(geo(16, 3, 1))


def test_many_channels_over_a_small_output_run_channels_last():
    def geo(size, kernel, stride):
        out = (size - kernel) // stride + 1
        return spatial_geometry((size, size), (out, out), (kernel, kernel), strides=[stride, stride])

    assert uses_channels_last(geo(16, 3, 1), 192) and uses_channels_last(geo(11, 5, 1), 1152)
    assert uses_channels_last(geo(28, 3, 2), 240)  # a 13 x 13 output
    assert not uses_channels_last(geo(16, 3, 1), 191)  # too few channels
    assert not uses_channels_last(geo(17, 3, 1), 672)  # a 15 x 15 output
