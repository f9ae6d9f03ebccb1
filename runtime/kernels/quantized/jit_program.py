"""A whole model's integer steps as one compiled call (numba, when the compiled loops are on): an
interpreter that walks an int64-coded list of operations over the arena and a private blob (the
program's constants, tables and states), with the kernels' own arithmetic.

`runtime.program` writes the code. Each record is ``[opcode, record length, fields...]``; an operand
is a pair (space, byte offset), space 0 the arena and 1 the blob. Element types of the scalar
loops (QUANTIZE, SOFTMAX) are codes: 0 int8, 1 uint8, 2 int16, 3 int32, read and written as
little-endian bytes, so one loop serves every pair of types. SVDF calls `jit_svdf.SVDF` on typed
views of the operands' bytes; FULLY_CONNECTED is `jit_conv_int.DENSE`'s loop on flat views (its
reshapes cost more than a small layer's sums); SOFTMAX is TFLite's fixed-point form with gemmlowp's
reciprocal, its exps tabled (`tflite_softmax.exp_table`). The
interpreter allocates nothing and returns 0, or the record's index plus one when it meets an
opcode it does not know. Compiled once per machine (``cache=True``), whatever the model.
`runtime.kernels.quantized.jit_fed` calls `RUN` after copying a model's input in: `Session.run(inputs)`
as one compiled call (`runtime.fast_run`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.kernels._jit import compiled, numba
from runtime.kernels.quantized.jit_conv_int import MBQM
from runtime.kernels.quantized.jit_svdf import SVDF

FULLY_CONNECTED, SVDF_OP, QUANTIZE, SOFTMAX = 1, 2, 3, 4
INT8, UINT8, INT16, INT32 = 0, 1, 2, 3
TYPE_CODES = {np.dtype(np.int8): INT8, np.dtype(np.uint8): UINT8, np.dtype(np.int16): INT16, np.dtype(np.int32): INT32}
_MAX32 = 0x7FFFFFFF
_MIN32 = -(1 << 31)


def _space(arena, blob, space, offset, nbytes):  # pragma: no cover - compiled
    return arena[offset : offset + nbytes] if space == 0 else blob[offset : offset + nbytes]


def _load(b, i, kind):  # pragma: no cover - compiled
    """Element `i` of type code `kind` from the little-endian bytes `b`."""
    if kind == 0:
        v = np.int64(b[i])
        return v - 256 if v >= 128 else v
    if kind == 1:
        return np.int64(b[i])
    if kind == 2:
        v = np.int64(b[2 * i]) | (np.int64(b[2 * i + 1]) << 8)
        return v - 65536 if v >= 32768 else v
    v = np.int64(0)
    for k in range(4):
        v |= np.int64(b[4 * i + k]) << (8 * k)
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


def _store(b, i, kind, value):  # pragma: no cover - compiled
    width = 1 if kind <= 1 else 2 if kind == 2 else 4
    for k in range(width):
        b[width * i + k] = np.uint8((value >> (8 * k)) & 255)


def _wrap32(x):  # pragma: no cover - compiled
    return ((x + (np.int64(1) << 31)) & np.int64(0xFFFFFFFF)) - (np.int64(1) << 31)


def _srdhm(a, b):  # pragma: no cover - compiled
    """SaturatingRoundingDoublingHighMul of two int32 values."""
    if a == b and a == _MIN32:
        return np.int64(_MAX32)
    ab = np.int64(a) * np.int64(b)
    t = ab + (np.int64(1) << 30) if ab >= 0 else ab + np.int64(1) - (np.int64(1) << 30)
    high = t >> 31 if t >= 0 else -((-t) >> 31)
    return WRAP32(high)


def _rdbp(x, exponent):  # pragma: no cover - compiled
    """RoundingDivideByPOT: ties away from zero."""
    mask = (np.int64(1) << exponent) - 1
    threshold = (mask >> 1) + (np.int64(1) if x < 0 else np.int64(0))
    return (x >> exponent) + (np.int64(1) if (x & mask) > threshold else np.int64(0))


def _shift_left(x, exponent):  # pragma: no cover - compiled
    """SaturatingRoundingMultiplyByPOT with a positive exponent."""
    threshold = (np.int64(1) << (31 - exponent)) - 1
    if x > threshold:
        return np.int64(_MAX32)
    if x < -threshold:
        return np.int64(_MIN32)
    return WRAP32(x << exponent)


def _one_over_one_plus_x(a):  # pragma: no cover - compiled
    """gemmlowp's 1 / (1 + a) for a in [0, 1): Newton-Raphson on the half denominator, 3 steps."""
    half = (a + np.int64(_MAX32) + 1) // 2
    x = WRAP32(1515870810 + SRDHM(half, -1010580540))
    for _ in range(3):
        product = SRDHM(half, x)
        correction = SRDHM(x, WRAP32((np.int64(1) << 29) - product))
        x = WRAP32(x + SHIFT_LEFT(correction, 2))
    return SHIFT_LEFT(x, 1)


