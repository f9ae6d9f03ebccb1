"""Compiled loops around a dense Conv's matmuls (`runtime.kernels._jit`): what is not sgemm.

A dense 2-D Conv is im2col then one BLAS matmul per band of output rows. Around that matmul
numpy takes several passes over memory: the image copied into a zero-padded buffer, the
band's receptive fields copied out of a strided view of it, then the bias added over the
whole output and the activation run over it once more. Here, for float32:

* `im2col_band` fills a band of the im2col buffer in one pass straight from the unpadded
  image, writing zeros where a window leaves it (no padded copy; strides and dilations in
  the loop, a contiguous copy per row segment at stride 1);
* `bias_act` adds the bias and applies the activation (`jit_activation.spec`) over a range
  of output columns of every filter, right after the band's matmul wrote them, while they
  are in cache: one pass instead of two over the whole output;
* `add_bias_residual` is PointwiseConvAdd's epilogue: target = act(band + bias + residual)
  in one pass (target may be the residual's own memory).

Loops allocate nothing and keep NaN and infinities (`_jit`'s rules). With compiled loops
off every function here is None and the kernels keep their numpy routes.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from runtime.kernels import jit_activation, window
from runtime.kernels._jit import compiled
from runtime.kernels.conv import jit_phases
from runtime.kernels.window import Geometry

DTYPE = np.dtype(np.float32)
_MINUS_LOG2E = np.float32(-math.log2(math.e))  # exp(-v) = 2^(-v log2 e)
_exp2 = jit_activation.exp2  # inlined into the loops below; None with compiled loops off


def _im2col_band(x, col, r0, m, kh, kw, sh, sw, dh, dw, ph, pw, ow):  # type: ignore[no-untyped-def]
    """col (flat, read as (C, kh, kw, m, ow)) = the receptive fields of output rows
    [r0, r0 + m) of image `x` (C, H, W), zero where a window reads outside the image."""
    channels, height, width = x.shape
    flat = x.reshape(-1)
    zero = np.float32(0.0)
    at = 0
    for c in range(channels):
        for i in range(kh):
            for j in range(kw):
                base = j * dw - pw
                # columns q with 0 <= q * sw + base < width: [lo, hi)
                lo = 0 if base >= 0 else min(ow, (-base + sw - 1) // sw)
                last = width - 1 - base
                hi = 0 if last < 0 else min(ow, last // sw + 1)
                hi = max(hi, lo)
                for r in range(m):
                    iy = (r0 + r) * sh - ph + i * dh
                    if iy < 0 or iy >= height:
                        for q in range(ow):
                            col[_u(at + q)] = zero
                    else:
                        for q in range(lo):
                            col[_u(at + q)] = zero
                        # unsigned indices: no negative-index wrap check, so the copy vectorises
                        src = _u((c * height + iy) * width + lo * sw + base)
                        dst = _u(at + lo)
                        step = _u(sw)
                        for q in range(_u(hi - lo)):
                            col[dst + q] = flat[src + q * step]
                        for q in range(hi, ow):
                            col[_u(at + q)] = zero
                    at += ow


def _bias_act(y, b, has_bias, start, stop, code, p0, p1):  # type: ignore[no-untyped-def]
    """y[f, start:stop] = act(y[f, start:stop] + b[f]) for every row f of the 2-D array `y`,
    a row's segment at a time, the bias added in the activation's own pass."""
    for f in range(y.shape[0]):
        _shifted_act(y[f, start:stop], b[f] if has_bias else np.float32(0.0), code, p0, p1)


def _act(seg, code, p0, p1):  # type: ignore[no-untyped-def]
    """The activation of `spec` code over `seg` in place."""
    _shifted_act(seg, np.float32(0.0), code, p0, p1)


def _shifted_act(seg, shift, code, p0, p1):  # type: ignore[no-untyped-def]
    """seg = act(seg + shift) in place, in one loop for the activations mobile networks fuse
    into a conv (Relu, Clip, HardSwish, SiLU, Sigmoid: a loop of its own per activation, which
    the compiler vectorises; SiLU through `jit_activation.activate` after a separate shift took
    1.4x the time), else the shift then `jit_activation`'s loop."""
    n = seg.size
    if code == jit_activation.RELU:
        zero = np.float32(0.0)
        for i in range(n):
            v = seg[i] + shift
            seg[i] = zero if v < zero else v
    elif code == jit_activation.CLIP:
        lo, hi = np.float32(p0), np.float32(p1)
        for i in range(n):
            v = seg[i] + shift
            v = lo if v < lo else v
            seg[i] = hi if v > hi else v
    elif code == jit_activation.HARD_SWISH:
        zero, one = np.float32(0.0), np.float32(1.0)
        for i in range(n):
            v = seg[i] + shift
            g = v * np.float32(1.0 / 6.0) + np.float32(0.5)
            g = zero if g < zero else g
            seg[i] = v * (one if g > one else g)
    elif code == jit_activation.SILU:
        for i in range(n):
            v = seg[i] + shift
            seg[i] = v / (np.float32(1.0) + _exp2(v * _MINUS_LOG2E))
    elif code == jit_activation.SIGMOID:
        for i in range(n):
            seg[i] = np.float32(1.0) / (np.float32(1.0) + _exp2((seg[i] + shift) * _MINUS_LOG2E))
    else:
        if shift != np.float32(0.0):
            for i in range(n):
                seg[i] += shift
        if code != jit_activation.NONE:
            jit_activation.activate(seg, code, p0, p1)


