"""BatchNormalization, LayerNormalization, InstanceNormalization and LRN.

Statistics are small (one value per channel or per normalised row) and computed in at
least float32; the full-size work happens in the output: centre into `out`, sum squares
with einsum (which needs no squared temporary), then scale and shift in place. A float32
LayerNormalization or RMSNormalization with a scale per normalised element runs as one
compiled loop per row instead (`runtime.kernels.jit_norm`).
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import jit_norm, kernel
from runtime.kernels._scratch import Scratch, scratch_bytes, small_ufunc_buffers, units_within


def _stat_dtype(dtype: np.dtype) -> np.dtype:
    return np.promote_types(dtype, np.float32)


def _standardize(x2: np.ndarray, y2: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """Write ``(x2 - mean) / sqrt(var + epsilon)`` per row of the 2-D `x2` into `y2`;
    return (mean, 1 / std) per row."""
    stat = _stat_dtype(x2.dtype)
    mean = x2.mean(axis=1, dtype=stat)
    np.subtract(x2, mean[:, None].astype(y2.dtype), out=y2)
    var = np.einsum("ij,ij->i", y2, y2, dtype=stat) / max(x2.shape[1], 1)
    inv_std = 1.0 / np.sqrt(var + epsilon)
    y2 *= inv_std[:, None].astype(y2.dtype)
    return mean, inv_std


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.reshape((-1,) + (1,) * (ndim - 2))


@kernel("BatchNormalization", outputs="many", inplace=(0,))
@small_ufunc_buffers()
def batch_normalization(
    x, scale, bias, mean, var, *, out, epsilon=1e-5, momentum=0.9, training_mode=0, spatial=1, is_test=0,
    consumed_inputs=None,
):  # fmt: skip
    # spatial, is_test and consumed_inputs belong to opsets before 9; inference ignores them.
    y = out[0]
    if training_mode:
        # Normalise with this batch's statistics; report running statistics updated by momentum.
        batch, channels = x.shape[:2]
        x3 = x.reshape(batch, channels, -1)
        stat = _stat_dtype(x.dtype)
        count = max(x3.shape[0] * x3.shape[2], 1)
        batch_mean = x3.sum(axis=(0, 2), dtype=stat) / count
        np.subtract(x, _per_channel(batch_mean.astype(x.dtype), x.ndim), out=y)
        y3 = y.reshape(batch, channels, -1)
        batch_var = np.einsum("ncs,ncs->c", y3, y3, dtype=stat) / count
        factor = scale / np.sqrt(batch_var + epsilon)
        y *= _per_channel(factor.astype(y.dtype), x.ndim)
        y += _per_channel(bias.astype(y.dtype), x.ndim)
        if len(out) > 1 and out[1] is not None:
            out[1][...] = mean * momentum + batch_mean * (1 - momentum)
        if len(out) > 2 and out[2] is not None:
            out[2][...] = var * momentum + batch_var * (1 - momentum)
        return
    factor = (scale / np.sqrt(var.astype(_stat_dtype(var.dtype)) + epsilon)).astype(y.dtype)
    shift = (bias - mean * factor).astype(y.dtype)
    np.multiply(x, _per_channel(factor, x.ndim), out=y)
    y += _per_channel(shift, x.ndim)


def _layer_rows(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    """(rows, normalised elements per row)."""
    axis = axis + len(shape) if axis < 0 else axis
    return math.prod(shape[:axis]), math.prod(shape[axis:])


def layer_normalization_prepare(inputs, outputs, **_) -> None:
    """Compiles the float32 loop, so that no run compiles."""
    if inputs[0].dtype == np.float32:
        jit_norm.prepared()


def layer_normalization_workspace(inputs, outputs, *, axis=-1, **_) -> int:
    """Bytes of scratch."""
    x = inputs[0]
    rows, cols = _layer_rows(tuple(x.shape), axis)
    stat = _stat_dtype(x.dtype)
    return scratch_bytes(((rows, 1), stat), ((rows, 1), stat), ((cols, 1), stat))


def _row_means(x2: np.ndarray, mean: np.ndarray, ones: np.ndarray) -> None:
    """Row means of `x2` into `mean` (rows, 1): as a matrix-vector product through BLAS (a
    third of numpy's reduction time on 384-wide rows) when the dtypes allow it."""
    if x2.dtype == mean.dtype and x2.shape[1]:
        ones.fill(1)
        np.matmul(x2, ones, out=mean)
    else:
        np.add.reduce(x2, axis=1, dtype=mean.dtype, out=mean[:, 0])
    np.multiply(mean, mean.dtype.type(1 / max(x2.shape[1], 1)), out=mean)


@kernel(
    "LayerNormalization",
    outputs="many",
    workspace=layer_normalization_workspace,
    prepare=layer_normalization_prepare,
)
def layer_normalization(x, scale, bias=None, *, out, ws=None, axis=-1, epsilon=1e-5, stash_type=1):
    """Mean and 1 / std per row in the workspace (in at least float32); `out` is centred,
    scaled per row, then by `scale` and shifted by `bias` in place."""
    if len(out) == 1 and jit_norm.layer_norm_last_axis(x, out[0], scale, bias, ws, axis, epsilon):
        return
    _layer_normalization(x, scale, bias, out, ws, axis, epsilon)


@small_ufunc_buffers()
def _layer_normalization(x, scale, bias, out, ws, axis, epsilon) -> None:
    y = out[0]
    rows, cols = _layer_rows(x.shape, axis)
    stat = _stat_dtype(x.dtype)
    scratch = Scratch(ws, "LayerNormalization")
    mean, inv_std = scratch.take((rows, 1), stat), scratch.take((rows, 1), stat)
    x2, y2 = x.reshape(rows, cols), y.reshape(rows, cols)
    loop = jit_norm.prepared() if jit_norm.usable(x, y, scale, bias, cols) else None
    if loop is not None:
        flat_scale = scale.reshape(cols)
        flat_bias = flat_scale if bias is None else bias.reshape(cols)
        loop(x2, y2, flat_scale, flat_bias, bias is not None, mean[:, 0], inv_std[:, 0], float(epsilon))
    else:
        ones = scratch.take((cols, 1), stat)
        _layer_norm_numpy(x2, y2, x, y, scale, bias, mean, inv_std, ones, epsilon)
    if len(out) > 1 and out[1] is not None:
        out[1][...] = mean.reshape(out[1].shape)
    if len(out) > 2 and out[2] is not None:
        out[2][...] = inv_std.reshape(out[2].shape)


def _layer_norm_numpy(x2, y2, x, y, scale, bias, mean, inv_std, ones, epsilon) -> None:
    """LayerNormalization through numpy: centre into the output, then scale rows in place."""
    rows, cols = x2.shape
    stat = mean.dtype
    _row_means(x2, mean, ones)
    np.subtract(x2, mean, out=y2, casting="same_kind")
    np.einsum("ij,ij->i", y2, y2, dtype=stat, out=inv_std[:, 0])
    t = stat.type
    np.multiply(inv_std, t(1 / max(cols, 1)), out=inv_std)
    np.add(inv_std, t(epsilon), out=inv_std)
    np.sqrt(inv_std, out=inv_std)
    np.reciprocal(inv_std, out=inv_std)
    np.multiply(y2, inv_std, out=y2, casting="same_kind")
    if scale.size == cols and bias is None or bias is not None and bias.size == cols == scale.size:
        y2 *= scale.reshape(cols)
        if bias is not None:
            y2 += bias.reshape(cols)
    else:  # scale or bias broadcast over the normalised axes
        y *= scale
        if bias is not None:
            y += bias


@kernel("InstanceNormalization")
@small_ufunc_buffers()
def instance_normalization(x, scale, bias, *, out, epsilon=1e-5):
    rows = x.shape[0] * x.shape[1]
    _standardize(x.reshape(rows, -1), out.reshape(rows, -1), epsilon)
    out *= _per_channel(scale.astype(out.dtype), x.ndim)
    out += _per_channel(bias.astype(out.dtype), x.ndim)


# Bytes of output channels computed per chunk of LRN (at least one channel): the scratch
# holds a chunk's squares (with the window's halo) and its denominators, not the tensor's.
LRN_CHUNK_BYTES = 256 * 1024


def _lrn_chunk(shape: tuple[int, ...], itemsize: int) -> int:
    """Channels per chunk."""
    per_channel = int(np.prod((shape[0], *shape[2:]), dtype=np.int64)) * itemsize
    return units_within(LRN_CHUNK_BYTES, per_channel, shape[1])


def _lrn_blocks(shape: tuple[int, ...], dtype: np.dtype, size: int) -> list[tuple[tuple[int, ...], np.dtype]]:
    k = _lrn_chunk(shape, np.dtype(dtype).itemsize)
    return [((shape[0], k + size - 1, *shape[2:]), dtype), ((shape[0], k, *shape[2:]), dtype)]


def lrn_workspace(inputs, outputs, *, size, **_) -> int:
    x = inputs[0]
    return scratch_bytes(*_lrn_blocks(tuple(x.shape), x.dtype, size))


@kernel("LRN", workspace=lrn_workspace, inplace=(0,))
@small_ufunc_buffers()
def lrn(x, *, out, ws, size, alpha=0.0001, beta=0.75, bias=1.0):
    # A chunk of channels at a time: the squares of the chunk and of the window's halo
    # around it, then the denominators, then out = x / denominators. The squares of the
    # last channels before the next chunk are kept from this one, so `out` may be `x`'s
    # own memory (a channel is overwritten only after every window needing it is summed).
    before = (size - 1) // 2
    after = size - 1 - before
    channels = x.shape[1]
    (sq_shape, dtype), (den_shape, _) = _lrn_blocks(tuple(x.shape), x.dtype, size)
    scratch = Scratch(ws, "LRN")
    squares, denominators = scratch.take(sq_shape, dtype), scratch.take(den_shape, dtype)
    k = den_shape[1]
    squares[:, :before] = 0  # channels below 0
    for j in range(0, channels, k):
        m = min(k, channels - j)
        hi = min(channels, j + m + after)
        np.square(x[:, j:hi], out=squares[:, before : before + hi - j])
        squares[:, before + hi - j : before + m + after] = 0  # channels past the last
        d = denominators[:, :m]
        np.copyto(d, squares[:, :m])
        for i in range(1, size):
            d += squares[:, i : i + m]
        d *= d.dtype.type(alpha / size)
        d += d.dtype.type(bias)
        d **= d.dtype.type(beta)
        # The squares of channels [j + m - before, j + m): the next chunk's lower halo.
        # Channel by channel, front to back: each source m + i lies past every channel written
        # before it, so no copy of the (possibly overlapping) block is made beside the arena.
        for i in range(before):
            np.copyto(squares[:, i], squares[:, m + i])
        np.divide(x[:, j : j + m], d, out=out[:, j : j + m])


def rms_normalization_prepare(inputs, outputs, **_) -> None:
    """Compiles the float32 loop, so that no run compiles."""
    if inputs[0].dtype == np.float32:
        jit_norm.prepared("rms_norm_loop")


@kernel("RMSNormalization", prepare=rms_normalization_prepare)
@small_ufunc_buffers()
def rms_normalization(x, scale, *, out, ws=None, axis=-1, epsilon=1e-5, stash_type=1):
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    x2, y2 = x.reshape(rows, -1), out.reshape(rows, -1)
    if jit_norm.usable(x, out, scale, None, x2.shape[1], "rms_norm_loop"):
        loop = jit_norm.prepared("rms_norm_loop")
        assert loop is not None
        loop(x2, y2, scale.reshape(-1), float(epsilon))
        return
    stat = _stat_dtype(x.dtype)
    mean_square = np.einsum("ij,ij->i", x2, x2, dtype=stat) / max(x2.shape[1], 1)
    np.multiply(x2, (1.0 / np.sqrt(mean_square + epsilon))[:, None].astype(out.dtype), out=y2)
    out *= scale


@kernel("GroupNormalization")
@small_ufunc_buffers()
def group_normalization(x, scale, bias, *, out, num_groups, epsilon=1e-5, stash_type=1):
    batch, channels = x.shape[:2]
    rows = batch * num_groups
    _standardize(x.reshape(rows, -1), out.reshape(rows, -1), epsilon)
    if scale.size != channels:
        # Opset 18 gives one scale and bias per group; opset 21 one per channel.
        scale, bias = np.repeat(scale, channels // num_groups), np.repeat(bias, channels // num_groups)
    out *= _per_channel(scale.astype(out.dtype), x.ndim)
    out += _per_channel(bias.astype(out.dtype), x.ndim)


def _sum_squares(a: np.ndarray, axes: tuple[int, ...], dtype) -> np.ndarray:
    """Sum of a * a over `axes`, kept as size-1 axes, through einsum: no squared temporary."""
    letters = "abcdefghijklmnopqrstuvwxyz"[: a.ndim]
    kept = "".join(c for i, c in enumerate(letters) if i not in axes)
    total = np.einsum(f"{letters},{letters}->{kept}", a, a, dtype=dtype)
    return total.reshape([1 if i in axes else n for i, n in enumerate(a.shape)])


@kernel("MeanVarianceNormalization")
@small_ufunc_buffers()
def mean_variance_normalization(x, *, out, axes=(0, 2, 3)):
    # (X - E[X]) / sqrt(E[(X - E[X])^2] + 1e-9) over `axes`, the spec's own tiny epsilon.
    axes = tuple(sorted(a + x.ndim if a < 0 else a for a in axes))
    stat = _stat_dtype(x.dtype)
    count = max(int(np.prod([x.shape[a] for a in axes], dtype=np.int64)), 1)
    mean = x.mean(axis=axes, dtype=stat, keepdims=True)
    np.subtract(x, mean.astype(out.dtype), out=out)
    var = _sum_squares(out, axes, stat) / count
    out /= np.sqrt(var + 1e-9).astype(out.dtype)


def _norm_shape(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return tuple(1 if i == axis else n for i, n in enumerate(shape))


def lp_normalization_workspace(inputs, outputs, *, axis=-1, p=2) -> int:
    """The norms, one per vector along `axis`, in the statistics dtype, and which of them are zero."""
    x = inputs[0]
    shape = _norm_shape(tuple(x.shape), axis % max(len(x.shape), 1))
    return scratch_bytes((shape, _stat_dtype(x.dtype)), (shape, np.bool_))


@kernel("LpNormalization", workspace=lp_normalization_workspace)
@small_ufunc_buffers()
def lp_normalization(x, *, out, ws=None, axis=-1, p=2):
    axis = axis + x.ndim if axis < 0 else axis
    stat = _stat_dtype(x.dtype)
    scratch = Scratch(ws, "LpNormalization")
    norm = scratch.take(_norm_shape(x.shape, axis), stat)
    zero = scratch.take(norm.shape, np.bool_)
    if p == 1:
        np.abs(x, out=out)  # |x| in the output, summed before x / norm overwrites it
        np.add.reduce(out, axis=axis, keepdims=True, dtype=stat, out=norm)
    elif p == 2:
        letters = "abcdefghijklmnopqrstuvwxyz"[: x.ndim]
        kept = letters.replace(letters[axis], "")
        np.einsum(
            f"{letters},{letters}->{kept}",
            x,
            x,
            dtype=stat,
            out=norm.reshape([n for i, n in enumerate(x.shape) if i != axis]),
        )
        np.sqrt(norm, out=norm)
    else:
        raise ValueError(f"LpNormalization: p={p} is not 1 or 2")
    # A zero vector (or one whose squares underflow) is divided by 1, not 0, as onnxruntime does;
    # the mask lives in the workspace too.
    np.equal(norm, 0, out=zero)
    np.copyto(norm, 1, where=zero)
    np.divide(x, norm, out=out, casting="same_kind")
