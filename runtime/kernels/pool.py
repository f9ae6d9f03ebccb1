"""MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool.

The windowed pools walk the kernel offsets: each offset is one strided view of the
(padded) image of the size of the output, combined into the output with an in-place
ufunc, so no window tensor is ever materialised. Padding (and the overhang that ceil_mode
adds at the end of an axis) goes through a padded copy of one image in the workspace,
filled with the lowest value for max and zero for average. With compiled loops on, a float32
2-D MaxPool makes each output row in one compiled pass instead (`runtime.kernels.jit_pool`),
also over its own input, and an AveragePool whose one window is the whole image is BLAS's
matrix-vector product with a row of 1 / plane.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import jit_pool, kernel
from runtime.kernels._scratch import STRIDED_UFUNC_BUFFER, Scratch, scratch_bytes, small_ufunc_buffers
from runtime.kernels.conv import jit_conv
from runtime.kernels.global_pool_bound import bind_global_average
from runtime.kernels.planes import Planes
from runtime.kernels.window import Geometry, pad_into, padded_extent, window_geometry, windows


def _padded_lengths(x_shape, geo: Geometry) -> tuple[int, ...] | None:
    """Per-axis length of the padded image the windows read, or None when `x` serves as is."""
    lengths = padded_extent(x_shape[2:], geo)
    if not any(geo.begin) and all(n <= i for n, i in zip(lengths, x_shape[2:], strict=True)):
        return None
    return lengths


def pool_workspace(
    inputs, outputs, *, kernel_shape, auto_pad="NOTSET", pads=None, strides=None, dilations=None, **_
) -> int:
    x, y = inputs[0], outputs[0]
    geo = window_geometry(x.shape, y.shape, kernel_shape, auto_pad, pads, strides, dilations)
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
        steps = [math.prod(x_spatial[i + 1 :]) for i in range(rank)]
    else:
        steps = [math.prod(x_spatial[:i]) for i in range(rank)]
    flat = np.zeros(geo.out, dtype=np.int64)
    for i in range(rank):
        coord = np.arange(geo.out[i]) * geo.strides[i] + tap[i] * geo.dilations[i] - geo.begin[i]
        flat += (coord * steps[i]).reshape((-1,) + (1,) * (rank - 1 - i))
    return flat


def _tap_range(tap: int, axis: int, geo: Geometry, length: int) -> tuple[int, int]:
    """Output positions [lo, hi) along `axis` whose window reads a real input element (not a pad
    or the ceil_mode overhang) at kernel offset `tap`: position o reads o * stride + tap * dilation - begin."""
    shift = tap * geo.dilations[axis] - geo.begin[axis]
    stride = geo.strides[axis]
    lo = max(0, -(shift // stride)) if shift < 0 else 0
    hi = min(geo.out[axis], (length - 1 - shift) // stride + 1) if length - 1 - shift >= 0 else 0
    return lo, max(lo, hi)


def _pool_axis(src, dst, axis: int, geo: Geometry, ufunc, identity) -> None:
    """Reduce `src` along spatial `axis` (counted from the first spatial axis) into `dst` with
    `ufunc` over the kernel taps: one strided slice per tap, no padded copy. Positions a tap
    misses read pads, which `identity` (lowest value for max, zero for sums) stands for."""
    lead = src.ndim - len(geo.kernel) + axis
    head = (slice(None),) * lead
    length, stride = src.shape[lead], geo.strides[axis]
    ranges = [_tap_range(k, axis, geo, length) for k in range(geo.kernel[axis])]
    first = max(range(len(ranges)), key=lambda k: ranges[k][1] - ranges[k][0])  # the widest tap starts
    for k in [first] + [k for k in range(len(ranges)) if k != first]:
        lo, hi = ranges[k]
        start = lo * stride + k * geo.dilations[axis] - geo.begin[axis]
        reads = src[(*head, slice(start, start + (hi - lo - 1) * stride + 1, stride))] if hi > lo else None
        if k == first:
            dst[(*head, slice(0, lo))] = identity
            dst[(*head, slice(hi, None))] = identity
            if reads is not None:
                np.copyto(dst[(*head, slice(lo, hi))], reads)
        elif reads is not None:
            part = dst[(*head, slice(lo, hi))]
            ufunc(part, reads, out=part)


def dense_first(x_shape, geo: Geometry) -> bool:
    """Whether the last axis is reduced at every input position (stride 1) over the flattened
    image, the stride applied by the next axis's reads: contiguous loops instead of strided
    ones. Needs a next axis, every window to start inside the input row, few border columns
    (each is recomputed on its own) and windows that use most columns (stride-th ones)."""
    width, out, stride = x_shape[-1], geo.out[-1], geo.strides[-1]
    shifts = [k * geo.dilations[-1] - geo.begin[-1] for k in range(geo.kernel[-1])]
    border = max(0, -min(shifts)) + max(0, max(shifts))
    return len(geo.kernel) > 1 and (out - 1) * stride <= width - 1 and border <= 4 and 2 * out * stride >= width


def _separable_shapes(x_shape, geo: Geometry) -> list[tuple[int, ...]]:
    """Shapes of the intermediate results of one image, the last spatial axis reduced first."""
    shape, shapes = list(x_shape[1:]), []
    for axis in reversed(range(1, len(geo.kernel))):
        shape[1 + axis] = geo.out[axis]
        shapes.append(tuple(shape))
    if shapes and dense_first(x_shape, geo):
        shapes[0] = tuple(x_shape[1:])  # every input column; the next step reads every stride-th
    return shapes


def _pool_last_axis_dense(src, dense, geo: Geometry, ufunc, identity) -> None:
    """``dense[..., j]`` = the reduction over the taps of the window starting at input column
    j - begin (stride 1), for every column j of the contiguous `src`. Each tap is one call over
    the flattened image; the few border columns whose taps wrap into a neighbouring row are
    then recomputed from their valid taps alone."""
    width = src.shape[-1]
    shifts = [k * geo.dilations[-1] - geo.begin[-1] for k in range(geo.kernel[-1])]
    flat_src, flat_dst = src.reshape(-1), dense.reshape(-1)
    size = flat_src.size
    for i, shift in enumerate(sorted(shifts, key=abs)):  # the widest tap first: it initialises
        a, b = max(0, -shift), size - max(0, shift)
        if i == 0:
            np.copyto(flat_dst[a:b], flat_src[a + shift : b + shift])
        else:
            ufunc(flat_dst[a:b], flat_src[a + shift : b + shift], out=flat_dst[a:b])
    left, right = max(0, -min(shifts)), max(0, max(shifts))
    for j in sorted(set(range(min(left, width))) | set(range(max(width - right, 0), width))):
        valid = [shift for shift in shifts if 0 <= j + shift < width]
        column = dense[..., j]
        if not valid:
            column[...] = identity
            continue
        np.copyto(column, src[..., j + valid[0]])
        for shift in valid[1:]:
            ufunc(column, src[..., j + shift], out=column)


def _separable_buffers(x_shape, geo: Geometry) -> list[int]:
    """Elements of the two buffers the intermediate results alternate between (each step reads
    one and writes the other), sized for the largest result each holds."""
    sizes = [0, 0]
    for step, shape in enumerate(_separable_shapes(x_shape, geo)):
        sizes[step % 2] = max(sizes[step % 2], math.prod(shape))
    return [s for s in sizes if s]


def _window_bytes(x_shape, geo: Geometry, dtype) -> int:
    """Workspace of the tap-by-tap path: a padded copy of one image, when it needs one."""
    lengths = _padded_lengths(x_shape, geo)
    return 0 if lengths is None else scratch_bytes(((x_shape[1], *lengths), dtype))


def separable_fits(x_shape, geo: Geometry, dtype) -> bool:
    """Reduce axis by axis when that takes no more workspace than the tap-by-tap path (whose
    padded copy is as large): faster, and never a larger arena."""
    separable = scratch_bytes(*(((n,), dtype) for n in _separable_buffers(x_shape, geo)))
    return separable <= _window_bytes(x_shape, geo, dtype)


def reduce_workspace(
    inputs, outputs, *, kernel_shape, auto_pad="NOTSET", pads=None, strides=None, dilations=None, **_
) -> int:
    x, y = inputs[0], outputs[0]
    geo = window_geometry(x.shape, y.shape, kernel_shape, auto_pad, pads, strides, dilations)
    if separable_fits(x.shape, geo, x.dtype):
        return scratch_bytes(*(((n,), x.dtype) for n in _separable_buffers(x.shape, geo)))
    return _window_bytes(x.shape, geo, x.dtype)


def _reduce_windows(x, y, geo: Geometry, scratch: Scratch, ufunc, identity) -> None:
    """``y[n, c, o...] = ufunc`` over window o of ``x[n, c]``, pads counting as `identity`."""
    if _whole_image(x, geo):
        # One window over the whole image (ResNet's final 7x7 average): one contiguous
        # reduction per channel, where the axis-by-axis path makes 2k short strided calls.
        ufunc.reduce(x.reshape(*x.shape[:2], -1), axis=2, out=y.reshape(x.shape[:2]))
        return
    if separable_fits(x.shape, geo, x.dtype):
        _pool_separable(x, y, geo, scratch, ufunc, identity)
        return
    taps = list(np.ndindex(*geo.kernel))
    for n, win in _images(x, geo, scratch, identity):
        target = y[n]
        np.copyto(target, win[(Ellipsis, *taps[0])])
        for tap in taps[1:]:
            ufunc(target, win[(Ellipsis, *tap)], out=target)


def _whole_image(x, geo: Geometry) -> bool:
    """A single unpadded, undilated window exactly the size of the (contiguous) image."""
    return (
        x.flags.c_contiguous
        and all(o == 1 for o in geo.out)
        and not geo.padded
        and geo.extent == tuple(x.shape[2:])
        and geo.kernel == geo.extent
    )


def _pool_separable(x, y, geo: Geometry, scratch: Scratch, ufunc, identity) -> None:
    """A max or sum over each window as one reduction per spatial axis (a window is the
    product of per-axis ranges): k strided ufunc calls per axis instead of k^rank."""
    shapes = _separable_shapes(x.shape, geo)
    buffers = [scratch.take((n,), x.dtype) for n in _separable_buffers(x.shape, geo)]
    rank = len(geo.kernel)
    for n in range(x.shape[0]):
        src = x[n]
        for step, axis in enumerate(reversed(range(rank))):
            if axis == 0:
                dst = y[n]
            else:
                size = math.prod(shapes[step])
                dst = buffers[step % 2][:size].reshape(shapes[step])
            if step == 0 and dense_first(x.shape, geo) and src.flags.c_contiguous:
                _pool_last_axis_dense(src, dst, geo, ufunc, identity)
                # Window o of the last axis starts at input column o * stride - begin.
                src = dst[..., : (geo.out[-1] - 1) * geo.strides[-1] + 1 : geo.strides[-1]]
                continue
            _pool_axis(src, dst, axis, geo, ufunc, identity)
            src = dst


def max_pool_workspace(inputs, outputs, **attrs) -> int:
    if len(outputs) > 1 and outputs[1] is not None:
        return pool_workspace(inputs, outputs, **attrs)
    own = reduce_workspace(inputs, outputs, **attrs)
    geo = _geometry(inputs[0], outputs[0], attrs)
    if not _compiled_max(inputs[0].shape, inputs[0].dtype, geo):
        return own
    # the numpy route's too: a call with arrays the loop does not take falls back to it
    return max(own, scratch_bytes(((_row_length(geo),), jit_pool.DTYPE)))


def _geometry(x, y, attrs) -> Geometry:
    return window_geometry(
        x.shape, y.shape, attrs["kernel_shape"], attrs.get("auto_pad", "NOTSET"), attrs.get("pads"),
        attrs.get("strides"), attrs.get("dilations"),
    )  # fmt: skip


def _compiled_max(x_shape, dtype, geo: Geometry) -> bool:
    """Whether a MaxPool without indices runs by `jit_pool.max_pool`: loops on, float32, 2-D."""
    return jit_pool.max_pool is not None and np.dtype(dtype) == jit_pool.DTYPE and len(x_shape) == 4


def _row_length(geo: Geometry) -> int:
    return jit_pool.row_length(geo.out[1], geo.kernel[1], geo.strides[1], geo.dilations[1])


def _rows_in_order(attrs, inputs, out) -> bool:
    """MaxPool's `Planes.direct`: the compiled loop makes a plane's output rows in order, each
    right after reading its window's input rows, so over its own input it overwrites only rows
    already read when each output row of a plane ends no later than the first input row the
    next output row reads starts (checked on the first plane, where the output lies furthest
    into the input: each plane after it starts P_in - P_out bytes further ahead)."""
    x, y = inputs[0], out
    if x is None or y is None or len(x.shape) != 4 or len(y.shape) != 4:
        return False
    geo = _geometry(x, y, attrs)
    if not _compiled_max(x.shape, x.dtype, geo) or math.prod(y.shape[2:]) > math.prod(x.shape[2:]):
        return False
    (out_h, out_w), width = geo.out, x.shape[3]
    first_read = [max(0, oy * geo.strides[0] - geo.begin[0]) * width for oy in range(out_h)]
    return all((oy + 1) * out_w <= first_read[oy + 1] for oy in range(out_h - 1))


def max_pool_prepare(*_: object, **__: object) -> None:
    """MaxPool's prepare hook: its compiled loop is compiled when a session prepares."""
    jit_pool.warm()


