"""ONNX's QuantizeLinear and DequantizeLinear, as ONNX defines them (float32, ties to even).

QuantizeLinear with one scale into an 8- or 16-bit integer runs one compiled pass, or (compiled
loops off) a chunk at a time through its workspace; per-axis and blocked scales, float8/float4
outputs and the rest take numpy over the whole map. Its output may lie over its own dying input
(`Kernel.narrowing`): a float32 map quantized to int8 then needs the input's bytes alone, where
the input and a copy a quarter its size were live together (a quantized model's first step).
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.quantized.jit_qlinear import QUANTIZE


def one_value(v, default=0.0) -> float:
    """A scale or zero point given as one value (any shape), as a float; `default` for None."""
    return default if v is None else float(np.asarray(v).reshape(-1)[0])


def _per_axis(v, x_shape: tuple[int, ...], axis: int, block_size: int = 0) -> np.ndarray:
    """A scale or zero point shaped to broadcast against x: one value, one per index of `axis`, or
    (ONNX's blocked quantization, `block_size` > 0) one per block of that many indices along `axis`,
    given with x's rank."""
    a = np.asarray(v)
    axis %= len(x_shape)
    if block_size > 0 and a.ndim == len(x_shape):
        return np.repeat(a, block_size, axis=axis).take(range(x_shape[axis]), axis=axis)
    if a.size <= 1:
        return a.reshape(())
    shape = [1] * len(x_shape)
    shape[axis] = -1
    return a.reshape(shape)


def _float_kind(dtype: np.dtype) -> bool:
    """float8 and float4 quantized types (ONNX's FLOAT8E4M3FN, FLOAT8E5M2, FLOAT4E2M1...)."""
    return np.dtype(dtype).kind == "f" or np.dtype(dtype).name.startswith("float")


QUANTIZE_CHUNK = 1 << 12  # elements QuantizeLinear divides and rounds at a time, in its workspace


def _quantize_in_chunks(x, y_scale, out) -> bool:
    return x.dtype == np.float32 and np.size(y_scale) == 1 and out.dtype.itemsize <= 2 and out.dtype.kind in "iu"


def _quantize_workspace(inputs, outputs, **_) -> int:
    """The numpy route's chunk (the compiled pass needs none)."""
    x, scale = inputs[0], inputs[1]
    fits = QUANTIZE is None and scale is not None and _quantize_in_chunks(x, np.empty(scale.shape), outputs[0])
    return scratch_bytes(((min(QUANTIZE_CHUNK, int(np.prod(x.shape))),), np.float32)) if fits else 0


# Element i of the output is written only once input elements 0..i are read (one forward pass, or
# forward chunks each read whole before written; the other routes build the whole result first), and
# its bytes are never wider than the input's: the planner may put the output over a dying input.
@kernel("QuantizeLinear", workspace=_quantize_workspace, inplace=(0,), narrowing=True)
def quantize_linear(x, y_scale, y_zero_point=None, *, out, ws=None, axis=1, saturate=1, block_size=0,
                    output_dtype=0):  # fmt: skip
    flat = _quantize_in_chunks(x, y_scale, out) and x.flags.c_contiguous and out.flags.c_contiguous
    if flat and QUANTIZE is not None:  # one compiled pass, no scratch
        lo, hi = (np.float32(v) for v in qa.dtype_range(out.dtype))
        scale, zero = np.float32(one_value(y_scale)), np.float32(one_value(y_zero_point))
        QUANTIZE(x.reshape(-1), scale, zero, lo, hi, out.reshape(-1))
        return
    if flat and ws is not None:
        # float32 x / scale rounded half to even, as ONNX defines it, a chunk at a time in the workspace
        # (whole-map int64 temporaries took twice the input's bytes beside the arena)
        flat_x, flat_out = x.reshape(-1), out.reshape(-1)
        lo, hi = qa.dtype_range(out.dtype)
        buf = Scratch(ws, "QuantizeLinear").take((min(QUANTIZE_CHUNK, flat_x.size),), np.float32)
        scale, zero = np.float32(one_value(y_scale)), np.float32(one_value(y_zero_point))
        for s0 in range(0, flat_x.size, buf.size):
            part = buf[: min(buf.size, flat_x.size - s0)]
            np.divide(flat_x[s0 : s0 + part.size], scale, out=part)
            np.rint(part, out=part)
            np.add(part, zero, out=part)  # exact within the output's range; beyond it clamped below
            np.fmax(part, lo, out=part)  # fmax/fmin: a NaN becomes the least value, as a cast to int64 did
            np.fmin(part, hi, out=part)
            np.copyto(flat_out[s0 : s0 + part.size], part, casting="unsafe")
        return
    scale = _per_axis(np.asarray(y_scale, dtype=np.float32), x.shape, axis, block_size)
    zeros = np.asarray(0 if y_zero_point is None else y_zero_point)
    if _float_kind(out.dtype):  # x / scale + zero cast to the float type, rounding to nearest even
        ratio = x.astype(np.float32) / scale + _per_axis(zeros.astype(np.float32), x.shape, axis, block_size)
        if saturate:  # beyond the type's largest finite value: that value, not infinity (a NaN stays NaN)
            top = np.float32(qa.float_max(out.dtype))
            np.clip(ratio, -top, top, out=ratio)
        out[...] = ratio.astype(out.dtype)
        return
    zero = _per_axis(zeros.astype(np.float64), x.shape, axis, block_size)
    lo, hi = qa.dtype_range(out.dtype)
    # Clamped as floats: an infinity or a value past int64 saturates (a cast first made it int64's least
    # value), and fmax makes a NaN the least value, as the one-scale routes do.
    ratio = np.rint(x.astype(np.float32) / scale) + zero
    out[...] = np.fmin(np.fmax(ratio, lo), hi).astype(np.int64)


@kernel("DequantizeLinear")
def dequantize_linear(x, x_scale, x_zero_point=None, *, out, axis=1, block_size=0, output_dtype=0):
    scale = _per_axis(np.asarray(x_scale, dtype=np.float32), x.shape, axis, block_size)
    zeros = np.asarray(0 if x_zero_point is None else x_zero_point)
    wide = np.float32 if _float_kind(x.dtype) else np.int64  # a float8 is its value, never truncated
    zero = _per_axis(zeros.astype(wide), x.shape, axis, block_size)
    np.multiply((x.astype(wide) - zero).astype(np.float32), scale, out=out, casting="unsafe")
