"""Quantized ONNX's element-wise and pooling ops: QuantizeLinear, DequantizeLinear, and com.microsoft's
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool
and QLinearConcat (the ops onnxruntime's quantizer writes).

Add and Mul use TFLite's integer arithmetic; the unary ops are 256-entry tables made as onnxruntime
makes them (dequantize, the float function, quantize rounding half to even); the pools sum exactly
and scale once. Quantize and Dequantize follow ONNX's definition (float32, ties to even).
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels.window import pad_into, padded_extent, window_geometry, windows

MS = "com.microsoft"


def _one(v, default=0.0) -> float:
    return default if v is None else float(np.asarray(v).reshape(-1)[0])


def _per_axis(v, x_ndim: int, axis: int) -> np.ndarray:
    a = np.asarray(v)
    if a.size <= 1:
        return a.reshape(())
    shape = [1] * x_ndim
    shape[axis % x_ndim] = -1
    return a.reshape(shape)


@kernel("QuantizeLinear")
def quantize_linear(x, y_scale, y_zero_point=None, *, out, axis=1, saturate=1, block_size=0, output_dtype=0):
    scale = _per_axis(np.asarray(y_scale, dtype=np.float32), x.ndim, axis)
    zero = _per_axis(np.asarray(0 if y_zero_point is None else y_zero_point).astype(np.int64), x.ndim, axis)
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = np.clip(np.rint(x.astype(np.float32) / scale).astype(np.int64) + zero, lo, hi)


@kernel("DequantizeLinear")
def dequantize_linear(x, x_scale, x_zero_point=None, *, out, axis=1, block_size=0, output_dtype=0):
    scale = _per_axis(np.asarray(x_scale, dtype=np.float32), x.ndim, axis)
    zero = _per_axis(np.asarray(0 if x_zero_point is None else x_zero_point).astype(np.int64), x.ndim, axis)
    np.multiply((x.astype(np.int64) - zero).astype(np.float32), scale, out=out, casting="unsafe")


def _binary(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero, out, op: str) -> None:
    za, zb, zy = int(_one(a_zero)), int(_one(b_zero)), int(_one(y_zero))
    sa, sb, sy = _one(a_scale), _one(b_scale), _one(y_scale)
    lo, hi = qa.dtype_range(out.dtype)
    if op == "mul":
        multiplier, shift = qa.quantize_multiplier(sa * sb / sy)
        product = (a.astype(np.int64) - za) * (b.astype(np.int64) - zb)
        out[...] = qa.requantize(product, multiplier, shift, zy, lo, hi)
        return
    left = 20
    twice_max = 2 * max(sa, sb)
    m1, s1 = qa.quantize_multiplier(sa / twice_max)
    m2, s2 = qa.quantize_multiplier(sb / twice_max)
    mo, so = qa.quantize_multiplier(twice_max / ((1 << left) * sy))
    raw = qa.multiply_smaller_than_one((a.astype(np.int64) - za) << left, m1, s1)
    raw = raw + qa.multiply_smaller_than_one((b.astype(np.int64) - zb) << left, m2, s2)
    out[...] = np.clip(qa.multiply_smaller_than_one(raw, mo, so) + zy, lo, hi)


@kernel("QLinearAdd", domain=MS, inplace=(0, 3))
def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out):
    _binary(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, out, "add")


@kernel("QLinearMul", domain=MS, inplace=(0, 3))
def qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out):
    _binary(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, out, "mul")


def _table(x_dtype, x_scale, x_zero, y_scale, y_zero, out_dtype, fn) -> np.ndarray:
    """y for every x value: dequantized in float32, `fn`, quantized rounding half to even."""
    lo, hi = qa.dtype_range(x_dtype)
    values = np.arange(lo, hi + 1, dtype=np.int64)
    real = (values - int(_one(x_zero))).astype(np.float32) * np.float32(_one(x_scale))
    y = fn(real).astype(np.float32)
    out_lo, out_hi = qa.dtype_range(out_dtype)
    return np.clip(np.rint(y / np.float32(_one(y_scale))).astype(np.int64) + int(_one(y_zero)), out_lo, out_hi)


def _lookup(x, table, out) -> None:
    lo = np.iinfo(x.dtype).min
    np.take(table.astype(out.dtype), x.astype(np.int64) - lo, out=out)


@kernel("QLinearSigmoid", domain=MS, inplace=(0,))
def qlinear_sigmoid(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, out):
    table = _table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point, out.dtype, lambda r: 1 / (1 + np.exp(-r)))
    _lookup(x, table, out)


@kernel("QLinearLeakyRelu", domain=MS, inplace=(0,))
def qlinear_leaky_relu(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, out, alpha=0.01):
    alpha32 = np.float32(alpha)
    table = _table(
        x.dtype, x_scale, x_zero_point, y_scale, y_zero_point, out.dtype, lambda r: np.where(r >= 0, r, r * alpha32)
    )
    _lookup(x, table, out)


@kernel("QLinearConcat", domain=MS)
def qlinear_concat(y_scale, y_zero_point, *triples, out, axis):
    axis = axis % out.ndim
    start = 0
    for i in range(0, len(triples), 3):
        x, scale, zero = triples[i : i + 3]
        target = out[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)]
        start += x.shape[axis]
        if _one(scale) == _one(y_scale) and int(_one(zero)) == int(_one(y_zero_point)):
            target[...] = x
        else:
            table = _table(x.dtype, scale, zero, y_scale, y_zero_point, out.dtype, lambda r: r)
            target[...] = table[x.astype(np.int64) - np.iinfo(x.dtype).min]


def _average(total: np.ndarray, count, x_scale, y_scale, y_zero, out) -> None:
    real = total * (_one(x_scale) / _one(y_scale)) / count
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = np.clip(np.rint(real).astype(np.int64) + int(_one(y_zero)), lo, hi)


@kernel("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, *, out, channels_last=0):
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in axes]))
    total = x.sum(axis=axes, dtype=np.int64, keepdims=True) - int(_one(x_zero_point)) * count
    _average(total.reshape(out.shape), count, x_scale, y_scale, y_zero_point, out)


@kernel("QLinearAveragePool", domain=MS)
def qlinear_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, *, out, auto_pad="NOTSET", ceil_mode=0,
                         count_include_pad=0, kernel_shape=None, pads=None, strides=None, channels_last=0):  # fmt: skip
    if channels_last:
        raise ValueError("QLinearAveragePool: channels_last=1 is not supported; accepted: 0 (NCHW)")
    geo = window_geometry(x.shape, out.shape, kernel_shape, auto_pad, pads, strides)
    zero = int(_one(x_zero_point))
    padded = np.empty((*x.shape[:2], *padded_extent(x.shape[2:], geo)), dtype=np.int32)
    pad_into(padded, x.astype(np.int32) - zero, geo, 0)
    rank = len(geo.kernel)
    total = windows(padded, geo).sum(axis=tuple(range(-rank, 0)), dtype=np.int64)
    if count_include_pad:
        count = np.full(geo.out, int(np.prod(geo.kernel)))
    else:
        inside = np.zeros(padded.shape[2:], dtype=np.int32)
        inside[tuple(slice(b, b + n) for b, n in zip(geo.begin, x.shape[2:], strict=True))] = 1
        count = windows(inside, geo).sum(axis=tuple(range(-rank, 0)))
    _average(total, count, x_scale, y_scale, y_zero_point, out)


@kernel("QLinearUnary", domain="memplan", inplace=(0,))
def qlinear_unary(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, out, op, **attributes):
    """Any one-input float op between a DequantizeLinear and a QuantizeLinear (`runtime.fuse_qdq`:
    HardSwish, HardSigmoid, Tanh, ...) as a table of its 256 values, made by memplan's own float
    kernel of `op` (with the node's attributes) as onnxruntime makes its QLinear tables."""
    from runtime.kernels import call, get_kernel

    k = get_kernel(op)
    if k is None or k.workspace is not None and k.multi_output:
        raise ValueError(f"QLinearUnary: no float kernel for {op!r}")

    def through(real: np.ndarray) -> np.ndarray:
        result = np.empty_like(real)
        ws = None
        if k.workspace is not None:
            from runtime.kernels import TensorMeta

            meta = TensorMeta(real.shape, real.dtype)
            ws = np.zeros(k.workspace([meta], [meta], **attributes), dtype=np.uint8)
        call(k, [real], [result], ws, attributes, 21)
        return result

    _lookup(x, _table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point, out.dtype, through), out)
