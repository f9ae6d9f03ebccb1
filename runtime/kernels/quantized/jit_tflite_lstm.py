"""TFLite's LSTM compiled (numba, when the compiled loops are on): one call runs every time step of
every batch row, the two fully-connected sums of the four gates, their activations and the cell and
hidden state updates. `LSTM` is the 8x8->16 and 16x8->16 integer LSTM, with the same integer
arithmetic (requantizations, TFLite's int16 sigmoid and tanh lookups) as the numpy route
(`runtime.kernels.quantized.tflite_lstm`), which the tests compare with TensorFlow Lite Micro bit
for bit; `LSTM_FLOAT` the float32 one, with TFLite's float sigmoid cutoffs. At the small sizes of a
microcontroller's LSTM the numpy route is all Python overhead: a dozen ufunc calls per gate and step.

Each writes only the states, the output and the gates' row (its workspace) it is given.
"""

from __future__ import annotations

import numpy as np

from runtime.kernels._jit import compiled
from runtime.kernels.quantized.jit_conv_int import MBQM


def _lookup(v, table, fraction_bits):  # pragma: no cover - compiled
    """The interpolated sigmoid table at |v| (``fraction_bits`` below the index), as TFLite's
    int16 LOGISTIC (9 bits) and TANH (8 bits) read it; the saturated value past the table."""
    a = v if v >= 0 else -v
    high = a >> fraction_bits
    if high >= 255:
        return np.int64(-1)
    ua = table[high]
    return (ua << fraction_bits) + (a & ((np.int64(1) << fraction_bits) - 1)) * (table[high + 1] - ua)


def _logistic(x, table):  # pragma: no cover - compiled
    v = np.int64(x) * 3  # Q3.12 in: the power-of-two case, multiplier 3 and no shift
    r = _LOOKUP(v, table, 9)
    if r < 0:
        r = np.int64(0x7FFF) << 10
    r = r + 512 if v >= 0 else (np.int64(1) << 25) - r + 511
    return r >> 10


def _tanh(x, multiplier, shift, table):  # pragma: no cover - compiled
    rounding = (np.int64(1) << (shift - 1)) if shift > 0 else np.int64(0)
    v = (np.int64(x) * multiplier + rounding) >> shift
    r = _LOOKUP(v, table, 8)
    if r < 0:
        r = np.int64(0xFFFF) << 8
    r = r - (np.int64(1) << 23) + 128 if v >= 0 else -r + (np.int64(1) << 23) + 127
    return r >> 8


def _clamp16(v):  # pragma: no cover - compiled
    return min(max(v, np.int64(-32768)), np.int64(32767))


def _mbqm64(x, multiplier, shift):  # pragma: no cover - compiled
    """TFLite's MultiplyByQuantizedMultiplier of an int64 accumulator (as
    `runtime.quant_arith.multiply_by_quantized_multiplier_64`)."""
    reduced = (multiplier + (np.int64(1) << 15)) >> 16 if multiplier < 0x7FFF0000 else np.int64(0x7FFF)
    total = np.int64(15) - shift
    r = (x * reduced + (np.int64(1) << (total - 1))) >> total
    return ((r + (np.int64(1) << 31)) & np.int64(0xFFFFFFFF)) - (np.int64(1) << 31)


_LOOKUP = compiled(_lookup, inline=True)
LOGISTIC = compiled(_logistic, inline=True)
TANH = compiled(_tanh, inline=True)
CLAMP16 = compiled(_clamp16, inline=True)
MBQM64 = compiled(_mbqm64, inline=True)


