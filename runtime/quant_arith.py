"""TensorFlow Lite's integer arithmetic, vectorised over numpy int64 arrays holding int32 values.

Every integer kernel (the TFLite builtins, the QLinear ops) goes through these functions, so that
memplan rounds exactly as TFLite's reference kernels (and TensorFlow Lite Micro's) do:

* a real multiplier becomes an int32 fixed-point significand with the binary point at bit 31
  and a power-of-two exponent (`quantize_multiplier`: frexp, round half away from zero);
* ``x * multiplier`` is the doubling high half of the 64-bit product rounded to nearest (ties
  away from zero, gemmlowp's SaturatingRoundingDoublingHighMul), then a right shift rounded to
  nearest with ties away from zero (RoundingDivideByPOT); a positive exponent shifts left first,
  wrapping as int32 arithmetic does;
* activation clamps quantize their float bounds with float32 division and round half away.

The fixed-point exp and reciprocal that the int8 SOFTMAX uses (gemmlowp's formats: a raw int32
with a given number of integer bits) are here too. Inputs may be any integer arrays; results
are int64 arrays whose values fit int32.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from runtime.quantization import QuantParams

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")  # the fused activations with an integer clamp


def wrap32(x: np.ndarray) -> np.ndarray:
    """int32 wrap-around of int64 values (C++'s int32 arithmetic on the targets TFLite runs on)."""
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def round_half_away(x: Any) -> np.ndarray:
    """std::round: to nearest, ties away from zero (numpy's rint rounds ties to even)."""
    a = np.asarray(x, dtype=np.float64)
    whole = np.floor(np.abs(a))
    return np.copysign(whole + (np.abs(a) - whole >= 0.5), a)  # exact: no x + 0.5 rounded first


def quantize_multiplier(real: Any) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's QuantizeMultiplier, per element: (int32 significand, exponent) with
    ``real ~= significand * 2**(exponent - 31)``; zero and multipliers under 2**-31 give (0, 0)."""
    r = np.atleast_1d(np.asarray(real, dtype=np.float64))
    q, shift = np.frexp(r)
    fixed = round_half_away(q * float(1 << 31)).astype(np.int64)
    shift = shift.astype(np.int64)
    carry = fixed == (1 << 31)
    fixed = np.where(carry, fixed // 2, fixed)
    shift = np.where(carry, shift + 1, shift)
    tiny = (shift < -31) | (r == 0)
    return np.where(tiny, 0, fixed), np.where(tiny, 0, shift)


def srdhm(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul: the high 32 bits of ``2*a*b``, rounded to nearest."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    t = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(t >= 0, t >> 31, -((-t) >> 31))  # C++ division truncates toward zero
    overflow = (a == b) & (a == INT32_MIN)
    return np.where(overflow, INT32_MAX, wrap32(high))


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """RoundingDivideByPOT: ``x / 2**exponent`` rounded to nearest, ties away from zero."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + ((x & mask) > threshold)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: Any, shift: Any) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier (the double-rounding form its reference kernels use)."""
    shift = np.asarray(shift, dtype=np.int64)
    multiplier = np.asarray(multiplier, dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    if np.all(shift <= 0) and np.all(multiplier >= 0):
        return _scale_down(x, multiplier, -shift)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rounding_divide_by_pot(srdhm(wrap32(x << left), multiplier), right)


def multiply_by_quantized_multiplier_64(x: np.ndarray, multiplier: Any, shift: Any) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier of an int64 accumulator (the 16x8 kernels' with int64
    biases): the significand rounded to 16 bits (saturating at 0x7FFF), one product, one rounding
    shift (half up), truncated to int32."""
    multiplier = np.asarray(multiplier, dtype=np.int64)
    reduced = np.where(multiplier < 0x7FFF0000, (multiplier + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - np.asarray(shift, dtype=np.int64)
    result = (np.asarray(x, dtype=np.int64) * reduced + (np.int64(1) << (total - 1))) >> total
    return wrap32(result)


def _scale_down(x: np.ndarray, multiplier: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The same for a non-negative multiplier and no left shift, in fewer passes: the doubling high
    multiply cannot saturate, and truncation toward zero is a floor after biasing negatives."""
    t = x * multiplier
    t += np.where(t >= 0, 1 << 30, 1 - (1 << 30))
    t += (t >> 63) & 0x7FFFFFFF  # C++'s division by 2**31 truncates toward zero
    t >>= 31
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (t < 0)
    remainder = t & mask
    t >>= right
    t += remainder > threshold
    return t


def multiply_smaller_than_one(x: np.ndarray, multiplier: Any, left_shift: Any) -> np.ndarray:
    """MultiplyByQuantizedMultiplierSmallerThanOneExp (`left_shift` <= 0)."""
    return rounding_divide_by_pot(srdhm(x, multiplier), -np.asarray(left_shift, dtype=np.int64))


def multiply_greater_than_one(x: np.ndarray, multiplier: Any, left_shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplierGreaterThanOne (`left_shift` >= 0)."""
    return srdhm(wrap32(np.asarray(x, dtype=np.int64) << int(left_shift)), multiplier)


# ---- clamps and requantization ---------------------------------------------------------------------


def dtype_range(dtype: np.dtype | type) -> tuple[int, int]:
    """The least and greatest value of an integer type, 2- and 4-bit ones included (ONNX's INT4, UINT2...)."""
    try:
        info: np.iinfo | ml_dtypes.iinfo = np.iinfo(np.dtype(dtype))
    except ValueError:  # numpy knows 8 bits and more; ml_dtypes (ONNX's own) the narrower ones
        info = ml_dtypes.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def float_max(dtype: np.dtype | type) -> float:
    """The largest finite value of a float type, float8 and float4 included (ONNX's FLOAT8E4M3FN...)."""
    return float(ml_dtypes.finfo(np.dtype(dtype)).max)


def quantize_value(value: float, q: QuantParams) -> int:
    """One float quantized as TFLite's activation clamps do: float32 ``value / scale`` rounded
    half away from zero, plus the zero point (no clamp)."""
    ratio = np.float32(value) / np.float32(q.scale[0])
    return int(q.zero_point[0]) + int(round_half_away(ratio))


def activation_range(activation: str, q: QuantParams, dtype: np.dtype | type) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the integer bounds of a fused activation on an output
    of quantization `q` and integer `dtype`."""
    lo, hi = dtype_range(dtype)
    if activation == "NONE":
        return lo, hi
    if activation == "RELU":
        return max(lo, quantize_value(0.0, q)), hi
    if activation == "RELU6":
        return max(lo, quantize_value(0.0, q)), min(hi, quantize_value(6.0, q))
    if activation == "RELU_N1_TO_1":
        return max(lo, quantize_value(-1.0, q)), min(hi, quantize_value(1.0, q))
    raise ValueError(f"fused_activation_function {activation!r} has no integer clamp; accepted: {list(ACTIVATIONS)}")


def requantize(acc: np.ndarray, multiplier: Any, shift: Any, zero_point: int, lo: int, hi: int) -> np.ndarray:
    """An int32 accumulator to the output's integers: scaled, offset by the zero point, clamped."""
    return np.clip(multiply_by_quantized_multiplier(acc, multiplier, shift) + int(zero_point), lo, hi)


def conv_multipliers(
    q_in: QuantParams, q_w: QuantParams, q_out: QuantParams, channels: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel (multiplier, shift) of a convolution, as TFLite computes them in double:
    ``input_scale * filter_scale / output_scale`` (a per-tensor filter repeats its one scale)."""
    scales = np.broadcast_to(q_w.scale.astype(np.float64), (channels,)) if q_w.scale.size == 1 else q_w.scale
    real = float(q_in.scale[0]) * scales.astype(np.float64) / float(q_out.scale[0])
    return quantize_multiplier(real)


def dense_multiplier(q_in: QuantParams, q_w: QuantParams, q_out: QuantParams) -> tuple[np.ndarray, np.ndarray]:
    """A per-tensor FULLY_CONNECTED's multiplier: TFLite multiplies the two scales in float32 first."""
    product = np.float32(q_in.scale[0]) * np.float32(q_w.scale[0])
    return quantize_multiplier(float(product) / float(q_out.scale[0]))


# ---- gemmlowp's fixed point, for the int8 softmax ------------------------------------------------------


def saturating_shift_left(x: np.ndarray, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT with a positive exponent."""
    threshold = (1 << (31 - exponent)) - 1
    shifted = wrap32(x << exponent)
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, shifted))


def _mul(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    return srdhm(a, b)


def exp_on_negative_values(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """exp(a) for a <= 0 in gemmlowp's format with `integer_bits` integer bits, as a raw value with
    none (one = INT32_MAX)."""
    fractional = 31 - integer_bits
    quarter = 1 << (fractional - 2)
    a_mod = wrap32((a & (quarter - 1)) - quarter)
    rescaled = saturating_shift_left(a_mod, integer_bits) if integer_bits else a_mod
    result = _exp_quarter(rescaled)
    remainder = wrap32(a_mod - a)
    barrel = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242))
    for exponent, multiplier in barrel:
        if integer_bits > exponent:
            bit = 1 << (fractional + exponent)
            result = np.where((remainder & bit) != 0, _mul(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


def _exp_quarter(a: np.ndarray) -> np.ndarray:
    """exp on [-1/4, 0) with no integer bits: a Taylor series around -1/8."""
    constant_term, one_third = 1895147668, 715827883
    x = wrap32(a + (1 << 28))
    x2 = _mul(x, x)
    x3 = _mul(x2, x)
    x4 = _mul(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(wrap32(_mul(wrap32(x4_over_4 + x3), one_third) + x2), 1)
    return wrap32(constant_term + _mul(np.asarray(constant_term, dtype=np.int64), wrap32(x + poly)))


def _half_reciprocal(a: np.ndarray) -> np.ndarray:
    """2 / (1 + a) with 2 integer bits, for a in [0, 1) with none: Newton-Raphson, 3 steps."""
    a = np.asarray(a, dtype=np.int64)
    half_denominator = (a + INT32_MAX + 1) // 2  # RoundingHalfSum with one; a >= 0, so the sum is too
    x = wrap32(1515870810 + _mul(half_denominator, -1010580540))
    one_f2 = 1 << 29
    for _ in range(3):
        product = _mul(half_denominator, x)
        correction = _mul(x, wrap32(one_f2 - product))
        x = wrap32(x + saturating_shift_left(correction, 2))
    return x


def one_over_one_plus_x(a: np.ndarray) -> np.ndarray:
    """1 / (1 + a) for a in [0, 1), raw values with no integer bits."""
    return saturating_shift_left(_half_reciprocal(a), 1)


def one_minus_x_over_one_plus_x(a: np.ndarray) -> np.ndarray:
    """(1 - a) / (1 + a) for a in [0, 1), raw values with no integer bits."""
    return saturating_shift_left(wrap32(_half_reciprocal(a) - (1 << 29)), 2)


def reciprocal(x: np.ndarray, integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """GetReciprocal: (raw 1/x scaled into [0.5, 1) with no integer bits, bits over unit), per element
    of positive `x` with `integer_digits` integer bits."""
    x = np.asarray(x, dtype=np.int64)
    bits = np.frexp(np.maximum(x, 0).astype(np.float64))[1].astype(np.int64)  # bit length, exact below 2**53
    leading = 32 - bits  # CountLeadingZeros of the uint32; 32 for zero
    shifted = wrap32(((x << leading) & 0xFFFFFFFF) - (1 << 31))
    return one_over_one_plus_x(shifted), integer_digits - leading


def softmax_parameters(beta: float, input_scale: float, integer_bits: int = 5) -> tuple[int, int, int]:
    """PreprocessSoftmaxScaling and CalculateInputRadius: (input multiplier, left shift, diff_min)."""
    real = min(beta * input_scale * float(1 << (31 - integer_bits)), float((1 << 31) - 1))
    multiplier, shift = quantize_multiplier(real)
    left = int(shift[0])
    radius = math.floor(1.0 * ((1 << integer_bits) - 1) * float(1 << (31 - integer_bits)) / float(1 << left))
    return int(multiplier[0]), left, -radius


# ---- 16-bit fixed point, for the int8 HARD_SWISH ---------------------------------------------------------


def wrap16(x: np.ndarray) -> np.ndarray:
    return ((np.asarray(x, dtype=np.int64) + (1 << 15)) & 0xFFFF) - (1 << 15)


def _divide_toward_zero(x: np.ndarray, bits: int) -> np.ndarray:
    return np.where(x >= 0, x >> bits, -((-x) >> bits))


def srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp's int16 SaturatingRoundingDoublingHighMul."""
    ab = np.asarray(a, dtype=np.int64) * int(b)
    high = wrap16(_divide_toward_zero(ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14)), 15))
    return np.where((np.asarray(a) == b) & (b == -(1 << 15)), (1 << 15) - 1, high)


def doubling_high_mul16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TFLite's int16 SaturatingDoublingHighMul: no rounding, truncation toward zero."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    high = wrap16(_divide_toward_zero(a * b, 15))
    return np.where((a == b) & (a == -(1 << 15)), (1 << 15) - 1, high)


def saturating_left_shift16(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(np.asarray(x, dtype=np.int64) * (1 << amount), -(1 << 15), (1 << 15) - 1)


def multiplier16(real: float) -> tuple[int, int]:
    """QuantizeMultiplier, then the significand rounded to 16 bits (DownScaleInt32ToInt16Multiplier)."""
    m, shift = quantize_multiplier(real)
    m32 = int(m[0])
    m16 = (1 << 15) - 1 if m32 >= INT32_MAX - (1 << 15) else (m32 + (1 << 15)) >> 16
    return m16, int(shift[0])