@kernel(
    "MaxPool", workspace=max_pool_workspace, outputs="many", planes=Planes(direct=_rows_in_order),
    prepare=max_pool_prepare,
)  # fmt: skip
@small_ufunc_buffers(STRIDED_UFUNC_BUFFER)
def max_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None,
    storage_order=0, strides=None,
):  # fmt: skip
    y, indices = out[0], out[1] if len(out) > 1 else None
    geo = window_geometry(x.shape, y.shape, kernel_shape, auto_pad, pads, strides, dilations)
    scratch = Scratch(ws, "MaxPool")
    if indices is None and _compiled_max(x.shape, x.dtype, geo) and jit_conv.usable(x, y):
        row = scratch.take((_row_length(geo),), x.dtype)
        for n in range(x.shape[0]):
            jit_pool.max_pool(x[n], y[n], row, *geo.kernel, *geo.strides, *geo.dilations, *geo.begin)
        return
    if indices is None:
        _reduce_windows(x, y, geo, scratch, np.maximum, _lowest(x.dtype))
        return
    taps = list(np.ndindex(*geo.kernel))
    better = scratch.take(y.shape[1:], np.bool_)
    for n, win in _images(x, geo, scratch, _lowest(x.dtype)):
        target = y[n]
        np.copyto(target, win[(Ellipsis, *taps[0])])
        where = indices[n]
        np.copyto(where, _tap_positions(geo, taps[0], x.shape[2:], storage_order))
        for tap in taps[1:]:
            view = win[(Ellipsis, *tap)]
            np.greater(view, target, out=better)  # strict: the first maximum keeps its index
            np.copyto(target, view, where=better)
            np.copyto(where, _tap_positions(geo, tap, x.shape[2:], storage_order), where=better)
    if indices is not None:
        # Indices count over the whole tensor: add each (image, channel)'s offset.
        per_channel = math.prod(x.shape[2:])
        base = np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * per_channel
        indices += base.reshape(x.shape[:2] + (1,) * len(geo.out))


