"""QuantizeLinear and DequantizeLinear beyond 8 and 16 bits: float8 and float4 types (a value, never
truncated to an integer), 2- and 4-bit integers, saturation, and blocked scales (one per block of
`block_size` indices along the axis), each against onnx.reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.runtime.kernels.harness import assert_same, one_node, run_against_reference

FLOATS = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn]
INTS = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]


def _values(rng: np.random.Generator, shape: tuple[int, ...], spread: float) -> np.ndarray:
    x = (rng.standard_normal(shape) * spread).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, 1e9, -1e9]  # beyond every type's range, and a NaN
    return x


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=lambda d: np.dtype(d).name)
def test_dequantize_reads_each_type_as_its_value(dtype):
    rng = np.random.default_rng(0)
    x = _values(rng, (2, 3, 4), 40.0).astype(dtype)
    zero = np.array(1, dtype=dtype) if np.dtype(dtype) in map(np.dtype, INTS) else np.array(0, dtype=dtype)
    feeds = {"x": x, "scale": np.array(0.5, np.float32), "zero": zero}
    got, want = run_against_reference(one_node("DequantizeLinear", feeds, out_types=[np.float32]), feeds)
    assert_same(got, want)


# saturate=0 matters to float outputs only (out of range: infinity or NaN instead of the largest value)
CASES = [(d, 1) for d in FLOATS + INTS] + [(d, 0) for d in FLOATS]


@pytest.mark.parametrize(
    ("dtype", "saturate"), CASES, ids=lambda v: np.dtype(v).name if not isinstance(v, int) else str(v)
)
def test_quantize_writes_each_type_as_onnx_defines_it(dtype, saturate):
    rng = np.random.default_rng(1)
    x = _values(rng, (2, 3, 4), 300.0)
    feeds = {"x": x, "scale": np.array(2.0, np.float32), "zero": np.array(0, dtype=dtype)}
    model = one_node("QuantizeLinear", feeds, out_types=[dtype], opset=23, saturate=saturate)
    got, want = run_against_reference(model, feeds)
    assert got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(got[0].astype(np.float32), want[0].astype(np.float32))


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_blocked_scales_take_one_value_per_block_along_the_axis(op):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 7, 2)) * 50).astype(np.float32)  # 7 rows in blocks of 3: the last block short
    if op == "DequantizeLinear":
        x = np.clip(np.rint(x), -128, 127).astype(np.int8)
    scale = rng.uniform(0.2, 2.0, (3, 3, 2)).astype(np.float32)
    zero = rng.integers(-5, 5, (3, 3, 2)).astype(np.int8)
    feeds = {"x": x, "scale": scale, "zero": zero}
    out = np.int8 if op == "QuantizeLinear" else np.float32
    got, want = run_against_reference(one_node(op, feeds, out_types=[out], opset=21, axis=1, block_size=3), feeds)
    assert_same(got, want)