def _add_bias_residual(band, b, has_bias, residual, target, code, p0, p1):  # type: ignore[no-untyped-def]
    """target = act(band + b[:, None] + residual), all (k, P) C-contiguous, target apart from
    residual (same memory: `_add_bias_residual_in_place`)."""
    for f in range(band.shape[0]):
        bias = b[f] if has_bias else np.float32(0.0)
        src, res, dst = band[f], residual[f], target[f]
        for i in range(dst.size):
            dst[i] = src[i] + bias + res[i]
        _act(dst, code, p0, p1)


def _add_bias_residual_in_place(band, b, has_bias, target, code, p0, p1):  # type: ignore[no-untyped-def]
    """target = act(band + b[:, None] + target)."""
    for f in range(band.shape[0]):
        bias = b[f] if has_bias else np.float32(0.0)
        src, dst = band[f], target[f]
        for i in range(dst.size):
            dst[i] += src[i] + bias
        _act(dst, code, p0, p1)


if jit_activation.activate is not None:
    from runtime.kernels._jit import numba

    _u = compiled(lambda i: numba.uint64(i), inline=True)  # an index known not negative
    _shifted_act = compiled(_shifted_act)  # type: ignore[assignment]
    _act = compiled(_act)  # type: ignore[assignment]
    im2col_band = compiled(_im2col_band)
    bias_act = compiled(_bias_act)
    add_bias_residual = compiled(_add_bias_residual)
    add_bias_residual_in_place = compiled(_add_bias_residual_in_place)
else:
    im2col_band = bias_act = add_bias_residual = add_bias_residual_in_place = None


def usable(*arrays: np.ndarray) -> bool:
    """Whether the compiled loops take these arrays: loops on, float32, C-contiguous."""
    return im2col_band is not None and all(a.dtype == DTYPE and a.flags.c_contiguous for a in arrays)


def takes_epilogue(dtype: np.dtype) -> bool:
    """Whether the compiled bias and activation loop (`bias_act`) takes an output of `dtype`."""
    return bias_act is not None and np.dtype(dtype) == DTYPE


def takes_im2col(geo: Geometry, dtype: np.dtype) -> bool:
    """Whether a dense Conv of this geometry and dtype fills its im2col bands by `im2col_band`."""
    return im2col_band is not None and len(geo.kernel) == 2 and np.dtype(dtype) == DTYPE


# Output rows from which a stride-2 window of fewer taps than `jit_phases.MIN_TAPS` (3 x 3) fills
# its bands through the image's phases too: each tap's row is then a copy long enough to outrun
# the strided gather (a 224 x 224 image's 3 x 3 stride-2 bands 99 -> 57 us; rows of 56 outputs
# 15-35% faster, of 28 15-20%, over 16 to 96 channels); narrower ones keep it (`jit_phases.takes`).
WIDE_ROWS = 28


