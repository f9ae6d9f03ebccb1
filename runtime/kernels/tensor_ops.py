"""Indexing and element-type ops: Gather, GatherElements, ScatterElements, OneHot, Trilu,
Cast and CastLike.

Indices may be negative (counted from the end of their axis) as ONNX allows; an index
outside ``[-n, n)`` is an error naming the op, the axis and the accepted range.
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from runtime.kernels import kernel
from runtime.kernels._blocks import apply_blocks


def _check_bounds(op_type, indices, n, axis):
    if indices.size and (indices.min() < -n or indices.max() >= n):
        bad = indices[(indices < -n) | (indices >= n)].reshape(-1)[0]
        raise IndexError(f"{op_type}: index {bad} out of range [-{n}, {n}) on axis {axis}")


def _normalised(indices, n):
    """Indices with negative entries counted from the end (a copy, the size of `indices`)."""
    indices = np.asarray(indices, dtype=np.int64)
    return np.where(indices < 0, indices + n, indices)


@kernel("Gather")
def gather(data, indices, *, out, axis=0):
    axis = axis + data.ndim if axis < 0 else axis
    _check_bounds("Gather", indices, data.shape[axis], axis)
    # Bounds are checked, so "wrap" only maps negatives; unlike "raise" it writes out unbuffered.
    np.take(data, indices, axis=axis, out=out, mode="wrap")


@kernel("GatherElements")
def gather_elements(data, indices, *, out, axis=0):
    axis = axis + data.ndim if axis < 0 else axis
    _check_bounds("GatherElements", indices, data.shape[axis], axis)
    out[...] = np.take_along_axis(data, _normalised(indices, data.shape[axis]), axis=axis)


_SCATTER_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@kernel("ScatterElements")
def scatter_elements(data, indices, updates, *, out, axis=0, reduction="none"):
    """out = data, then each update written (or combined by `reduction`) at the position of
    `data` that `indices` names along `axis` and its own position along the others."""
    if reduction != "none" and reduction not in _SCATTER_REDUCTIONS:
        raise ValueError(f"ScatterElements: reduction must be none, add, mul, max or min, got {reduction!r}")
    axis = axis + data.ndim if axis < 0 else axis
    _check_bounds("ScatterElements", indices, data.shape[axis], axis)
    if not np.shares_memory(out, data):
        np.copyto(out, data)
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = _normalised(indices, data.shape[axis])
    where = tuple(where)
    if reduction == "none":
        out[where] = updates
    else:
        # ufunc.at applies repeated indices one after another, as the reductions require.
        _SCATTER_REDUCTIONS[reduction].at(out, where, updates)


@kernel("OneHot")
def one_hot(indices, depth, values, *, out, axis=-1):
    """values = [off, on]; indices outside [-depth, depth) give an all-off row."""
    depth = int(np.asarray(depth).reshape(-1)[0])
    off, on = np.asarray(values).reshape(-1)[:2]
    out.fill(off)
    axis = axis + out.ndim if axis < 0 else axis
    hot = np.moveaxis(out, axis, -1)
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    valid = (idx >= 0) & (idx < depth)
    hot[(*np.nonzero(valid), idx[valid])] = on


@kernel("Trilu")
def trilu(x, k=None, *, out, upper=1):
    """Keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes."""
    k = 0 if k is None else int(np.asarray(k))
    if not np.shares_memory(out, x):
        np.copyto(out, x)
    rows, cols = x.shape[-2:]
    # np.tri marks j <= i + k: the part below the kept upper triangle, or the kept lower one.
    drop = np.tri(rows, cols, k - 1, dtype=bool) if upper else ~np.tri(rows, cols, k, dtype=bool)
    out[..., drop] = 0


# Largest finite value of each float8 type: what saturate=1 clamps out-of-range values to.
_FLOAT8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 240.0, "float8_e5m2": 57344.0, "float8_e5m2fnuz": 57344.0}


@kernel("Cast")
def cast(x, *, out, to=None, saturate=1, round_mode="up"):
    """Between bool, integer, float and string types, and to/from the types onnx maps to
    ml_dtypes (bfloat16, float8, 4-bit integers) when `out` has such a dtype. Float to
    integer truncates (out-of-range values are undefined in ONNX too). With `saturate`
    (the default), values beyond a float8 type's range, infinities included, become its
    largest finite value; NaN stays NaN. float8_e8m0 (a power of two) rounds as
    `round_mode` says ("up", "down" or "nearest"), by onnx's own converter."""
    if out.dtype == object:
        out[...] = x.astype(str) if x.dtype != object else x
    elif out.dtype.name == "float8_e8m0fnu":
        np.copyto(out, numpy_helper.to_float8e8m0(x.astype(np.float32), bool(saturate), round_mode), casting="unsafe")
    elif saturate and out.dtype.name in _FLOAT8_MAX and x.dtype.kind == "f":
        top = _FLOAT8_MAX[out.dtype.name]
        apply_blocks(lambda x, o: np.copyto(o, np.clip(x, -top, top), casting="unsafe"), out, x)
    else:
        np.copyto(out, x, casting="unsafe")


@kernel("CastLike")
def cast_like(x, target_type, *, out, saturate=1, round_mode="up"):
    cast(x, out=out, saturate=saturate, round_mode=round_mode)
