"""Depthwise Conv by banded row products (`runtime.kernels.depthwise`) against onnx.reference:
seeded random geometries (kernel sizes, strides, dilations, pads, auto_pad, odd sizes, batch
up to 3, with and without bias), each checked to take the banded route; the same in channel
blocks of one channel; and the route rule itself."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels.conv import conv_route
from runtime.kernels.depthwise import tile_width, uses_rows
from runtime.kernels.window import spatial_geometry
from tests.runtime.kernels.harness import close, one_node, run_against_reference


def _case(seed: int):
    rng = np.random.default_rng(4100 + seed)
    kernel = [int(k) for k in rng.integers(1, 6, 2)]
    strides = [int(s) for s in rng.integers(1, 3, 2)]
    attrs: dict = {"kernel_shape": kernel, "strides": strides, "dilations": [int(d) for d in rng.integers(1, 3, 2)]}
    if seed % 5 == 4:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["pads"] = [int(rng.integers(0, k + 1)) for k in kernel * 2]
    channels = int(rng.integers(1, 12))
    batch = int(rng.integers(1, 4))
    spatial = [int(s) for s in rng.integers(9, 31, 2)]
    x = rng.standard_normal((batch, channels, *spatial)).astype(np.float32)
    w = rng.standard_normal((channels, 1, *kernel)).astype(np.float32)
    feeds = {"x": x, "w": w}
    if seed % 3:
        feeds["b"] = rng.standard_normal(channels).astype(np.float32)
    return feeds, {**attrs, "group": channels}


def _check(seed: int) -> bool:
    """Run one case against onnx.reference; whether it took the banded route."""
    feeds, attrs = _case(seed)
    model = one_node("Conv", feeds, **attrs)
    got, expected = run_against_reference(model, feeds)
    close(got, expected)
    x, w = feeds["x"], feeds["w"]
    pads, strides, dilations = (attrs.get(k) for k in ("pads", "strides", "dilations"))
    _, path = conv_route(x.shape, w.shape, expected[0].shape, attrs["group"], attrs.get("auto_pad", "NOTSET"), pads,
                     strides, dilations, attrs["kernel_shape"])  # fmt: skip
    return path == "rows"


def test_depthwise_rows_against_reference():
    banded = [seed for seed in range(48) if _check(seed)]
    # Most cases take the banded route (the others are checked all the same, on im2col).
    assert len(banded) >= 30, banded


@pytest.mark.parametrize("seed", [0, 1, 2, 5, 7])
def test_depthwise_rows_one_channel_per_block_against_reference(seed, monkeypatch):
    monkeypatch.setattr("runtime.kernels.depthwise.ROWS_BLOCK_BYTES", 4)
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
