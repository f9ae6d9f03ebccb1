"""Quantized ONNX's integer convolutions and products (NCHW): QLinearConv, QLinearMatMul and
com.microsoft's QGemm (ConvInteger and MatMulInteger live with Conv and MatMul).

Accumulation is exact (int8/uint8 products summed in float64 through BLAS, then int64); requantized
outputs use TFLite's fixed-point multiplier per output channel (`runtime.quant_arith`), so they may
differ from onnxruntime's float requantization by one step where the real value sits at a tie.
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.window import pad_into, padded_extent, window_geometry, windows

MS = "com.microsoft"


def _zero(z) -> np.ndarray:
    return np.zeros(1, dtype=np.int64) if z is None else np.asarray(z).astype(np.int64).reshape(-1)


def _geometry(x, w, y, auto_pad, pads, strides, dilations, kernel_shape):
    return window_geometry(x.shape, y.shape, kernel_shape or w.shape[2:], auto_pad, pads, strides, dilations)


def _conv_blocks(x, w, y, auto_pad, pads, strides, dilations, kernel_shape, group):
    geo = _geometry(x, w, y, auto_pad, pads, strides, dilations, kernel_shape)
    extent = padded_extent(x.shape[2:], geo)
    depth = (x.shape[1] // group) * int(np.prod(geo.kernel))
    pixels = int(np.prod(y.shape[2:]))
    per_group = y.shape[1] // group
    return geo, [((x.shape[1], *extent), x.dtype), ((depth, pixels), np.float64), ((per_group, pixels), np.float64)]


def _workspace(w_index: int):
    def workspace(inputs, outputs, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                  strides=None, **_) -> int:  # fmt: skip
        x, w, y = inputs[0], inputs[w_index], outputs[0]
        return scratch_bytes(*_conv_blocks(x, w, y, auto_pad, pads, strides, dilations, kernel_shape, group)[1])

    return workspace


def _accumulate(x, x_zero, w, w_zero, y, ws, group, geo_args, owner, finish) -> None:
    """Per image and group: the int32 accumulators (M_g, pixels), then `finish(image, channels, acc)`."""
    auto_pad, pads, strides, dilations, kernel_shape = geo_args
    geo, blocks = _conv_blocks(x, w, y, auto_pad, pads, strides, dilations, kernel_shape, group)
    scratch = Scratch(ws, owner)
    padded, columns, acc = (scratch.take(*b) for b in blocks)
    fill = int(x_zero[0])
    per_group, depth_in = y.shape[1] // group, x.shape[1] // group
    weights = (
        w.astype(np.float64) - w_zero.reshape(-1, *([1] * (w.ndim - 1))) if w_zero.size > 1 else w - float(w_zero[0])
    )
    matrix = np.asarray(weights, dtype=np.float64).reshape(w.shape[0], -1)
    rank = len(geo.kernel)
    for n in range(x.shape[0]):
        pad_into(padded, x[n], geo, fill)
        view = windows(padded, geo)  # (C, *out, *kernel)
        for g in range(group):
            cols = columns.reshape(depth_in, *geo.kernel, *geo.out)
            order = (0, *range(1 + rank, 1 + 2 * rank), *range(1, 1 + rank))
            cols[...] = view[g * depth_in : (g + 1) * depth_in].transpose(order)
            columns -= fill
            channels = slice(g * per_group, (g + 1) * per_group)
            np.matmul(matrix[channels], columns, out=acc)
            finish(n, channels, acc)


@kernel("QLinearConv", workspace=_workspace(3))
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *, out, ws,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):  # fmt: skip
    channels_all = out.shape[1]
    w_scales = np.broadcast_to(np.asarray(w_scale, dtype=np.float64).reshape(-1), (channels_all,))
    real = float(np.asarray(x_scale).reshape(-1)[0]) * w_scales / float(np.asarray(y_scale).reshape(-1)[0])
    multiplier, shift = qa.quantize_multiplier(real)
    zero = int(np.asarray(y_zero_point).reshape(-1)[0]) if y_zero_point is not None else 0
    lo, hi = qa.dtype_range(out.dtype)
    flat = out.reshape(out.shape[0], channels_all, -1)
    bias = None if B is None else np.asarray(B, dtype=np.int64)

    def finish(n, channels, acc):
        total = acc.astype(np.int64)
        if bias is not None:
            total += bias[channels, None]
        m, s = multiplier[channels, None], shift[channels, None]
        flat[n, channels] = qa.requantize(total, m, s, zero, lo, hi)

    geo_args = (auto_pad, pads, strides, dilations, kernel_shape)
    _accumulate(x, _zero(x_zero_point), w, _zero(w_zero_point), out, ws, group, geo_args, "QLinearConv", finish)


def _product(a, a_zero, b, b_zero) -> np.ndarray:
    """(a - a_zero) @ (b - b_zero), exact, as int64 (b's zero point may be one per column)."""
    left = a.astype(np.float64) - float(_zero(a_zero)[0])
    bz = _zero(b_zero)
    right = b.astype(np.float64) - (bz.astype(np.float64) if bz.size > 1 else float(bz[0]))
    return np.matmul(left, right).astype(np.int64)


@kernel("QLinearMatMul")
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, *, out):
    acc = _product(a, a_zero_point, b, b_zero_point)
    b_scales = np.asarray(b_scale, dtype=np.float64).reshape(-1)
    real = float(np.asarray(a_scale).reshape(-1)[0]) * b_scales / float(np.asarray(y_scale).reshape(-1)[0])
    multiplier, shift = qa.quantize_multiplier(real)
    if multiplier.size == 1:
        multiplier, shift = multiplier[0], shift[0]
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = qa.requantize(acc, multiplier, shift, int(_zero(y_zero_point)[0]), lo, hi)


@kernel("QGemm", domain=MS)
def qgemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None, y_zero_point=None, *, out,
          alpha=1.0, transA=0, transB=0):  # fmt: skip
    a = A.T if transA else A
    b = B.T if transB else B
    acc = _product(a, a_zero_point, b, b_zero_point)
    if C is not None:
        acc = acc + np.asarray(C, dtype=np.int64)
    scales = (
        float(alpha) * float(np.asarray(a_scale).reshape(-1)[0]) * np.asarray(b_scale, dtype=np.float64).reshape(-1)
    )
    if y_scale is None:  # a float output
        np.copyto(out, acc * (scales if scales.size > 1 else scales[0]), casting="unsafe")
        return
    multiplier, shift = qa.quantize_multiplier(scales / float(np.asarray(y_scale).reshape(-1)[0]))
    if multiplier.size == 1:
        multiplier, shift = multiplier[0], shift[0]
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = qa.requantize(acc, multiplier, shift, int(_zero(y_zero_point)[0]), lo, hi)
