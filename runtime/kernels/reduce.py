"""Reductions (Reduce*) and ArgMax/ArgMin.

`axes` was an attribute before opset 13 (ReduceSum) or 18 (the others) and is an input
since; both forms reach the same `axes` parameter. An empty or absent `axes` reduces
every axis, unless `noop_with_empty_axes` asks for the identity instead. Reducing an
empty set gives the operation's identity element (0, 1, -inf, +inf).

Kernels that transform the input before summing (squares, absolute values, exponentials)
declare an input-sized workspace for that intermediate.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes


def _axes(data, axes, noop_with_empty_axes):
    """The axes to reduce as a tuple, or None for all of them.

    The no-op case is the empty tuple: numpy then reduces nothing, yet still applies the
    element transform (ReduceL2 of a no-op is |x|, as in onnx's reference)."""
    if axes is not None:
        axes = tuple(int(a) + data.ndim if a < 0 else int(a) for a in np.asarray(axes).reshape(-1))
    if not axes:
        return () if noop_with_empty_axes else None
    return axes


def _reduce(data, out, axes, keepdims, noop, reduce):
    """Shared frame: resolve the axes, then ``reduce(axis, keepdims)``."""
    reduce(_axes(data, axes, noop), bool(keepdims))


def _lowest(dtype):
    """The identity of max: what reducing an empty set gives."""
    if dtype == np.bool_:
        return False
    return -np.inf if np.issubdtype(dtype, np.inexact) else np.iinfo(dtype).min


def _highest(dtype):
    """The identity of min."""
    if dtype == np.bool_:
        return True
    return np.inf if np.issubdtype(dtype, np.inexact) else np.iinfo(dtype).max


@kernel("ReduceSum")
def reduce_sum(data, axes=None, *, out, keepdims=1, noop_with_empty_axes=0):
    _reduce(data, out, axes, keepdims, noop_with_empty_axes, lambda a, k: np.sum(data, a, keepdims=k, out=out))


@kernel("ReduceProd")
def reduce_prod(data, axes=None, *, out, keepdims=1, noop_with_empty_axes=0):
    _reduce(data, out, axes, keepdims, noop_with_empty_axes, lambda a, k: np.prod(data, a, keepdims=k, out=out))


@kernel("ReduceMax")
def reduce_max(data, axes=None, *, out, keepdims=1, noop_with_empty_axes=0):
    def run(axis, keep):
        np.maximum.reduce(data, axis, keepdims=keep, out=out, initial=_lowest(data.dtype))

    _reduce(data, out, axes, keepdims, noop_with_empty_axes, run)


@kernel("ReduceMin")
def reduce_min(data, axes=None, *, out, keepdims=1, noop_with_empty_axes=0):
    def run(axis, keep):
        np.minimum.reduce(data, axis, keepdims=keep, out=out, initial=_highest(data.dtype))

    _reduce(data, out, axes, keepdims, noop_with_empty_axes, run)


@kernel("ReduceMean")
def reduce_mean(data, axes=None, *, out, keepdims=1, noop_with_empty_axes=0):
    """Integer means truncate toward zero (computed in float64, as the reference does)."""

    def run(axis, keep):
        with np.errstate(invalid="ignore", divide="ignore"):
            if out.dtype in (np.float32, np.float64) and data.dtype == out.dtype and axis != ():
                # Sum, then divide in place: np.mean's own division into `out` is buffered
                # beside the arena (128 KiB over a 4 MiB tensor).
                np.add.reduce(data, axis, keepdims=keep, out=out)
                count = data.size if axis is None else math.prod(data.shape[a] for a in axis)
                np.divide(out, out.dtype.type(count), out=out)
            elif np.issubdtype(out.dtype, np.inexact):
                np.mean(data, axis, keepdims=keep, out=out)
            else:
                np.copyto(out, np.mean(data, axis, keepdims=keep), casting="unsafe")

    _reduce(data, out, axes, keepdims, noop_with_empty_axes, run)


def _input_sized(inputs, outputs, **_):
    return scratch_bytes((inputs[0].shape, inputs[0].dtype))


def _mapped_sum(op_type, data, ws, map_into):
    """sum(map(data)) needs map(data) somewhere: in the workspace."""
    mapped = Scratch(ws, op_type).take(data.shape, data.dtype)
    map_into(data, mapped)
    return mapped


@kernel("ReduceSumSquare", workspace=_input_sized)
def reduce_sum_square(data, axes=None, *, out, ws, keepdims=1, noop_with_empty_axes=0):
    def run(axis, keep):
        np.sum(_mapped_sum("ReduceSumSquare", data, ws, np.square), axis, keepdims=keep, out=out)

    _reduce(data, out, axes, keepdims, noop_with_empty_axes, run)


@kernel("ReduceL1", workspace=_input_sized)
def reduce_l1(data, axes=None, *, out, ws, keepdims=1, noop_with_empty_axes=0):
    def run(axis, keep):
        np.sum(_mapped_sum("ReduceL1", data, ws, np.abs), axis, keepdims=keep, out=out)

    _reduce(data, out, axes, keepdims, noop_with_empty_axes, run)


@kernel("ReduceL2", workspace=_input_sized)
def reduce_l2(data, axes=None, *, out, ws, keepdims=1, noop_with_empty_axes=0):
    def run(axis, keep):
        np.sum(_mapped_sum("ReduceL2", data, ws, np.square), axis, keepdims=keep, out=out)
        np.sqrt(out, out=out, casting="unsafe")

    _reduce(data, out, axes, keepdims, noop_with_empty_axes, run)


@kernel("ReduceLogSumExp", workspace=_input_sized)
def reduce_log_sum_exp(data, axes=None, *, out, ws, keepdims=1, noop_with_empty_axes=0):
    """log(sum(exp(x))), shifted by the max so exp never overflows."""

    def run(axis, keep):
        peak = np.maximum.reduce(data, axis, keepdims=True, initial=_lowest(data.dtype))
        peak[~np.isfinite(peak)] = 0
        shifted = Scratch(ws, "ReduceLogSumExp").take(data.shape, data.dtype)
        np.subtract(data, peak, out=shifted)
        np.exp(shifted, out=shifted)
        with np.errstate(divide="ignore"):
            np.log(np.sum(shifted, axis, keepdims=keep), out=out)
        np.add(out, peak if keep else peak.reshape(out.shape), out=out)

    _reduce(data, out, axes, keepdims, noop_with_empty_axes, run)


def _arg(pick, data, out, axis, keepdims, select_last_index):
    axis = axis + data.ndim if axis < 0 else axis
    if not select_last_index:
        pick(data, axis, keepdims=bool(keepdims), out=out)
        return
    # numpy returns the first extreme: search the reversed axis and map the index back.
    pick(np.flip(data, axis), axis, keepdims=bool(keepdims), out=out)
    np.subtract(data.shape[axis] - 1, out, out=out)


@kernel("ArgMax")
def arg_max(data, *, out, axis=0, keepdims=1, select_last_index=0):
    _arg(np.argmax, data, out, axis, keepdims, select_last_index)


@kernel("ArgMin")
def arg_min(data, *, out, axis=0, keepdims=1, select_last_index=0):
    _arg(np.argmin, data, out, axis, keepdims, select_last_index)
