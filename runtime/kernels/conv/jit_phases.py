"""Compiled im2col of a stride-2 float32 conv through the image's four phases (`runtime.kernels._jit`).

A stride-2 window reads every other column, so `jit_conv.im2col_band` copies each of its
kernel-tap rows by a stride-2 gather, which does not vectorise: ResNet's 7 x 7 stem (3
channels, 147 taps) spent 0.55 ms filling its im2col bands against 2.5 ms of sgemm (0.15 ms
here). A band's input rows are first split, once, into the four phases of the zero-padded
image, phase (a, b)[c, i, j] = padded[c, 2 i + a, 2 j + b], two input columns read at a time
(which vectorises); then tap (ky, kx) of output row oy is a contiguous run of phase
(ky % 2, kx % 2), row oy + ky // 2, from column kx // 2: each input element is gathered once
instead of once per tap, and the taps' copies are plain ones.

The loop allocates nothing (the phases are the kernel's workspace, `phase_shape`) and is None
with compiled loops off.
"""

from __future__ import annotations

import functools

import numpy as np

from runtime.kernels._jit import ENABLED, compiled, numba
from runtime.kernels.window import Geometry

DTYPE = np.dtype(np.float32)
MIN_TAPS = 25  # kernel taps from which the phases pay (ResNet's 7 x 7 stem: 0.55 -> 0.15 ms)


def takes(geo: Geometry, dtype) -> bool:
    """Whether a dense float32 2-D conv fills its im2col bands here: stride 2, undilated, and a
    kernel of at least `MIN_TAPS` taps (a 3 x 3 window copies each input element only about
    twice, into rows of 7 to 28: 0.28 against 0.34 ms over 128 channels of 56 x 56, 0.22
    against 0.18 over 512 of 14 x 14)."""
    return (
        im2col_stride2 is not None
        and np.dtype(dtype) == DTYPE
        and len(geo.kernel) == 2
        and geo.strides == (2, 2)
        and geo.dilations == (1, 1)
        and geo.kernel[0] * geo.kernel[1] >= MIN_TAPS
    )


def phase_shape(channels: int, rows: int, kh: int, kw: int, out_w: int) -> tuple[int, int, int, int]:
    """(4, C, phase rows, phase columns) of the phases a band of `rows` output rows reads."""
    return 4, channels, rows + (kh - 1) // 2, out_w + (kw - 1) // 2


def _im2col_stride2(x, col, phases, r0, m, kh, kw, ph, pw, ow):  # type: ignore[no-untyped-def]
    """col (flat, read as (C, kh, kw, m, ow)) = the receptive fields of output rows [r0, r0 + m)
    of image `x` (C, H, W) for a stride-2, undilated window with pads `ph`, `pw` (zeros outside
    the image); `phases` (4, C, PR, PC) at least `phase_shape` is filled first."""
    channels, height, width = x.shape
    rows, cols = m + (kh - 1) // 2, ow + (kw - 1) // 2
    zero = np.float32(0.0)
    # input column t lands in phase (t + pw) % 2, column (t + pw) // 2: in pairs of columns
    # (2 q, 2 q + 1) read together, which the compiler vectorises (one strided gather did not)
    even_to, odd_to = pw % 2, (pw + 1) % 2
    even_at, odd_at = pw // 2, (pw + 1) // 2
    pairs = max(0, min(width // 2, cols - max(even_at, odd_at)))
    for c in range(channels):
        src_plane = x[c]
        for a in range(2):
            for i in range(rows):
                y = 2 * (r0 + i) + a - ph
                p0, p1 = phases[a * 2, c, i], phases[a * 2 + 1, c, i]
                if y < 0 or y >= height:
                    for j in range(cols):
                        p0[j] = zero
                        p1[j] = zero
                    continue
                src = src_plane[y]
                for b in range(2):  # the pads each phase row starts and ends with
                    dst = phases[a * 2 + b, c, i]
                    lo = min(cols, max(0, (pw - b + 1) // 2))
                    hi = max(lo, min(cols, (width - 1 + pw - b) // 2 + 1))
                    for j in range(lo):
                        dst[j] = zero
                    for j in range(hi, cols):
                        dst[j] = zero
                evens, odds = phases[a * 2 + even_to, c, i], phases[a * 2 + odd_to, c, i]
                for q in range(_u(pairs)):
                    first, second = src[_u(2) * q], src[_u(2) * q + _u(1)]
                    evens[_u(even_at) + q] = first
                    odds[_u(odd_at) + q] = second
                for t in range(2 * pairs, width):  # an odd last column, or columns past the pairs
                    j = (t + pw) // 2
                    if j < cols:
                        phases[a * 2 + (t + pw) % 2, c, i, j] = src[t]
    flat = phases.reshape(-1)
    rows, cols = phases.shape[2], phases.shape[3]  # the buffer's, for a shorter last band too
    at = 0
    for c in range(channels):
        for ky in range(kh):
            for kx in range(kw):
                # unsigned offsets: no negative-index wrap check, so the copies vectorise
                start = _u((((ky % 2) * 2 + kx % 2) * channels + c) * rows * cols + (ky // 2) * cols + kx // 2)
                for r in range(m):
                    src, dst = _u(start + r * cols), _u(at)
                    for q in range(_u(ow)):
                        col[dst + q] = flat[src + q]
                    at += ow


def im2col_into(x_image: np.ndarray, col: np.ndarray, phases: np.ndarray, r0: int, m: int, geo: Geometry) -> None:
    """`im2col_stride2` with `geo`'s numbers."""
    assert im2col_stride2 is not None
    (kh, kw), (ph, pw) = geo.kernel, geo.begin
    im2col_stride2(x_image, col, phases, r0, m, kh, kw, ph, pw, geo.out[1])


if ENABLED:
    _u = compiled(lambda i: numba.uint64(i), inline=True)  # an index known not negative
    im2col_stride2 = compiled(_im2col_stride2)
else:
    im2col_stride2 = None


@functools.cache
def warm() -> None:
    """Compile the loop (or load it from numba's cache) on tiny calls, at prepare."""
    if im2col_stride2 is None:
        return
    x = np.zeros((1, 2, 2), DTYPE)
    read_only = x.view()
    read_only.flags.writeable = False
    for image in (x, read_only):
        im2col_stride2(image, np.zeros(9, DTYPE), np.zeros((4, 1, 2, 2), DTYPE), 0, 1, 3, 3, 1, 1, 1)
