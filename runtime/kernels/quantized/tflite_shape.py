"""RESHAPE, SQUEEZE (views), PAD/PADV2 (the output's zero point outside) and CONCATENATION."""

from __future__ import annotations

import functools

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import Bound, kernel
from runtime.kernels.planes import Planes
from runtime.kernels.quantized.common import TFLITE, float_activation
from runtime.kernels.quantized.jit_pad import PAD_OVER, band_pads, pad_over, pads_over

# PAD may be planned over its dying input (`jit_pad`); `depthwise=True` keeps the NCHW plane-wise
# reading off (a filter's axis 0 is no group count here): only `over` applies.
_OVER = Planes(depthwise=True, over=pads_over)


def _same_bytes(x: np.ndarray, out: np.ndarray) -> None:
    if not np.shares_memory(x, out):
        np.copyto(out, x.reshape(out.shape))


@kernel("RESHAPE", domain=TFLITE, view=True)
def reshape(x, shape=None, *, out, **_):
    _same_bytes(x, out)


@kernel("SQUEEZE", domain=TFLITE, view=True)
def squeeze(x, *, out, **_):
    _same_bytes(x, out)


def _fill(x, value, q_outputs):
    """The value PAD writes outside its input: PADV2's, else the output's zero point (integers), else 0."""
    if value is not None:
        return np.asarray(value).reshape(-1)[0]
    if x.dtype.kind in "iu" and q_outputs and q_outputs[0] is not None:
        return int(q_outputs[0].zero_point[0])
    return 0


def _copy_indices(pads: np.ndarray, shape, out_shape) -> tuple[tuple[slice, ...], tuple[slice, ...]] | None:
    """(index of the input, index of the output) of the part of the input inside the output, None if
    nothing is: a tiled band's input may lie partly or wholly outside its output rows (`pad_rows`)."""
    source = tuple(
        slice(max(0, -int(p[0])), min(s, o - int(p[0]))) for p, s, o in zip(pads, shape, out_shape, strict=True)
    )
    target = tuple(slice(int(p[0]) + c.start, int(p[0]) + c.stop) for p, c in zip(pads, source, strict=True))
    return (source, target) if all(c.stop > c.start for c in source) else None


def _pad(x, paddings, out, value, q_outputs, pad_rows=None) -> None:
    fill = _fill(x, value, q_outputs)
    pads = band_pads(paddings, x.shape, out.shape, pad_rows)
    if np.shares_memory(x, out):
        if not pad_over(x, out, pads, fill):
            raise ValueError(f"PAD over its input needs a 4-D input from the output's first byte; got {x.shape}")
        return
    out[...] = fill
    parts = _copy_indices(pads, x.shape, out.shape)
    if parts is not None:
        out[parts[1]] = x[parts[0]]


def _pad_bind(inputs, outputs, attrs, general) -> Bound:
    """PAD's call with its pads, fill and views worked out once, at prepare (`prime`), for the arrays the
    step has then: a tiled stage runs hundreds of PAD bands a run, and the slices each call made
    counted beside the arena. Other arrays (a graph input, fed anew on every run) take the general call."""
    q_outputs, pad_rows = attrs.get("q_outputs"), attrs.get("pad_rows")
    primed: list = [(), None]  # the arrays primed, and their call

    def prime(*arrays, out, ws=None) -> None:
        x, paddings, value = (*arrays, None)[:3]
        if x is None or paddings is None or out is None:
            return  # not bound at prepare: the general call
        pads = band_pads(paddings, x.shape, out.shape, pad_rows)
        fill = out.dtype.type(_fill(x, value, q_outputs))
        if np.shares_memory(x, out):
            if PAD_OVER is None or not pads_over(attrs, [x], out) or x.ctypes.data != out.ctypes.data:
                return  # the general call says what is wrong
            before = np.ascontiguousarray(pads[:, 0], dtype=np.int64)
            primed[:] = (*arrays, out), functools.partial(PAD_OVER, x, out, before, fill)
            return
        parts = _copy_indices(pads, x.shape, out.shape)
        views = None if parts is None else (out[parts[1]], x[parts[0]])
        primed[:] = (*arrays, out), functools.partial(_fill_copy, out, fill, views)

    def bound(*arrays, out, ws=None) -> None:
        kept = primed[0]
        if len(kept) == len(arrays) + 1 and out is kept[-1] and all(a is k for a, k in zip(arrays, kept, strict=False)):
            primed[1]()
            return
        general(arrays, out, ws, attrs)

    return Bound(bound, prime=prime)


