"""The stride-2 im2col through the image's phases (`runtime.kernels.conv.jit_phases`): the same bands
as `jit_conv.im2col_band` byte for byte (pads, odd sizes, a shorter last band, kernels of even
and odd sides), and stride-2 Convs of many taps through a session's route against
onnx.reference, in one band and in many."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels.conv import jit_conv, jit_phases
from runtime.kernels.window import window_geometry
from tests.runtime.kernels.harness import close, one_node, run_against_reference

needs_jit = pytest.mark.skipif(jit_phases.im2col_stride2 is None, reason="compiled loops off or numba missing")


@needs_jit
@pytest.mark.parametrize(
    ("channels", "size", "kernel", "pad", "rows"),
    [
        (3, 32, 7, 3, 4),  # ResNet's stem, smaller
        (3, 33, 7, 3, 5),  # odd input, a shorter last band
        (2, 15, 5, 2, 3),
        (4, 14, 5, 0, 2),  # unpadded
        (2, 12, 4, 1, 3),  # an even kernel side
        (1, 9, 6, 4, 1),  # pads wider than half the kernel
    ],
)
def test_phases_fill_the_same_bands_as_the_strided_gather(channels, size, kernel, pad, rows):
    x = np.random.default_rng(size).standard_normal((channels, size, size + 1)).astype(np.float32)
    out_h, out_w = (size + 2 * pad - kernel) // 2 + 1, (size + 1 + 2 * pad - kernel) // 2 + 1
    geo = window_geometry((1, *x.shape), (1, 1, out_h, out_w), (kernel, kernel), "NOTSET", [pad] * 4, [2, 2], None)
    assert jit_phases.takes(geo, x.dtype) == (kernel * kernel >= jit_phases.MIN_TAPS)
    phases = np.full(jit_phases.phase_shape(channels, rows, kernel, kernel, out_w), np.nan, np.float32)
    for r in range(0, out_h, rows):
        m = min(rows, out_h - r)
        want = np.empty(channels * kernel * kernel * m * out_w, np.float32)
        got = np.full_like(want, np.nan)
        jit_conv.im2col_into(x, want, r, m, geo)
        jit_phases.im2col_into(x, got, phases, r, m, geo)
        np.testing.assert_array_equal(got, want)


@needs_jit
@pytest.mark.parametrize("small_bands", [False, True])
@pytest.mark.parametrize(("kernel", "pad", "size"), [(7, 3, 30), (5, 2, 17), (5, 1, 20)])
def test_stride_2_conv_of_many_taps_against_reference(kernel, pad, size, small_bands, monkeypatch):
    if small_bands:
        monkeypatch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 64)
        monkeypatch.setattr("runtime.kernels.window.MIN_BAND_PIXELS", 1)
    called = []
    real = jit_phases.im2col_stride2
    monkeypatch.setattr(jit_phases, "im2col_stride2", lambda *a: (called.append(1), real(*a)))
    rng = np.random.default_rng(kernel * size)
    x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    w = rng.standard_normal((8, 3, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    model = one_node("Conv", {"x": x, "w": w, "b": b}, strides=[2, 2], pads=[pad] * 4)
    got, expected = run_against_reference(model, {"x": x, "w": w, "b": b})
    close(got, expected)
    assert called
