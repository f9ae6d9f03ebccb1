"""One compiled pass that requantizes a band of accumulators into an integer output (numba, when the
compiled loops are on): TFLite's MultiplyByQuantizedMultiplier for right shifts, per channel, with
the bias before and the zero point and clamp after. numpy takes ten passes and their temporaries for
the same arithmetic (`runtime.quant_arith`), which the tests compare bit for bit."""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels._jit import compiled


def _requantize_rows(acc, bias, multiplier, right, zero, lo, hi, out):  # pragma: no cover - compiled
    for c in range(acc.shape[0]):
        m = multiplier[c]
        r = right[c]
        b = bias[c]
        mask = (np.int64(1) << r) - 1
        half = mask >> 1
        for p in range(acc.shape[1]):
            t = (np.int64(acc[c, p]) + b) * m
            if t >= 0:
                t += np.int64(1) << 30
            else:
                t += np.int64(1) - (np.int64(1) << 30)
            if t < 0:
                t += np.int64(0x7FFFFFFF)  # truncation toward zero, as C++ divides
            high = t >> 31
            threshold = half + (np.int64(1) if high < 0 else np.int64(0))
            value = (high >> r) + (np.int64(1) if (high & mask) > threshold else np.int64(0)) + zero
            out[c, p] = min(max(value, lo), hi)


_COMPILED = compiled(_requantize_rows)


def channel_parameters(bias, multiplier, shift, channels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Contiguous int64 (bias, multiplier, shift) with one entry per channel, once per kernel call,
    and whether the compiled pass takes them (right shifts and non-negative multipliers only)."""
    b = np.zeros(channels, np.int64) if bias is None else np.broadcast_to(np.asarray(bias, np.int64), (channels,))
    m = np.broadcast_to(np.asarray(multiplier, np.int64).reshape(-1), (channels,))
    s = np.broadcast_to(np.asarray(shift, np.int64).reshape(-1), (channels,))
    fast = _COMPILED is not None and bool(np.all(s <= 0)) and bool(np.all(m >= 0))
    return np.ascontiguousarray(b), np.ascontiguousarray(m), np.ascontiguousarray(s), fast


def requantize_rows(acc: np.ndarray, params: tuple, zero: int, lo: int, hi: int, out: np.ndarray) -> None:
    """``out[c, p] = clamp(MBQM(acc[c, p] + bias[c], multiplier[c], shift[c]) + zero)`` for a (channels,
    pixels) band, with `params` from `channel_parameters` (sliced to the band's channels)."""
    b, m, s, fast = params
    if fast and _COMPILED is not None:
        _COMPILED(acc, b, m, -s, zero, lo, hi, out)
        return
    total = acc.astype(np.int64) + b[:, None]
    out[...] = qa.requantize(total, m[:, None], s[:, None], zero, lo, hi)
