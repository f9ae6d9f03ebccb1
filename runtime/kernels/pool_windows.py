"""The numpy loops of the windowed pools (`runtime.kernels.pool_routes` runs them as routes).

Each kernel offset is one strided view of the (padded) image of the size of the output,
combined into the output with an in-place ufunc, so no window tensor is ever materialised
(`reduce_taps`). Padding (and the overhang that ceil_mode adds at the end of an axis) goes
through a padded copy of one image in the workspace, filled with the lowest value for max and
zero for sums. Where it takes no more workspace, a window is reduced one axis at a time
instead (`pool_separable`); a window over the whole image is one reduction per channel
(`reduce_whole`).
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.window import Geometry, pad_into, padded_extent, windows


def padded_lengths(x_shape, geo: Geometry) -> tuple[int, ...] | None:
    """Per-axis length of the padded image the windows read, or None when `x` serves as is."""
    lengths = padded_extent(x_shape[2:], geo)
    if not any(geo.begin) and all(n <= i for n, i in zip(lengths, x_shape[2:], strict=True)):
        return None
    return lengths


def lowest(dtype: np.dtype):
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def images(x, geo: Geometry, scratch: Scratch, fill):
    """Yield (n, window view) per image, padding through the workspace when needed."""
    lengths = padded_lengths(x.shape, geo)
    padded = None if lengths is None else scratch.take((x.shape[1], *lengths), x.dtype)
    for n in range(x.shape[0]):
        src = x[n]
        if padded is not None:
            pad_into(padded, src, geo, fill)
            src = padded
        yield n, windows(src, geo)


def tap_positions(geo: Geometry, tap: tuple[int, ...], x_spatial, storage_order: int) -> np.ndarray:
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


def separable_buffers(x_shape, geo: Geometry) -> list[int]:
    """Elements of the two buffers the intermediate results alternate between (each step reads
    one and writes the other), sized for the largest result each holds."""
    sizes = [0, 0]
    for step, shape in enumerate(_separable_shapes(x_shape, geo)):
        sizes[step % 2] = max(sizes[step % 2], math.prod(shape))
    return [s for s in sizes if s]


def window_bytes(x_shape, geo: Geometry, dtype) -> int:
    """Workspace of the tap-by-tap path: a padded copy of one image, when it needs one."""
    lengths = padded_lengths(x_shape, geo)
    return 0 if lengths is None else scratch_bytes(((x_shape[1], *lengths), dtype))


def separable_bytes(x_shape, geo: Geometry, dtype) -> int:
    """Workspace of the axis-by-axis loop (`pool_separable`): its two alternating buffers."""
    return scratch_bytes(*(((n,), dtype) for n in separable_buffers(x_shape, geo)))


def separable_fits(x_shape, geo: Geometry, dtype) -> bool:
    """Reduce axis by axis when that takes no more workspace than the tap-by-tap path (whose
    padded copy is as large): faster, and never a larger arena."""
    return separable_bytes(x_shape, geo, dtype) <= window_bytes(x_shape, geo, dtype)


def reduce_taps(x, y, geo: Geometry, scratch: Scratch, ufunc, identity) -> None:
    """``y[n, c, o...] = ufunc`` over window o of ``x[n, c]``, pads counting as `identity`: one
    strided view per kernel tap over each image (padded through the workspace when it must be)."""
    taps = list(np.ndindex(*geo.kernel))
    for n, win in images(x, geo, scratch, identity):
        target = y[n]
        np.copyto(target, win[(Ellipsis, *taps[0])])
        for tap in taps[1:]:
            ufunc(target, win[(Ellipsis, *tap)], out=target)


def reduce_whole(x, y, geo: Geometry, scratch: Scratch, ufunc, identity) -> None:
    """One window over the whole image (ResNet's final 7x7 average): one contiguous reduction per
    channel, where the axis-by-axis loop makes 2k short strided calls; by taps where `x` is not
    contiguous (no padded copy: the window has no pads)."""
    if not x.flags.c_contiguous:
        reduce_taps(x, y, geo, scratch, ufunc, identity)
        return
    ufunc.reduce(x.reshape(*x.shape[:2], -1), axis=2, out=y.reshape(x.shape[:2]))


def reduce_windows(x, y, geo: Geometry, scratch: Scratch, ufunc, identity) -> None:
    """numpy's reduction over each window by whichever loop its workspace (`reduce_bytes`) covers:
    the whole image's, axis by axis where that fits, else by taps."""
    if whole_image(x.shape, geo):
        reduce_whole(x, y, geo, scratch, ufunc, identity)
    elif separable_fits(x.shape, geo, x.dtype):
        pool_separable(x, y, geo, scratch, ufunc, identity)
    else:
        reduce_taps(x, y, geo, scratch, ufunc, identity)


def reduce_bytes(x_shape, geo: Geometry, dtype) -> int:
    """Workspace of `reduce_windows`: the axis-by-axis loop's where it fits, else the taps' padded copy."""
    if separable_fits(x_shape, geo, dtype):
        return separable_bytes(x_shape, geo, dtype)
    return window_bytes(x_shape, geo, dtype)


def max_with_indices(x, y, indices, geo: Geometry, scratch: Scratch, storage_order: int) -> None:
    """MaxPool with its Indices output: each tap's view against the running maximum, the first
    maximum keeping its flat index (over the whole tensor, in `storage_order`)."""
    taps = list(np.ndindex(*geo.kernel))
    better = scratch.take(y.shape[1:], np.bool_)
    for n, win in images(x, geo, scratch, lowest(x.dtype)):
        target = y[n]
        np.copyto(target, win[(Ellipsis, *taps[0])])
        where = indices[n]
        np.copyto(where, tap_positions(geo, taps[0], x.shape[2:], storage_order))
        for tap in taps[1:]:
            view = win[(Ellipsis, *tap)]
            np.greater(view, target, out=better)  # strict: the first maximum keeps its index
            np.copyto(target, view, where=better)
            np.copyto(where, tap_positions(geo, tap, x.shape[2:], storage_order), where=better)
    # Indices count over the whole tensor: add each (image, channel)'s offset.
    per_channel = math.prod(x.shape[2:])
    base = np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * per_channel
    indices += base.reshape(x.shape[:2] + (1,) * len(geo.out))


def lp_taps(x, y, geo: Geometry, scratch: Scratch, p: float) -> None:
    """(sum over the window of |x|^p)^(1/p), tap by tap; pads add nothing to the sum."""
    power = scratch.take(y.shape[1:], x.dtype)
    for n, win in images(x, geo, scratch, 0):
        y[n] = 0
        for tap in np.ndindex(*geo.kernel):
            abs_power(win[(Ellipsis, *tap)], p, power)
            y[n] += power
    root(y, p)


def whole_image(x_shape, geo: Geometry) -> bool:
    """A single unpadded, undilated window exactly the size of the image."""
    return (
        all(o == 1 for o in geo.out)
        and not geo.padded
        and geo.extent == tuple(x_shape[2:])
        and geo.kernel == geo.extent
    )


def pool_separable(x, y, geo: Geometry, scratch: Scratch, ufunc, identity) -> None:
    """A max or sum over each window as one reduction per spatial axis (a window is the
    product of per-axis ranges): k strided ufunc calls per axis instead of k^rank."""
    shapes = _separable_shapes(x.shape, geo)
    buffers = [scratch.take((n,), x.dtype) for n in separable_buffers(x.shape, geo)]
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


def divide_by_counts(out: np.ndarray, geo: Geometry, x_spatial, include_pad: bool, plane: np.ndarray) -> None:
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


def abs_power(src: np.ndarray, p: float, dst: np.ndarray) -> None:
    if p == 2:
        np.square(src, out=dst)
    else:
        np.abs(src, out=dst)
        if p != 1:
            dst **= dst.dtype.type(p)


def root(out: np.ndarray, p: float) -> None:
    if p == 2:
        np.sqrt(out, out=out)
    elif p != 1:
        out **= out.dtype.type(1.0 / p)