def _axis_counts(geo: Geometry, x_spatial, include_pad: bool, dtype) -> list[np.ndarray]:
    """Per axis, how many elements each window position averages: those inside the input, or
    inside the input and its explicit pads (never the ceil_mode overhang beyond them)."""
    counts = []
    for i, size in enumerate(x_spatial):
        lo, hi = (-geo.begin[i], size + geo.end[i]) if include_pad else (0, size)
        starts = np.arange(geo.out[i]) * geo.strides[i] - geo.begin[i]
        taps = starts[:, None] + np.arange(geo.kernel[i]) * geo.dilations[i]
        counts.append(((taps >= lo) & (taps < hi)).sum(axis=1).astype(dtype))
    return counts


def _divide_by_counts(out: np.ndarray, geo: Geometry, x_spatial, include_pad: bool, plane: np.ndarray) -> None:
    """Divide window sums by their counts in one pass: a window's count is the product of its
    per-axis counts, written into `plane` (the output's spatial shape, from the workspace)."""
    counts = _axis_counts(geo, x_spatial, include_pad, out.dtype)
    if all(c.min() == c.max() for c in counts):
        out /= out.dtype.type(math.prod(int(c[0]) for c in counts))
        return
    rank = len(counts)
    plane[...] = 1
    for i, c in enumerate(counts):
        plane *= c.reshape((-1,) + (1,) * (rank - 1 - i))
    out /= plane


