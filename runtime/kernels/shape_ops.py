"""Tensor manipulation: views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) and
copies that move elements (Transpose, Concat, Split, Slice, Expand, Tile, Pad).

View kernels are registered with ``view=True``: the runtime gives output 0 the bytes of
input 0, so the kernel copies only when it was handed separate buffers. Their output
shape is already `out.shape` (shape inference at load made it), so shape inputs and axes
attributes are accepted and not re-derived.

Attributes that became inputs at some opset (Slice's starts, Squeeze's axes, Pad's pads,
Split's split) keep one parameter name, so the attribute form (a keyword argument) and
the input form (a positional argument) reach the same parameter.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes


def _same_bytes(x, out):
    # Aliased buffers already hold the result; C-order reshape keeps the bytes in place.
    if not np.shares_memory(out, x):
        np.copyto(out, x.reshape(out.shape))


@kernel("Reshape", view=True)
def reshape(data, shape=None, *, out, allowzero=0):
    _same_bytes(data, out)


@kernel("Flatten", view=True)
def flatten(x, *, out, axis=1):
    _same_bytes(x, out)


@kernel("Squeeze", view=True)
def squeeze(x, axes=None, *, out):
    _same_bytes(x, out)


@kernel("Unsqueeze", view=True)
def unsqueeze(x, axes=None, *, out):
    _same_bytes(x, out)


@kernel("Identity", view=True)
def identity(x, *, out):
    _same_bytes(x, out)


@kernel("Dropout", outputs="many", view=True)
def dropout(x, ratio=None, training_mode=None, *, out, seed=None, is_test=0):
    """Inference (the default) is the identity with an all-true mask. In training mode each
    element is kept with probability 1 - ratio and scaled by 1 / (1 - ratio); the mask is
    drawn from numpy's generator seeded by `seed`, so it matches no other runtime's."""
    y, mask = out[0], out[1] if len(out) > 1 else None
    ratio = 0.5 if ratio is None else float(np.asarray(ratio))
    training = training_mode is not None and bool(np.asarray(training_mode))
    if not training or ratio == 0:
        _same_bytes(x, y)
        if mask is not None:
            mask.fill(True)
        return
    keep = np.random.default_rng(seed).random(x.shape) >= ratio
    np.multiply(x, keep, out=y)
    y *= 1 / (1 - ratio)
    if mask is not None:
        np.copyto(mask, keep)


@kernel("Transpose")
def transpose(x, *, out, perm=None):
    """`perm` defaults to reversing the axes (numpy's default too)."""
    np.copyto(out, np.transpose(x, perm))


@kernel("Concat")
def concat(*inputs, out, axis):
    np.concatenate(inputs, axis=axis, out=out)


def _split_sizes(length, split, outs, num_outputs):
    if split is not None:
        return [int(s) for s in np.asarray(split).reshape(-1)]
    if all(o is not None for o in outs):
        return None
    # Opset 18's num_outputs: equal parts of ceil(length / n), the last one smaller.
    count = num_outputs or len(outs)
    part = -(-length // count)
    return [min(part, max(length - i * part, 0)) for i in range(count)]


@kernel("Split", outputs="many")
def split(x, split=None, *, out, axis=0, num_outputs=None):
    """Parts along `axis` sized by `split` (attribute before opset 13, input since), else
    by the preallocated outputs' shapes; outputs the node leaves unnamed may be None."""
    axis = axis + x.ndim if axis < 0 else axis
    sizes = _split_sizes(x.shape[axis], split, out, num_outputs)
    if sizes is None:
        sizes = [o.shape[axis] for o in out]
    start = 0
    for o, size in zip(out, sizes, strict=False):
        if o is not None:
            index = (slice(None),) * axis + (slice(start, start + size),)
            np.copyto(o, x[index])
        start += size


def _slice_bounds(start, end, step, dim):
    """ONNX Slice's clamping of one axis as a Python slice (negative steps included)."""
    if step == 0:
        raise ValueError("Slice: steps must be non-zero")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    # -1 means "before index 0", which a Python slice can only say with None.
    return slice(start, None if end < 0 else end, step)


@kernel("Slice")
def slice_(data, starts=None, ends=None, axes=None, steps=None, *, out):
    """starts/ends/axes are attributes before opset 10 and inputs since (with steps)."""
    starts = np.asarray(starts).reshape(-1).tolist()
    ends = np.asarray(ends).reshape(-1).tolist()
    axes = list(range(len(starts))) if axes is None else np.asarray(axes).reshape(-1).tolist()
    steps = [1] * len(starts) if steps is None else np.asarray(steps).reshape(-1).tolist()
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = axis + data.ndim if axis < 0 else axis
        index[axis] = _slice_bounds(start, end, step, data.shape[axis])
    np.copyto(out, data[tuple(index)])


@kernel("Expand")
def expand(x, shape, *, out):
    np.copyto(out, x)


@kernel("Tile")
def tile(x, repeats, *, out):
    """Written through a view of `out` as (r0, d0, r1, d1, ...), which `x` broadcasts into."""
    repeats = [int(r) for r in np.asarray(repeats).reshape(-1)]
    interleaved = [n for pair in zip(repeats, x.shape, strict=True) for n in pair]
    spread = [n for d in x.shape for n in (1, d)]
    np.reshape(out, interleaved, copy=False)[...] = x.reshape(spread)


def _source_index(positions, n, mode):
    """Where each padded position along one axis reads from, as an index into the n
    elements of the unpadded extent."""
    if mode == "edge":
        return np.clip(positions, 0, n - 1)
    if mode == "wrap":
        return positions % n
    if n == 1:
        return np.zeros_like(positions)
    period = 2 * (n - 1)
    folded = positions % period
    return np.where(folded >= n, period - folded, folded)


def _full_pads(pads, axes, rank):
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    if axes is None:
        if len(pads) != 2 * rank:
            raise ValueError(f"Pad: pads has {len(pads)} values, expected 2 * rank = {2 * rank}")
        return pads[:rank], pads[rank:]
    axes = [int(a) + rank if a < 0 else int(a) for a in np.asarray(axes).reshape(-1)]
    begin, end = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        begin[axis], end[axis] = pads[i], pads[i + len(axes)]
    return begin, end


# Elements of the workspace through which reflect, edge and wrap copy their border.
PAD_ROOM = 1 << 14


def pad_workspace(inputs, outputs, *, mode="constant", **_) -> int:
    """A piece of one padded slice (reflect, edge and wrap copy their border through it)."""
    out = outputs[0]
    return 0 if mode == "constant" else scratch_bytes(((_room_elements(out.shape),), out.dtype))


def _room_elements(shape: tuple[int, ...]) -> int:
    if not shape or 0 in shape:
        return 0
    return min(max(math.prod(shape) // n for n in shape), PAD_ROOM)


def _copy_through(dst: np.ndarray, src: np.ndarray, room: np.ndarray) -> None:
    """dst[...] = src through `room` (1-D, of their dtype), in pieces along the first axes that
    are longer than 1 when src does not fit in it at once."""
    if src.size <= room.size:
        piece = room[: src.size].reshape(src.shape)
        np.copyto(piece, src)
        np.copyto(dst, piece)
        return
    j = next(i for i, n in enumerate(src.shape) if n > 1)
    step = max(1, room.size // (src.size // src.shape[j]))
    for start in range(0, src.shape[j], step):
        index = (slice(None),) * j + (slice(start, start + step),)
        _copy_through(dst[index], src[index], room)


@kernel("Pad", workspace=pad_workspace)
def pad(data, pads=None, constant_value=None, axes=None, *, out, ws=None, mode="constant", value=0.0):
    """Modes constant, edge, reflect and wrap; negative pads crop. Before opset 11 `pads`
    and `value` are attributes; since, `pads`, `constant_value` and `axes` are inputs."""
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ValueError(f"Pad: mode must be constant, edge, reflect or wrap, got {mode!r}")
    begin, end = _full_pads(pads, axes, data.ndim)
    # Crop for negative pads first, then place the kept block at its offset in `out`.
    kept = tuple(slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(begin, end, data.shape, strict=True))
    source = data[kept]
    inner = tuple(slice(max(b, 0), max(b, 0) + n) for b, n in zip(begin, source.shape, strict=True))
    if mode == "constant":
        out.fill(value if constant_value is None else np.asarray(constant_value).item())
        out[inner] = source
        return
    out[inner] = source
    room = Scratch(ws, "Pad").take((_room_elements(out.shape),), out.dtype)
    # One axis at a time, reading the already padded earlier axes: corners come out right.
    for axis, (b, n) in enumerate(zip(begin, source.shape, strict=True)):
        lead = max(b, 0)
        if out.shape[axis] == n:
            continue
        if n == 0:
            raise ValueError(f"Pad: mode {mode!r} cannot pad axis {axis} of length 0")
        head = (slice(None),) * axis
        middle = out[(*head, slice(lead, lead + n))]
        reads = _source_index(np.arange(-lead, out.shape[axis] - lead), n, mode)
        # One padded position at a time, through the workspace: fancy indexing would gather the
        # whole border beside the arena, and numpy copies one slice of `out` into another
        # through a temporary of its own (their bounds interleave).
        for position in (*range(lead), *range(lead + n, out.shape[axis])):
            i = int(reads[position])
            _copy_through(out[(*head, slice(position, position + 1))], middle[(*head, slice(i, i + 1))], room)