def _lstm(x, time_major, wx, wh, x_add, h_add, x_mult, x_shift, h_mult, h_shift, wide, table, muls, cell_tanh,
          clip, h_zero, h_lo, h_hi, h_state, c_state, out, gates):  # pragma: no cover - compiled  # fmt: skip
    """`wide` for the 16x8 LSTM (int16 x and states): the gates' sums scaled as int64 accumulators;
    `muls` holds (multiplier, shift) of forget x cell, input x cell gate, tanh(cell) x output;
    `cell_tanh` the tanh's (multiplier, shift) over the cell state; `clip` < 0 for no clip."""
    steps = x.shape[0] if time_major else x.shape[1]
    batches, units, depth = h_state.shape[0], h_state.shape[1], wx.shape[1]
    for t in range(steps):
        for b in range(batches):
            for j in range(4 * units):
                acc_x = x_add[j]
                for d in range(depth):
                    v = x[t, b, d] if time_major else x[b, t, d]
                    acc_x += np.int64(wx[j, d]) * np.int64(v)
                acc_h = h_add[j]
                for k in range(units):
                    acc_h += np.int64(wh[j, k]) * np.int64(h_state[b, k])
                if wide:
                    scaled_x, scaled_h = MBQM64(acc_x, x_mult[j], x_shift[j]), MBQM64(acc_h, h_mult[j], h_shift[j])
                else:
                    scaled_x, scaled_h = MBQM(acc_x, x_mult[j], x_shift[j]), MBQM(acc_h, h_mult[j], h_shift[j])
                total = CLAMP16(CLAMP16(scaled_x) + CLAMP16(scaled_h))
                if units * 2 <= j < units * 3:
                    gates[j] = TANH(total, 3, 0, table)
                else:
                    gates[j] = LOGISTIC(total, table)
            for u in range(units):
                i, f, g, o = gates[u], gates[units + u], gates[2 * units + u], gates[3 * units + u]
                kept = CLAMP16(MBQM(np.int64(f) * np.int64(c_state[b, u]), muls[0, 0], muls[0, 1]))
                added = CLAMP16(MBQM(np.int64(i) * np.int64(g), muls[1, 0], muls[1, 1]))
                cell = CLAMP16(kept + added)
                if clip >= 0:
                    cell = min(max(cell, -clip), clip)
                c_state[b, u] = cell
                squashed = TANH(cell, cell_tanh[0], cell_tanh[1], table)
                h = MBQM(squashed * np.int64(o), muls[2, 0], muls[2, 1]) + h_zero
                h_state[b, u] = min(max(h, h_lo), h_hi)
            for u in range(units):
                if time_major:
                    out[t, b, u] = h_state[b, u]
                else:
                    out[b, t, u] = h_state[b, u]


LSTM = compiled(_lstm)


def _sigmoid(v):  # pragma: no cover - compiled
    """TFLite's float LOGISTIC: 1 past its upper cutoff, exp(v) below its lower one."""
    if v > np.float32(16.619047164916992):
        return np.float32(1)
    if v < np.float32(-9):
        return np.exp(v)
    return np.float32(1) / (np.float32(1) + np.exp(-v))


SIGMOID = compiled(_sigmoid, inline=True)


def _lstm_float(x, time_major, wx, wh, bias, clip, h_state, c_state, out, gates):  # pragma: no cover - compiled
    """The float32 LSTM: each gate's input sum with its bias, plus its recurrent sum, then sigmoid
    (tanh for the cell gate); `clip` <= 0 for no clip."""
    steps = x.shape[0] if time_major else x.shape[1]
    batches, units, depth = h_state.shape[0], h_state.shape[1], wx.shape[1]
    for t in range(steps):
        for b in range(batches):
            for j in range(4 * units):
                acc_x = np.float32(0)
                for d in range(depth):
                    acc_x += wx[j, d] * (x[t, b, d] if time_major else x[b, t, d])
                acc_h = np.float32(0)
                for k in range(units):
                    acc_h += wh[j, k] * h_state[b, k]
                total = (acc_x + bias[j]) + acc_h
                gates[j] = np.tanh(total) if units * 2 <= j < units * 3 else SIGMOID(total)
            for u in range(units):
                i, f, g, o = gates[u], gates[units + u], gates[2 * units + u], gates[3 * units + u]
                cell = f * c_state[b, u] + i * g
                if clip > 0:
                    cell = min(max(cell, -clip), clip)
                c_state[b, u] = cell
                h_state[b, u] = o * np.tanh(cell)
            for u in range(units):
                if time_major:
                    out[t, b, u] = h_state[b, u]
                else:
                    out[b, t, u] = h_state[b, u]


LSTM_FLOAT = compiled(_lstm_float)