def average_pool_workspace(inputs, outputs, **attrs) -> int:
    x, y = inputs[0], outputs[0]
    own = reduce_workspace(inputs, outputs, **attrs) + scratch_bytes((y.shape[2:], x.dtype))
    return max(own, scratch_bytes(((_averaging_row(x),), x.dtype)))  # the whole image's row


@kernel("AveragePool", workspace=average_pool_workspace, planes=True)
@small_ufunc_buffers(STRIDED_UFUNC_BUFFER)
def average_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
    pads=None, strides=None,
):  # fmt: skip
    geo = window_geometry(x.shape, out.shape, kernel_shape, auto_pad, pads, strides, dilations)
    scratch = Scratch(ws, "AveragePool")
    if _whole_image(x, geo) and _averaging_row(x):
        # One window over the whole image (ResNet's last 7 x 7): BLAS's matrix-vector product
        # with a row of 1 / plane, ten times faster than a sum over 49-long rows then a division.
        plane = math.prod(x.shape[2:])
        row = scratch.take((plane,), x.dtype)
        row.fill(1 / plane)
        np.matmul(x.reshape(*x.shape[:2], plane), row, out=out.reshape(x.shape[:2]))
        return
    _reduce_windows(x, out, geo, scratch, np.add, 0)
    plane = scratch.take(out.shape[2:], x.dtype)
    _divide_by_counts(out, geo, x.shape[2:], bool(count_include_pad), plane)