def _softmax(x, kind_in, y, kind_out, rows, depth, valid, exps, terms, lo, hi, bits):  # pragma: no cover - compiled
    for r in range(rows):
        top = LOAD(x, r * depth, kind_in)
        for c in range(1, depth):
            top = max(top, LOAD(x, r * depth + c, kind_in))
        total = np.int64(0)
        for c in range(depth):
            total += terms[top - LOAD(x, r * depth + c, kind_in)]
        total = WRAP32(total)
        leading = np.int64(32)  # GetReciprocal: leading zeros of the (positive) sum as a uint32
        while leading > 0 and (total >> (32 - leading)) != 0:
            leading -= 1
        scale = RECIPROCAL(WRAP32(((total << leading) & np.int64(0xFFFFFFFF)) - (np.int64(1) << 31)))
        exponent = 12 - leading + bits
        for c in range(depth):
            index = top - LOAD(x, r * depth + c, kind_in)
            value = lo
            if valid[index] != 0:
                value = min(max(RDBP(SRDHM(scale, exps[index]), exponent) + lo, lo), hi)
            STORE(y, r * depth + c, kind_out, value)


def _quantize(x, kind_in, y, kind_out, n, in_zero, multiplier, shift, out_zero, lo, hi):  # pragma: no cover
    for i in range(n):
        value = MBQM(LOAD(x, i, kind_in) - in_zero, multiplier, shift) + out_zero
        STORE(y, i, kind_out, min(max(value, lo), hi))


def _dense_flat(x, w, table, width, y, rows, depth, channels, x_zero, w_zero):  # pragma: no cover - compiled
    """`jit_conv_int.DENSE`'s arithmetic on flat views (int32 sums, MBQM, zero point, clamp): a
    reshape costs more than these small layers' sums."""
    zero, lo, hi = table[3 * width], table[3 * width + 1], table[3 * width + 2]
    for b in range(rows):
        for c in range(channels):
            acc = np.int32(0)
            for d in range(depth):
                acc += (np.int32(x[b * depth + d]) - x_zero) * (np.int32(w[c * depth + d]) - w_zero)
            value = MBQM(np.int64(acc) + table[c], table[width + c], table[2 * width + c]) + zero
            y[b * channels + c] = min(max(value, lo), hi)


