"""MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool.

The windowed pools walk the kernel offsets: each offset is one strided view of the
(padded) image of the size of the output, combined into the output with an in-place
ufunc, so no window tensor is ever materialised. Padding (and the overhang that ceil_mode
adds at the end of an axis) goes through a padded copy of one image in the workspace,
filled with the lowest value for max and zero for average.
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes, small_ufunc_buffers
from runtime.kernels.conv import Geometry, pad_into, spatial_geometry, windows


def _geometry(x_shape, y_shape, kernel_shape, auto_pad, pads, strides, dilations) -> Geometry:
    return spatial_geometry(tuple(x_shape[2:]), tuple(y_shape[2:]), kernel_shape, auto_pad, pads, strides, dilations)


def _padded_lengths(x_shape, geo: Geometry) -> tuple[int, ...] | None:
    """Per-axis length of the padded image the windows read, or None when `x` serves as is."""
    need = [(o - 1) * s + e for o, s, e in zip(geo.out, geo.strides, geo.extent, strict=True)]
    lengths = tuple(max(n, b + i) for n, b, i in zip(need, geo.begin, x_shape[2:], strict=True))
    if not any(geo.begin) and all(n <= i for n, i in zip(need, x_shape[2:], strict=True)):
        return None
    return lengths


def pool_workspace(
    inputs, outputs, *, kernel_shape, auto_pad="NOTSET", pads=None, strides=None, dilations=None, **_
) -> int:
    x, y = inputs[0], outputs[0]
    geo = _geometry(x.shape, y.shape, kernel_shape, auto_pad, pads, strides, dilations)
    lengths = _padded_lengths(x.shape, geo)
    blocks = []
    if lengths is not None:
        blocks.append(((x.shape[1], *lengths), x.dtype))
    if len(outputs) > 1 and outputs[1] is not None:
        blocks.append((y.shape, np.bool_))  # where a later tap beats the running max
    return scratch_bytes(*blocks)


def _lowest(dtype: np.dtype):
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _images(x, geo: Geometry, scratch: Scratch, fill):
    """Yield (n, window view) per image, padding through the workspace when needed."""
    lengths = _padded_lengths(x.shape, geo)
    padded = None if lengths is None else scratch.take((x.shape[1], *lengths), x.dtype)
    for n in range(x.shape[0]):
        src = x[n]
        if padded is not None:
            pad_into(padded, src, geo, fill)
            src = padded
        yield n, windows(src, geo)


def _tap_positions(geo: Geometry, tap: tuple[int, ...], x_spatial, storage_order: int) -> np.ndarray:
    """Flat input index (within one channel) each output position reads at kernel offset `tap`."""
    rank = len(x_spatial)
    if storage_order == 0:
        steps = [int(np.prod(x_spatial[i + 1 :], dtype=np.int64)) for i in range(rank)]
    else:
        steps = [int(np.prod(x_spatial[:i], dtype=np.int64)) for i in range(rank)]
    flat = np.zeros(geo.out, dtype=np.int64)
    for i in range(rank):
        coord = np.arange(geo.out[i]) * geo.strides[i] + tap[i] * geo.dilations[i] - geo.begin[i]
        flat += (coord * steps[i]).reshape((-1,) + (1,) * (rank - 1 - i))
    return flat


@kernel("MaxPool", workspace=pool_workspace, outputs="many")
@small_ufunc_buffers()
def max_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None,
    storage_order=0, strides=None,
):  # fmt: skip
    y, indices = out[0], out[1] if len(out) > 1 else None
    geo = _geometry(x.shape, y.shape, kernel_shape, auto_pad, pads, strides, dilations)
    scratch = Scratch(ws, "MaxPool")
    taps = list(np.ndindex(*geo.kernel))
    better = None if indices is None else scratch.take(y.shape[1:], np.bool_)
    for n, win in _images(x, geo, scratch, _lowest(x.dtype)):
        target = y[n]
        np.copyto(target, win[(Ellipsis, *taps[0])])
        if indices is None:
            for tap in taps[1:]:
                np.maximum(target, win[(Ellipsis, *tap)], out=target)
            continue
        where = indices[n]
        np.copyto(where, _tap_positions(geo, taps[0], x.shape[2:], storage_order))
        for tap in taps[1:]:
            view = win[(Ellipsis, *tap)]
            np.greater(view, target, out=better)  # strict: the first maximum keeps its index
            np.copyto(target, view, where=better)
            np.copyto(where, _tap_positions(geo, tap, x.shape[2:], storage_order), where=better)
    if indices is not None:
        # Indices count over the whole tensor: add each (image, channel)'s offset.
        per_channel = int(np.prod(x.shape[2:], dtype=np.int64))
        base = np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * per_channel
        indices += base.reshape(x.shape[:2] + (1,) * len(geo.out))


def _divide_by_counts(out: np.ndarray, geo: Geometry, x_spatial, include_pad: bool) -> None:
    """Divide window sums by how many elements each window averages: those inside the input,
    or inside the input and its explicit pads (never the ceil_mode overhang beyond them).
    The count is a product over axes, so one small per-axis vector divides at a time."""
    rank = len(x_spatial)
    for i, size in enumerate(x_spatial):
        lo, hi = (-geo.begin[i], size + geo.end[i]) if include_pad else (0, size)
        starts = np.arange(geo.out[i]) * geo.strides[i] - geo.begin[i]
        taps = starts[:, None] + np.arange(geo.kernel[i]) * geo.dilations[i]
        inside = ((taps >= lo) & (taps < hi)).sum(axis=1).astype(out.dtype)
        out /= inside.reshape((-1,) + (1,) * (rank - 1 - i))


@kernel("AveragePool", workspace=pool_workspace)
@small_ufunc_buffers()
def average_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
    pads=None, strides=None,
):  # fmt: skip
    geo = _geometry(x.shape, out.shape, kernel_shape, auto_pad, pads, strides, dilations)
    taps = list(np.ndindex(*geo.kernel))
    for n, win in _images(x, geo, Scratch(ws, "AveragePool"), 0):
        target = out[n]
        np.copyto(target, win[(Ellipsis, *taps[0])])
        for tap in taps[1:]:
            np.add(target, win[(Ellipsis, *tap)], out=target)
    _divide_by_counts(out, geo, x.shape[2:], bool(count_include_pad))


def lp_pool_workspace(inputs, outputs, **attrs) -> int:
    x, y = inputs[0], outputs[0]
    return pool_workspace(inputs, outputs, **attrs) + scratch_bytes((y.shape[1:], x.dtype))


@kernel("LpPool", workspace=lp_pool_workspace)
@small_ufunc_buffers()
def lp_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, p=2, pads=None, strides=None,
):  # fmt: skip
    # (sum over the window of |x|^p)^(1/p); pads add nothing to the sum.
    geo = _geometry(x.shape, out.shape, kernel_shape, auto_pad, pads, strides, dilations)
    scratch = Scratch(ws, "LpPool")
    power = scratch.take(out.shape[1:], x.dtype)
    for n, win in _images(x, geo, scratch, 0):
        out[n] = 0
        for tap in np.ndindex(*geo.kernel):
            _abs_power(win[(Ellipsis, *tap)], p, power)
            out[n] += power
    _root(out, p)


def _abs_power(src: np.ndarray, p: float, dst: np.ndarray) -> None:
    if p == 2:
        np.square(src, out=dst)
    else:
        np.abs(src, out=dst)
        if p != 1:
            dst **= dst.dtype.type(p)


def _root(out: np.ndarray, p: float) -> None:
    if p == 2:
        np.sqrt(out, out=out)
    elif p != 1:
        out **= out.dtype.type(1.0 / p)


@kernel("GlobalLpPool")
@small_ufunc_buffers()
def global_lp_pool(x, *, out, p=2):
    spatial = tuple(range(2, x.ndim))
    if p == 2:
        letters = "abcdefghijklmnopqrstuvwxyz"[: x.ndim]
        out.reshape(x.shape[:2])[...] = np.einsum(f"{letters},{letters}->ab", x, x)  # no squared temporary
    else:
        np.sum(np.abs(x) ** p, axis=spatial, keepdims=True, out=out)
    _root(out, p)


@kernel("GlobalAveragePool")
@small_ufunc_buffers()
def global_average_pool(x, *, out):
    # Sum over one flattened spatial axis, then scale: np.mean over several axes buffers ~17 KB.
    rows = out.reshape(x.shape[:2])
    np.add.reduce(x.reshape(*x.shape[:2], -1), axis=2, out=rows)
    rows /= rows.dtype.type(max(int(np.prod(x.shape[2:], dtype=np.int64)), 1))


@kernel("GlobalMaxPool")
@small_ufunc_buffers()
def global_max_pool(x, *, out):
    np.maximum.reduce(x.reshape(*x.shape[:2], -1), axis=2, out=out.reshape(x.shape[:2]))
