"""TFLite's 16-bit sigmoid and tanh and the fixed scales of its integer LSTM.

TFLite's int16 LOGISTIC and TANH read one table of sigmoid(i/24) in 0.16 fixed point (256 entries;
tanh(x) = 2 sigmoid(2x) - 1) and interpolate linearly between entries. The table is
round(65536 sigmoid(i/24)) capped at 65535, except at the indices of `_ROUNDED_UP`, where TFLite's
table holds one more (the values its reference kernels use; checked bit for bit against TensorFlow
Lite Micro by the LSTM's tests). In TFLite's integer LSTM the gates' sums are int16 at the fixed
scale 2**-12 (Q3.12), their sigmoid and tanh outputs int16 at 2**-15 (Q0.15), and the cell state
int16 at a power-of-two scale.
"""

from __future__ import annotations

import math

import numpy as np

GATE_SCALE = 2.0**-12  # a gate's sum, the input of its sigmoid or tanh
ACTIVATED_SCALE = 2.0**-15  # a gate's output
GATE_POWER = -12

_ROUNDED_UP = (
    4, 8, 12, 14, 15, 16, 17, 19, 20, 21, 22, 25, 27, 28, 29, 30, 31, 33, 34, 35, 37, 39, 40, 41, 43, 44, 45,
    46, 49, 50, 54, 62, 63, 64, 66, 82, 86, 93, 100, 103, 112, 116, 135, 255,
)  # fmt: skip


def _sigmoid_table() -> np.ndarray:
    x = np.arange(256, dtype=np.float64) / 24.0
    table = np.minimum(np.round(65536.0 / (1.0 + np.exp(-x))), 65535).astype(np.int64)
    table[list(_ROUNDED_UP)] += 1
    return table


SIGMOID_TABLE = _sigmoid_table()


def _scaled(x: np.ndarray, multiplier: int, left_shift: int) -> np.ndarray:
    """The input as the lookups read it: ``(x * multiplier + round) >> left_shift``, where a zero
    multiplier means the power-of-two case, ``3 << left_shift`` and no shift."""
    if multiplier == 0:
        multiplier, left_shift = 3 << left_shift, 0
    rounding = (1 << (left_shift - 1)) if left_shift > 0 else 0
    return (x.astype(np.int64) * multiplier + rounding) >> left_shift


def logistic16(x: np.ndarray, multiplier: int = 0, left_shift: int = 0) -> np.ndarray:
    """TFLite's int16 LOGISTIC (Q3.12 in for the LSTM's zero multiplier and shift, Q0.15 out)."""
    v = _scaled(x, multiplier, left_shift)
    a = np.abs(v)
    high = a >> 9
    low = np.minimum(high, 254)
    ua, ub = SIGMOID_TABLE[low], SIGMOID_TABLE[low + 1]
    result = np.where(high >= 255, 0x7FFF << 10, (ua << 9) + (a & 0x1FF) * (ub - ua))
    result = np.where(v >= 0, result + (1 << 9), (1 << 25) - result + (1 << 9) - 1)
    return (result >> 10).astype(np.int16)


def tanh16(x: np.ndarray, multiplier: int = 0, left_shift: int = 0) -> np.ndarray:
    """TFLite's int16 TANH (through the sigmoid table, Q0.15 out)."""
    v = _scaled(x, multiplier, left_shift)
    a = np.abs(v)
    high = a >> 8
    low = np.minimum(high, 254)
    ua, ub = SIGMOID_TABLE[low], SIGMOID_TABLE[low + 1]
    result = np.where(high >= 255, 0xFFFF << 8, (ua << 8) + (a & 0xFF) * (ub - ua))
    result = np.where(v >= 0, result - (1 << 23) + (1 << 7), -result + (1 << 23) + (1 << 7) - 1)
    return (result >> 8).astype(np.int16)


def tanh_of_power(power: int) -> tuple[int, int]:
    """(multiplier, left shift) of the int16 tanh over a tensor of scale 2**power, as TFLite's LSTM
    derives them (Q3.12 needs neither)."""
    shift = 15 + power - 3
    return (3, -shift) if shift < 0 else (0, shift)


def scale_power(scale: float) -> int:
    """log2 of a power-of-two scale, rounded as TFLite's CheckedLog2 does (in float32)."""
    return int(np.round(np.float32(math.log(np.float32(scale))) * np.float32(1.0 / math.log(2.0))))


def quantized_clip(clip: float, scale: float) -> int:
    """A cell clip in the cell state's integers: truncated toward zero, within int16."""
    return int(min(max(float(np.float32(clip)) / float(np.float32(scale)), -32768.0), 32767.0))
