"""CONV_2D and DEPTHWISE_CONV_2D (NHWC input, OHWI / 1HWC filter), int8/uint8 with TFLite's per-channel
requantization, and float32.

Both work in bands of output rows: a band's input rows (padded with the input's zero point, which
adds nothing, as TFLite's reference kernels skip taps outside the image) go to workspace; CONV_2D
gathers its columns there as float64, exact for int8 products summed over any realistic depth,
and multiplies them by the filter through BLAS; DEPTHWISE_CONV_2D accumulates tap by tap in int32.
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.quantized.common import (
    EXACT_DEPTH,
    TFLITE,
    exact_matmul,
    fill_band,
    float_activation,
    quant,
    rows_per_band,
    same_padding,
    taps,
)
from runtime.kernels.quantized.jit_requantize import channel_parameters, requantize_rows
from runtime.kernels.quantized.tflite_conv_jit import bind_compiled, compiled_planes, compiled_workspace


def _geometry(x, w, y, stride_h, stride_w, dilation_h_factor, dilation_w_factor, pad_top=None):
    (_, height, width, _), (_, kh, kw, _), (_, oh, ow, _) = x, w, y
    top, _ = same_padding(height, kh, stride_h, dilation_h_factor, oh, pad_top)
    left, right = same_padding(width, kw, stride_w, dilation_w_factor, ow)
    return top, left, width + left + right, (kh, kw)


def _band_rows(rows: int, stride: int, kh: int, dilation: int) -> int:
    return (rows - 1) * stride + (kh - 1) * dilation + 1


def _conv_blocks(x, w, y, integer, attrs):
    """Rows per band and the workspace blocks: the band's input rows, its columns (float32: exact for
    8-bit products in depth chunks, `exact_matmul`), and for integers its float32 products and, over
    a depth of more than EXACT_DEPTH, their float64 sums."""
    top, left, padded_width, (kh, kw) = _geometry(x.shape, w.shape, y.shape, **attrs)
    depth = kh * kw * x.shape[3]
    wide = integer and depth > EXACT_DEPTH
    unit = y.shape[2] * (depth * 4 + (y.shape[3] * (4 + 8 * wide) if integer else 0))
    rows = rows_per_band(unit, y.shape[1], y.nbytes)
    band = (_band_rows(rows, attrs["stride_h"], kh, attrs["dilation_h_factor"]), padded_width, x.shape[3])
    pixels = rows * y.shape[2]
    blocks = [(band, x.dtype), ((pixels, depth), np.float32)]
    if integer:
        blocks.append(((pixels, y.shape[3]), np.float32))
        blocks.append(((pixels, y.shape[3]) if wide else (0,), np.float64))
    return rows, blocks, (top, left)


def _geo_attrs(stride_h=1, stride_w=1, dilation_h_factor=1, dilation_w_factor=1, pad_top=None):
    """The geometry's attributes; `pad_top`: a tiled band's rows of padding above its input."""
    return {"stride_h": stride_h, "stride_w": stride_w, "dilation_h_factor": dilation_h_factor,
            "dilation_w_factor": dilation_w_factor, "pad_top": pad_top}  # fmt: skip


def conv_workspace(inputs, outputs, *, stride_h=1, stride_w=1, dilation_h_factor=1, dilation_w_factor=1,
                   pad_top=None, **_) -> int:  # fmt: skip
    x, w, y = inputs[0], inputs[1], outputs[0]
    attrs = _geo_attrs(stride_h, stride_w, dilation_h_factor, dilation_w_factor, pad_top)
    compiled = compiled_workspace(x, w, y, attrs, depthwise=False)
    if compiled is not None:
        return compiled
    return scratch_bytes(*_conv_blocks(x, w, y, x.dtype.kind in "iu", attrs)[1])


def conv_columns(w: np.ndarray, integer: bool) -> np.ndarray:
    """The OHWI filter as the (KH*KW*C, O) float32 matrix the columns multiply."""
    return np.ascontiguousarray(w.reshape(w.shape[0], -1).T, dtype=np.float32)


def conv_constants(values, inputs, outputs, **_) -> dict:
    w = values[1] if len(values) > 1 else None
    if w is None:
        return {}
    return {"w_columns": conv_columns(w, inputs[0].dtype.kind in "iu")}


@kernel(
    "CONV_2D",
    domain=TFLITE,
    workspace=conv_workspace,
    constants=conv_constants,
    planes=compiled_planes(depthwise=False),
    bind=bind_compiled(depthwise=False),
)
def conv_2d(x, w, b=None, *, out, ws, padding="SAME", stride_h=1, stride_w=1, dilation_h_factor=1,
            dilation_w_factor=1, fused_activation_function="NONE", q_inputs=None, q_outputs=None,
            w_columns=None, prepared_weights=True, pad_top=None, **_):  # fmt: skip
    integer = x.dtype.kind in "iu"
    attrs = _geo_attrs(stride_h, stride_w, dilation_h_factor, dilation_w_factor, pad_top)
    rows, blocks, (top, left) = _conv_blocks(x, w, out, integer, attrs)
    matrix = w_columns if w_columns is not None else conv_columns(w, integer)
    scratch = Scratch(ws, "CONV_2D")
    band = scratch.take(*blocks[0])
    columns_all = scratch.take(*blocks[1])
    part_all = scratch.take(*blocks[2]) if integer else columns_all
    sums_all = scratch.take(*blocks[3]) if integer else columns_all
    kh, kw = w.shape[1], w.shape[2]
    oh, ow, channels = out.shape[1], out.shape[2], out.shape[3]
    stride, dilation = (stride_h, stride_w), (dilation_h_factor, dilation_w_factor)
    if integer:
        q_in, q_w, q_out = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input"), quant(q_outputs, 0, "output")
        zero = int(q_in.zero_point[0])
        multiplier, shift = qa.conv_multipliers(q_in, q_w, q_out, channels)
        lo, hi = qa.activation_range(fused_activation_function, q_out, out.dtype)
        params = channel_parameters(b, multiplier, shift, channels)
    for n in range(x.shape[0]):
        for r0 in range(0, oh, rows):
            r1 = min(oh, r0 + rows)
            count = (r1 - r0) * ow
            view = band[: _band_rows(r1 - r0, stride_h, kh, dilation_h_factor)]
            fill_band(x, n, r0 * stride_h - top, left, view, zero if integer else 0)
            columns = columns_all[:count]
            shaped = columns.reshape(r1 - r0, ow, kh, kw, x.shape[3])
            for ky in range(kh):
                for kx in range(kw):
                    shaped[:, :, ky, kx] = taps(view, ky, kx, r1 - r0, ow, stride, dilation)
            target = out[n, r0:r1].reshape(count, channels)
            if not integer:
                np.matmul(columns, matrix, out=target)
                if b is not None:
                    target += b
                float_activation(target, fused_activation_function)
                continue
            columns -= zero
            part = part_all[:count]
            if matrix.shape[0] > EXACT_DEPTH:
                acc = sums_all[:count]
                exact_matmul(columns, matrix, acc, part)
            else:  # one exact float32 product: no float64 sums needed
                acc = part
                np.matmul(columns, matrix, out=acc)
            requantize_rows(acc.T, params, int(q_out.zero_point[0]), lo, hi, target.T)


def _depthwise_blocks(x, w, y, integer, attrs):
    top, left, padded_width, (kh, _) = _geometry(x.shape, w.shape, y.shape, **attrs)
    channels = y.shape[3]
    unit = y.shape[2] * channels * 4 * 2 + padded_width * x.shape[3] * 2 * attrs["stride_h"]
    rows = rows_per_band(unit, y.shape[1], y.nbytes)
    band = (_band_rows(rows, attrs["stride_h"], kh, attrs["dilation_h_factor"]), padded_width, x.shape[3])
    cell = np.int32 if integer else np.float32
    blocks = [(band, np.int16 if integer else np.float32), ((rows, y.shape[2], channels), cell),
              ((rows, y.shape[2], channels), cell)]  # fmt: skip
    return rows, blocks, (top, left)


def depthwise_workspace(inputs, outputs, *, stride_h=1, stride_w=1, dilation_h_factor=1, dilation_w_factor=1,
                        pad_top=None, **_):  # fmt: skip
    x, w, y = inputs[0], inputs[1], outputs[0]
    attrs = _geo_attrs(stride_h, stride_w, dilation_h_factor, dilation_w_factor, pad_top)
    compiled = compiled_workspace(x, w, y, attrs, depthwise=True)
    if compiled is not None:
        return compiled
    return scratch_bytes(*_depthwise_blocks(x, w, y, x.dtype.kind in "iu", attrs)[1])


@kernel(
    "DEPTHWISE_CONV_2D",
    domain=TFLITE,
    workspace=depthwise_workspace,
    planes=compiled_planes(depthwise=True),
    bind=bind_compiled(depthwise=True),
)
def depthwise_conv_2d(x, w, b=None, *, out, ws, padding="SAME", stride_h=1, stride_w=1, dilation_h_factor=1,
                      dilation_w_factor=1, depth_multiplier=1, fused_activation_function="NONE", q_inputs=None,
                      q_outputs=None, pad_top=None, **_):  # fmt: skip
    integer = x.dtype.kind in "iu"
    attrs = _geo_attrs(stride_h, stride_w, dilation_h_factor, dilation_w_factor, pad_top)
    rows, blocks, (top, left) = _depthwise_blocks(x, w, out, integer, attrs)
    scratch = Scratch(ws, "DEPTHWISE_CONV_2D")
    band, acc_all, product_all = (scratch.take(*block) for block in blocks)
    kh, kw = w.shape[1], w.shape[2]
    oh, ow, channels = out.shape[1], out.shape[2], out.shape[3]
    multiple = channels // x.shape[3]  # the output channels per input channel (depth_multiplier)
    stride, dilation = (stride_h, stride_w), (dilation_h_factor, dilation_w_factor)
    weights = w.reshape(kh, kw, x.shape[3], multiple).astype(np.int32 if integer else np.float32)
    zero = 0
    if integer:
        q_in, q_w, q_out = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input"), quant(q_outputs, 0, "output")
        zero = int(q_in.zero_point[0])
        multiplier, shift = qa.conv_multipliers(q_in, q_w, q_out, channels)
        lo, hi = qa.activation_range(fused_activation_function, q_out, out.dtype)
    for n in range(x.shape[0]):
        for r0 in range(0, oh, rows):
            r1 = min(oh, r0 + rows)
            view = band[: _band_rows(r1 - r0, stride_h, kh, dilation_h_factor)]
            fill_band(x, n, r0 * stride_h - top, left, view, 0, zero if integer else None)
            acc = acc_all[: r1 - r0].reshape(r1 - r0, ow, x.shape[3], multiple)
            product = product_all[: r1 - r0].reshape(acc.shape)
            acc[...] = 0
            for ky in range(kh):
                for kx in range(kw):
                    tap = taps(view, ky, kx, r1 - r0, ow, stride, dilation)
                    np.multiply(tap[..., None], weights[ky, kx], out=product, casting="unsafe")
                    acc += product
            result = acc.reshape(r1 - r0, ow, channels)
            if b is not None:
                result += b
            if not integer:
                float_activation(result, fused_activation_function)
                out[n, r0:r1] = result
                continue
            out[n, r0:r1] = qa.requantize(result, multiplier, shift, int(q_out.zero_point[0]), lo, hi)