def takes_phases(geo: Geometry, dtype: np.dtype) -> bool:
    """Whether a dense Conv's im2col bands go through the image's phases (`jit_phases`)."""
    if jit_phases.takes(geo, dtype):
        return True
    stride2 = geo.strides == (2, 2) and geo.dilations == (1, 1)
    return jit_phases.im2col_stride2 is not None and takes_im2col(geo, dtype) and stride2 and geo.out[1] >= WIDE_ROWS


# A band's depth (channels x taps) up to which a window of few taps through the phases takes a
# quarter of `window.IM2COL_BLOCK_BYTES`: a stem's (3 channels, 27), whose matmul keeps its pace
# on shorter bands; deeper ones lose (64 channels, 576: 3-5% slower on ResNet-18's 28 x 28).
STEM_DEPTH = 32


def band_bytes(geo: Geometry, channels: int, dtype: np.dtype) -> int:
    """Bytes of a dense Conv's im2col band: `window.IM2COL_BLOCK_BYTES`, a quarter of it for a
    stem through the phases, whose scratch comes on top (a 224 x 224 stem's two bands of 677 KB
    and 309 KB of phases become six of 230 KB and 108 KB, 2% slower)."""
    few_taps = takes_phases(geo, dtype) and not jit_phases.takes(geo, dtype)
    stem = few_taps and channels * math.prod(geo.kernel) <= STEM_DEPTH
    return window.IM2COL_BLOCK_BYTES // 4 if stem else window.IM2COL_BLOCK_BYTES


NO_ACTIVATION = jit_activation.spec("")


def spec_of(finish: object | None) -> tuple[int, float, float] | None:
    """The activation spec a compiled epilogue applies for `finish` (None: no activation), or
    None when `finish` carries none (it then runs after, over each image)."""
    if finish is None:
        return NO_ACTIVATION
    return getattr(finish, "spec", None)


def im2col_into(x_image: np.ndarray, col: np.ndarray, r0: int, m: int, geo: Geometry) -> None:
    """`im2col_band` with `geo`'s numbers (2-D)."""
    assert im2col_band is not None
    (kh, kw), (sh, sw), (dh, dw) = geo.kernel, geo.strides, geo.dilations
    im2col_band(x_image, col, r0, m, kh, kw, sh, sw, dh, dw, geo.begin[0], geo.begin[1], geo.out[1])


def epilogue(y: np.ndarray, b: np.ndarray | None, start: int, stop: int, spec: tuple[int, float, float]) -> None:
    """`bias_act` over columns [start, stop) of the 2-D array `y` (bias may be None)."""
    assert bias_act is not None
    bias_act(y, EMPTY if b is None else b, b is not None, start, stop, *spec)


EMPTY = np.zeros(1, DTYPE)


def prepare(*_: object, **__: object) -> None:
    """A dense Conv's prepare hook (`runtime.kernels.kernel`): its loops compiled when a session
    prepares the node, so that no run compiles and planning alone never does."""
    warm()


@functools.cache
def warm() -> None:
    """Compile the loops (or load them from numba's cache) on tiny calls, at prepare."""
    if im2col_band is None or bias_act is None or add_bias_residual is None or add_bias_residual_in_place is None:
        return
    jit_activation.warm()
    x = np.zeros((1, 2, 2), DTYPE)
    read_only = x.view()
    read_only.flags.writeable = False
    col = np.zeros(4, DTYPE)
    for src in (x, read_only):
        im2col_band(src, col, 0, 2, 1, 1, 1, 1, 1, 1, 0, 0, 2)
    y = np.zeros((2, 2), DTYPE)
    ro_b = np.zeros(2, DTYPE)
    ro_b.flags.writeable = False
    for bias in (ro_b, EMPTY, np.zeros(2, DTYPE)):
        bias_act(y, bias, True, 0, 2, jit_activation.RELU, 0.0, 0.0)
    ro_r = np.zeros((2, 2), DTYPE)
    ro_r.flags.writeable = False
    for bias in (ro_b, EMPTY):
        for res in (ro_r, y):
            add_bias_residual(y, bias, True, res, np.zeros((2, 2), DTYPE), jit_activation.RELU, 0.0, 0.0)
        add_bias_residual_in_place(y, bias, True, np.zeros((2, 2), DTYPE), jit_activation.RELU, 0.0, 0.0)
