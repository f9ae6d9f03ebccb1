"""runtime.quant_arith against exact rational arithmetic (Python integers and fractions).

The oracle for each function is its definition, computed exactly: a fixed-point multiplier is
the real number to within half a unit of its last place; the doubling high multiply and the
power-of-two division are the exact quotients rounded to nearest with ties away from zero. The
whole chain is checked bit for bit against TensorFlow Lite Micro in test_tflite_ops.py.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from runtime import quant_arith as qa
from runtime.quantization import QuantParams


def _round_away(f: Fraction) -> int:
    whole = math.floor(abs(f))
    if abs(f) - whole >= Fraction(1, 2):
        whole += 1
    return whole if f >= 0 else -whole


def test_round_half_away_rounds_ties_away_from_zero():
    values = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 2.4, -2.6], dtype=np.float32)
    expected = [_round_away(Fraction(float(v))) for v in values]
    assert qa.round_half_away(values).astype(int).tolist() == expected


def test_quantize_multiplier_is_the_real_to_half_an_ulp():
    rng = np.random.default_rng(0)
    reals = np.concatenate([rng.uniform(1e-6, 10, 500), 2.0 ** rng.integers(-30, 10, 50), [1 - 2**-40, 0.5]])
    multiplier, shift = qa.quantize_multiplier(reals)
    for r, m, s in zip(reals, multiplier, shift, strict=True):
        assert (1 << 30) <= m < (1 << 31)
        exact = Fraction(float(r)) * Fraction(2) ** (31 - int(s))
        assert abs(exact - int(m)) <= Fraction(1, 2) or int(m) == (1 << 30)  # a carry halves the significand
        assert abs(Fraction(int(m)) * Fraction(2) ** (int(s) - 31) - Fraction(float(r))) <= Fraction(2) ** (int(s) - 32)


def test_quantize_multiplier_flushes_zero_and_tiny_values():
    multiplier, shift = qa.quantize_multiplier([0.0, 2.0**-40])
    assert multiplier.tolist() == [0, 0] and shift.tolist() == [0, 0]


def test_srdhm_and_rounding_divide_are_exact_roundings():
    rng = np.random.default_rng(1)
    a = rng.integers(qa.INT32_MIN, qa.INT32_MAX, 3000, dtype=np.int64)
    b = rng.integers(0, qa.INT32_MAX, 3000, dtype=np.int64)
    e = rng.integers(0, 31, 3000)
    high = qa.srdhm(a, b)
    divided = qa.rounding_divide_by_pot(a, e)
    for x, y, h, k, d in zip(a.tolist(), b.tolist(), high.tolist(), e.tolist(), divided.tolist(), strict=True):
        assert h == _round_away(Fraction(x * y, 1 << 31))
        assert d == _round_away(Fraction(x, 1 << k))
    assert qa.srdhm(np.array([qa.INT32_MIN]), qa.INT32_MIN).tolist() == [qa.INT32_MAX]  # the one saturating case


@pytest.mark.parametrize("shifts", [(-12, 4), (-31, 1)], ids=["any shift", "right shifts only"])
def test_multiply_by_quantized_multiplier_rounds_twice_as_tflite_does(shifts):
    rng = np.random.default_rng(2)
    x = rng.integers(-(1 << 20), 1 << 20, 2000, dtype=np.int64)
    m = rng.integers(1 << 30, qa.INT32_MAX, 2000, dtype=np.int64)
    s = rng.integers(*shifts, 2000)
    got = qa.multiply_by_quantized_multiplier(x, m, s)
    for xi, mi, si, g in zip(x.tolist(), m.tolist(), s.tolist(), got.tolist(), strict=True):
        high = _round_away(Fraction((xi << max(si, 0)) * mi, 1 << 31))
        assert g == _round_away(Fraction(high, 1 << max(-si, 0)))
        assert abs(g - Fraction(xi * mi, 1 << 31) * Fraction(2) ** si) <= 1  # and near the real product


def test_activation_range_quantizes_the_bounds():
    q = QuantParams(np.float32(0.05), np.int64(-10))
    assert qa.activation_range("NONE", q, np.int8) == (-128, 127)
    assert qa.activation_range("RELU", q, np.int8) == (-10, 127)
    assert qa.activation_range("RELU6", q, np.int8) == (-10, 110)
    assert qa.activation_range("RELU_N1_TO_1", q, np.int8) == (-30, 10)
    with pytest.raises(ValueError, match="accepted"):
        qa.activation_range("GELU", q, np.int8)


def test_fixed_point_exp_and_reciprocal_are_close_to_the_reals():
    a = -np.arange(0, 31 << 26, 1 << 20, dtype=np.int64)  # [-31, 0] with 5 integer bits
    exp = qa.exp_on_negative_values(a, 5) / float(1 << 31)
    np.testing.assert_allclose(exp, np.exp(a / float(1 << 26)), atol=2e-8 * 64)
    x = np.arange(1 << 19, 1 << 30, 1 << 22, dtype=np.int64)  # positive sums with 12 integer bits
    scale, bits = qa.reciprocal(x, 12)
    real = scale / float(1 << 31) * 2.0 ** -bits.astype(float)
    np.testing.assert_allclose(real, 1 / (x / float(1 << 19)), rtol=1e-7)