def lp_pool_workspace(inputs, outputs, **attrs) -> int:
    x, y = inputs[0], outputs[0]
    return pool_workspace(inputs, outputs, **attrs) + scratch_bytes((y.shape[1:], x.dtype))


@kernel("LpPool", workspace=lp_pool_workspace)
@small_ufunc_buffers()
def lp_pool(
    x, *, out, ws, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, p=2, pads=None, strides=None,
):  # fmt: skip
    # (sum over the window of |x|^p)^(1/p); pads add nothing to the sum.
    geo = window_geometry(x.shape, out.shape, kernel_shape, auto_pad, pads, strides, dilations)
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


def _averaging_row(x) -> int:
    """Elements of the row of 1 / plane size the average is a matrix-vector product with
    (floats only), or 0 for the reduction."""
    return math.prod(x.shape[2:]) if x.dtype in (np.float32, np.float64) else 0


def global_average_workspace(inputs, outputs, **_) -> int:
    x = inputs[0]
    return scratch_bytes(((_averaging_row(x),), x.dtype)) if _averaging_row(x) else 0


@kernel("GlobalAveragePool", planes=True, workspace=global_average_workspace, bind=bind_global_average)
@small_ufunc_buffers()
def global_average_pool(x, *, out, ws=None):
    rows = out.reshape(x.shape[:2])
    plane = max(math.prod(x.shape[2:]), 1)
    if _averaging_row(x) and x.flags.c_contiguous:
        # BLAS's matrix-vector product against a row of 1 / plane: three to five times faster
        # than a sum reduction then a division (SE blocks average maps of up to 112 x 112).
        row = Scratch(ws, "GlobalAveragePool").take((plane,), x.dtype)
        row.fill(1 / plane)
        np.matmul(x.reshape(*x.shape[:2], plane), row, out=rows)
        return
    # Sum over one flattened spatial axis, then scale: np.mean over several axes buffers ~17 KB.
    np.add.reduce(x.reshape(*x.shape[:2], -1), axis=2, out=rows)
    rows /= rows.dtype.type(plane)


@kernel("GlobalMaxPool", planes=True)
@small_ufunc_buffers()
def global_max_pool(x, *, out):
    np.maximum.reduce(x.reshape(*x.shape[:2], -1), axis=2, out=out.reshape(x.shape[:2]))