def _fill_copy(out: np.ndarray, fill, views) -> None:
    out.fill(fill)
    if views is not None:
        np.copyto(*views)


@kernel("PAD", domain=TFLITE, planes=_OVER, bind=_pad_bind)
def pad(x, paddings, *, out, q_outputs=None, pad_rows=None, **_):
    _pad(x, paddings, out, None, q_outputs, pad_rows)


@kernel("PADV2", domain=TFLITE, planes=_OVER, bind=_pad_bind)
def pad_v2(x, paddings, value=None, *, out, q_outputs=None, pad_rows=None, **_):
    _pad(x, paddings, out, value, q_outputs, pad_rows)


@kernel("CONCATENATION", domain=TFLITE)
def concatenation(*inputs, out, axis=0, fused_activation_function="NONE", q_inputs=None, q_outputs=None, **_):
    axis = axis % out.ndim
    start = 0
    for i, x in enumerate(inputs):
        target = out[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)]
        start += x.shape[axis]
        qi = q_inputs[i] if q_inputs else None
        qo = q_outputs[0] if q_outputs else None
        if x.dtype.kind in "iu" and qi is not None and qo is not None and qi != qo:
            # TFLite's rescaling concatenation: float scale and bias, rounded half away from zero.
            scale = np.float32(qi.scale[0]) / np.float32(qo.scale[0])
            bias = -np.float32(qi.zero_point[0]) * scale
            lo, hi = qa.dtype_range(out.dtype)
            value = qa.round_half_away(x.astype(np.float32) * scale + bias).astype(np.int64) + int(qo.zero_point[0])
            target[...] = np.clip(value, lo, hi)
        else:
            target[...] = x
    if out.dtype.kind == "f":
        float_activation(out, fused_activation_function)


@kernel("TRANSPOSE", domain=TFLITE)
def transpose(x, perm, *, out, **_):
    np.copyto(out, np.transpose(x, [int(p) for p in np.asarray(perm).reshape(-1)]))


@kernel("SPLIT", domain=TFLITE, outputs="many")
def split(axis, x, *, out, num_splits=1, **_):
    start, along = 0, int(np.asarray(axis).reshape(-1)[0]) % x.ndim
    for part in out:
        if part is None:
            continue
        size = part.shape[along]
        np.copyto(part, x[(slice(None),) * along + (slice(start, start + size),)])
        start += size


@kernel("STRIDED_SLICE", domain=TFLITE)
def strided_slice(x, begin, end, strides=None, *, out, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
                  shrink_axis_mask=0, offset=False, **_):  # fmt: skip
    if ellipsis_mask or new_axis_mask:
        raise ValueError("STRIDED_SLICE: ellipsis_mask and new_axis_mask are not supported; accepted: 0")
    b, e = np.asarray(begin).reshape(-1), np.asarray(end).reshape(-1)
    s = np.ones_like(b) if strides is None else np.asarray(strides).reshape(-1)
    index = []
    for i in range(x.ndim):
        if i >= b.size:
            index.append(slice(None))
        elif shrink_axis_mask >> i & 1:
            index.append(int(b[i]))
        else:
            stop = int(b[i]) + int(e[i]) if offset else int(e[i])
            index.append(
                slice(None if begin_mask >> i & 1 else int(b[i]), None if end_mask >> i & 1 else stop, int(s[i]))
            )
    np.copyto(out, x[tuple(index)].reshape(out.shape))