def _dense(a8, b8, b64, f):  # pragma: no cover - compiled
    """Fields: x, rows, depth, w, channels, table, its width, y (operands as space and offset), zero
    points of x and w (all three int8). `a8` and `b8` are the arena and the blob as int8, `b64` the
    blob as int64 (the table is in the blob, 16-byte aligned): slices of them, no view per record."""
    rows, depth, channels, width = f[2], f[3], f[6], f[9]
    x = a8[f[1] : f[1] + rows * depth] if f[0] == 0 else b8[f[1] : f[1] + rows * depth]
    w = a8[f[5] : f[5] + channels * depth] if f[4] == 0 else b8[f[5] : f[5] + channels * depth]
    table = b64[f[8] // 8 : f[8] // 8 + 4 * width]
    y = a8[f[11] : f[11] + rows * channels] if f[10] == 0 else b8[f[11] : f[11] + rows * channels]
    DENSE_FLAT(x, w, table, width, y, rows, depth, channels, np.int32(f[12]), np.int32(f[13]))


def _svdf(arena, blob, f):  # pragma: no cover - compiled
    """Fields: x, batches, depth, feature weights, filters, time weights, memory, bias, units, has
    bias, state, its type code (int8 or int16: the time weights' too), x's zero point, the two (multiplier, shift) pairs,
    the state's zero point and range, the output's zero point and range, rank, y."""
    batches, depth, filters, memory, units = f[2], f[3], f[6], f[9], f[12]
    x = SPACE(arena, blob, f[0], f[1], batches * depth).view(np.int8).reshape((batches, depth))
    wf = SPACE(arena, blob, f[4], f[5], filters * depth).view(np.int8).reshape((filters, depth))
    width = 1 if f[16] == 0 else 2  # the state's and the time weights' type: int8 or int16
    wt = SPACE(arena, blob, f[7], f[8], width * filters * memory)
    bias = SPACE(arena, blob, f[10], f[11], 4 * max(units, 1)).view(np.int32)
    scales = SPACE(arena, blob, f[18], f[19], 32).view(np.int64)
    y = SPACE(arena, blob, f[27], f[28], batches * units).view(np.int8).reshape((batches, units))
    state = SPACE(arena, blob, f[14], f[15], width * batches * filters * memory)
    x_zero, state_zero, state_lo, state_hi = f[17], f[20], f[21], f[22]
    out_zero, out_lo, out_hi, rank = f[23], f[24], f[25], f[26]
    if f[16] == 0:
        time_weights = wt.view(np.int8).reshape((filters, memory))
        SVDF(x, wf, time_weights, bias, f[13] != 0, state.view(np.int8).reshape((batches, filters * memory)), x_zero,
             scales[0:2], state_zero, state_lo, state_hi, scales[2:4], out_zero, out_lo, out_hi, rank, y)  # fmt: skip
    else:
        wide = wt.view(np.int16).reshape((filters, memory))
        SVDF(x, wf, wide, bias, f[13] != 0, state.view(np.int16).reshape((batches, filters * memory)), x_zero,
             scales[0:2], state_zero, state_lo, state_hi, scales[2:4], out_zero, out_lo, out_hi, rank, y)  # fmt: skip


def _run(arena, blob, code):  # pragma: no cover - compiled
    position, index = 0, 0
    a8, b8, b64 = arena.view(np.int8), blob.view(np.int8), blob[: blob.shape[0] // 8 * 8].view(np.int64)
    while position < code.shape[0]:
        op, length = code[position], code[position + 1]
        f = code[position + 2 : position + length]
        if op == 1:
            DENSE_STEP(a8, b8, b64, f)
        elif op == 2:
            SVDF_STEP(arena, blob, f)
        elif op == 3:
            n, kind_in, kind_out = f[6], f[2], f[5]
            x = SPACE(arena, blob, f[0], f[1], 4 * n)
            y = SPACE(arena, blob, f[3], f[4], 4 * n)
            QUANTIZE_ALL(x, kind_in, y, kind_out, n, f[7], f[8], f[9], f[10], f[11], f[12])
        elif op == 4:
            rows, depth = f[6], f[7]
            x = SPACE(arena, blob, f[0], f[1], 4 * rows * depth)
            y = SPACE(arena, blob, f[3], f[4], 4 * rows * depth)
            tables = SPACE(arena, blob, 1, f[8], 3 * 256 * 8).view(np.int64)
            valid, exps, terms = tables[0:256], tables[256:512], tables[512:768]
            SOFTMAX_ROWS(x, f[2], y, f[5], rows, depth, valid, exps, terms, f[9], f[10], f[11])
        else:
            return index + 1
        position += length
        index += 1
    return 0


SPACE = compiled(_space)
LOAD = compiled(_load)
STORE = compiled(_store)
WRAP32 = compiled(_wrap32)
SRDHM = compiled(_srdhm)
RDBP = compiled(_rdbp)
SHIFT_LEFT = compiled(_shift_left)
RECIPROCAL = compiled(_one_over_one_plus_x)
SOFTMAX_ROWS = compiled(_softmax)
QUANTIZE_ALL = compiled(_quantize)
DENSE_FLAT = compiled(_dense_flat, inline=True)
DENSE_STEP = compiled(_dense, inline=True)
SVDF_STEP = compiled(_svdf)
RUN = compiled(_run) if SVDF is not None else None


def entry(arena: np.ndarray, blob: np.ndarray, code: np.ndarray) -> Any:
    """`RUN` for these arrays' types, compiled (or loaded from numba's cache) now: its compiled entry
    itself, past numba's dispatch on the arguments' types (a tenth of a microsecond of each call,
    as much as a small layer's sums), which is safe because a program's arrays keep their types."""
    assert RUN is not None, "the compiled loops are off"
    RUN(arena, blob, code[:0])
    found = RUN.overloads.get(tuple(numba.typeof(a) for a in (arena, blob, code)))  # type: ignore[attr-defined]
    return RUN if found is None else found.entry_point