def _nearest(size: int, out_size: int, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """TFLite's nearest source index per output index, in float32 as its reference kernel computes it."""
    if align_corners and out_size > 1:
        scale = np.float32(size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(size) / np.float32(out_size)
    position = (np.arange(out_size, dtype=np.float32) + np.float32(0.5 if half_pixel_centers else 0.0)) * scale
    index = qa.round_half_away(position) if align_corners else np.floor(position)
    index = np.minimum(index.astype(np.int64), size - 1)
    return np.maximum(index, 0) if half_pixel_centers else index


@kernel("RESIZE_NEAREST_NEIGHBOR", domain=TFLITE)
def resize_nearest_neighbor(x, size=None, *, out, align_corners=False, half_pixel_centers=False, **_):
    rows = _nearest(x.shape[1], out.shape[1], align_corners, half_pixel_centers)
    cols = _nearest(x.shape[2], out.shape[2], align_corners, half_pixel_centers)
    np.copyto(out, x[:, rows][:, :, cols])


def _toward_zero(a: np.ndarray, b: int) -> np.ndarray:
    return np.where(a >= 0, a // b, -((-a) // b))


def _bilinear_axis(size: int, out_size: int, align_corners: bool, half_pixel_centers: bool):
    """Per output index along one axis: TFLite's 10-bit fixed-point source position and its two
    neighbours (ResizeBilinearInteger)."""
    if align_corners and out_size > 1:
        scale = ((1 << 10) * (size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = ((1 << 10) * size + out_size // 2) // out_size
    index = np.arange(out_size, dtype=np.int64)
    position = index * scale + (scale // 2 - (1 << 9) if half_pixel_centers else 0)
    low = np.maximum(_toward_zero(position, 1 << 10), 0)
    high = np.minimum(_toward_zero(position + (1 << 10) - 1, 1 << 10), size - 1)
    return position - (low << 10), low, high


@kernel("RESIZE_BILINEAR", domain=TFLITE)
def resize_bilinear(x, size=None, *, out, align_corners=False, half_pixel_centers=False, **_):
    if x.dtype.kind == "f":
        _bilinear_float(x, out, align_corners, half_pixel_centers)
        return
    fy, y0, y1 = _bilinear_axis(x.shape[1], out.shape[1], align_corners, half_pixel_centers)
    fx, x0, x1 = _bilinear_axis(x.shape[2], out.shape[2], align_corners, half_pixel_centers)
    v = x.astype(np.int64)
    wy, wx = fy[None, :, None, None], fx[None, None, :, None]
    total = (v[:, y0][:, :, x0] * ((1 << 10) - wy) * ((1 << 10) - wx) + v[:, y1][:, :, x0] * wy * ((1 << 10) - wx)
             + v[:, y0][:, :, x1] * ((1 << 10) - wy) * wx + v[:, y1][:, :, x1] * wy * wx)  # fmt: skip
    rounded = _toward_zero(total + np.where(total > 0, 1 << 19, -(1 << 19)), 1 << 20)
    out[...] = rounded  # the narrowing store: in range, as a weighted mean of in-range values


def _float_axis(size: int, out_size: int, align_corners: bool, half_pixel_centers: bool):
    if align_corners and out_size > 1:
        scale = np.float32(size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(size) / np.float32(out_size)
    index = np.arange(out_size, dtype=np.float32)
    position = (index + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel_centers else index * scale
    low = np.maximum(np.floor(position), 0).astype(np.int64)
    high = np.minimum(np.ceil(position).astype(np.int64), size - 1)
    return (position - low).astype(np.float32), low, high


def _bilinear_float(x: np.ndarray, out: np.ndarray, align_corners: bool, half_pixel_centers: bool) -> None:
    """TFLite's float bilinear resize: float32 positions, the four neighbours weighted."""
    fy, y0, y1 = _float_axis(x.shape[1], out.shape[1], align_corners, half_pixel_centers)
    fx, x0, x1 = _float_axis(x.shape[2], out.shape[2], align_corners, half_pixel_centers)
    wy, wx = fy[None, :, None, None], fx[None, None, :, None]
    one = np.float32(1)
    np.copyto(out, x[:, y0][:, :, x0] * (one - wy) * (one - wx) + x[:, y1][:, :, x0] * wy * (one - wx)
              + x[:, y0][:, :, x1] * (one - wy) * wx + x[:, y1][:, :, x1] * wy * wx)  # fmt: skip
