"""Resize: separable interpolation, one axis at a time, through workspace buffers.

Every resized axis becomes a small table of taps: for each output position, which input
positions it reads (clamped to the edge, as the spec's edge padding does) and with what
weights. Applying an axis is a `np.take` of each tap column into a buffer, scaled and
summed into the next stage, so nothing the size of the tensor is allocated outside the
workspace. Nearest needs one tap with weight one (a plain gather); linear two; cubic four;
antialiasing widens the taps of a downscaled axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes


@dataclass(frozen=True)
class AxisTaps:
    axis: int
    index: np.ndarray  # (out_len, taps) input positions, already clamped
    weight: np.ndarray | None  # (out_len, taps) or None for a plain gather
    outside: np.ndarray | None  # (out_len,) bool: tf_crop_and_resize positions that extrapolate


def _source_coords(mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float] | None) -> np.ndarray:
    """Input coordinate of every output position (the spec's coordinate_transformation_mode)."""
    y = np.arange(out_len, dtype=np.float64)
    length = scale * in_len  # the real-valued output length some modes use
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if length > 1 else np.full(out_len, -0.5)
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / length)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "align_corners":
        return y * (in_len - 1) / (length - 1) if length != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        if length > 1:
            x = y * (end - start) * (in_len - 1) / (length - 1)
        else:
            x = np.full(out_len, (end - start) * (in_len - 1) / 2)
        return x + start * (in_len - 1)
    raise ValueError(
        f"Resize: coordinate_transformation_mode {mode!r} is not one of half_pixel, pytorch_half_pixel, "
        "half_pixel_symmetric, align_corners, asymmetric, tf_crop_and_resize"
    )


def _nearest(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if nearest_mode == "floor":
        return np.floor(x)
    if nearest_mode == "ceil":
        return np.ceil(x)
    raise ValueError(
        f"Resize: nearest_mode {nearest_mode!r} is not one of round_prefer_floor, round_prefer_ceil, floor, ceil"
    )


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _filter_taps(x: np.ndarray, in_len: int, scale: float, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    """Taps of linear or cubic interpolation at coordinates `x`: (indices, weights)."""
    cubic = attrs["mode"] == "cubic"
    support = 2.0 if cubic else 1.0
    # Antialiasing stretches the filter by 1/scale when downscaling.
    stretch = min(scale, 1.0) if attrs["antialias"] else 1.0
    first = math.floor(-support / stretch) + 1
    count = 2 - 2 * first
    base = np.floor(x).astype(np.int64)
    index = base[:, None] + np.arange(first, first + count)[None, :]
    distance = (index - x[:, None]) * stretch
    weight = _cubic(distance, attrs["cubic_coeff_a"]) if cubic else np.clip(1 - np.abs(distance), 0, 1)
    if attrs["exclude_outside"]:
        weight = np.where((index < 0) | (index >= in_len), 0.0, weight)
    if attrs["antialias"] or attrs["exclude_outside"]:
        total = weight.sum(axis=1, keepdims=True)
        weight = weight / np.where(total == 0, 1.0, total)
    return np.clip(index, 0, in_len - 1), weight


def _axis_scales(x_shape, out_shape, axes, scales, sizes, policy: str) -> dict[int, float]:
    """Scale of every axis the node names (all axes unless `axes`)."""
    if scales is not None and scales.size:
        return {a: float(s) for a, s in zip(axes, scales, strict=True)}
    ratios = {a: out_shape[a] / x_shape[a] for a in axes}
    if sizes is not None and sizes.size and policy != "stretch":
        pick = min if policy == "not_larger" else max
        common = pick(int(s) / x_shape[a] for a, s in zip(axes, sizes, strict=True))
        return dict.fromkeys(axes, common)
    return ratios


def axis_taps(x_shape, out_shape, roi, scales, sizes, attrs: dict) -> list[AxisTaps]:
    """The taps of every axis that actually changes, in axis order."""
    rank = len(x_shape)
    axes = [a + rank if a < 0 else a for a in attrs["axes"]] if attrs["axes"] else list(range(rank))
    scale_of = _axis_scales(x_shape, out_shape, axes, scales, sizes, attrs["keep_aspect_ratio_policy"])
    crop = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    plan = []
    for i, a in enumerate(axes):
        in_len, out_len, scale = x_shape[a], out_shape[a], scale_of[a]
        span = (float(roi[i]), float(roi[i + len(axes)])) if crop and roi is not None and roi.size else None
        if out_len == in_len and math.isclose(scale, 1.0) and (span is None or span == (0.0, 1.0)):
            continue  # identity along this axis
        x = _source_coords(attrs["coordinate_transformation_mode"], out_len, in_len, scale, span)
        outside = ((x < 0) | (x > in_len - 1)) if crop else None
        if attrs["mode"] == "nearest":
            index = np.clip(_nearest(x, attrs["nearest_mode"]), 0, in_len - 1).astype(np.intp)[:, None]
            plan.append(AxisTaps(a, index, None, outside))
        elif attrs["mode"] in ("linear", "cubic"):
            index, weight = _filter_taps(x, in_len, scale, attrs)
            plan.append(AxisTaps(a, index.astype(np.intp), weight, outside))
        else:
            raise ValueError(f"Resize: mode {attrs['mode']!r} is not one of nearest, linear, cubic")
    return plan


def _stage_shapes(x_shape, out_shape, axes: list[int]) -> list[tuple[int, ...]]:
    shapes, shape = [], list(x_shape)
    for a in axes:
        shape[a] = out_shape[a]
        shapes.append(tuple(shape))
    return shapes


def _blocks(x_shape, out_shape, axes: list[int], dtype, filtered: bool) -> list:
    """Workspace blocks: two ping-pong buffers for the stages before the last, and one
    buffer for a weighted tap (linear/cubic only)."""
    shapes = _stage_shapes(x_shape, out_shape, axes)
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    blocks = []
    if len(sizes) > 1:
        blocks.append(((max(sizes[:-1]),), dtype))
    if len(sizes) > 2:
        blocks.append(((max(sizes[1:-1]),), dtype))
    if filtered:
        blocks.append(((max(sizes),), dtype))
    return blocks


def resize_workspace(inputs, outputs, *, mode="nearest", coordinate_transformation_mode="half_pixel", **_) -> int:
    # The scales, sizes and roi values are unknown here: count every axis whose length changes
    # (the kernel allocates instead in the rare case it must resize an axis of equal length).
    x, y = inputs[0], outputs[0]
    axes = [a for a in range(len(x.shape)) if x.shape[a] != y.shape[a]]
    if coordinate_transformation_mode == "tf_crop_and_resize":
        axes = list(range(len(x.shape)))
    return scratch_bytes(*_blocks(x.shape, y.shape, axes, y.dtype, mode != "nearest"))


def _apply(src: np.ndarray, taps: AxisTaps, dst: np.ndarray, tmp: np.ndarray | None) -> None:
    a = taps.axis
    np.take(src, taps.index[:, 0], axis=a, out=dst, mode="clip")
    if taps.weight is None:
        return
    assert tmp is not None, "filtered taps need a temporary"
    shape = (-1,) + (1,) * (src.ndim - a - 1)
    dst *= taps.weight[:, 0].reshape(shape).astype(dst.dtype)
    for t in range(1, taps.index.shape[1]):
        np.take(src, taps.index[:, t], axis=a, out=tmp, mode="clip")
        tmp *= taps.weight[:, t].reshape(shape).astype(tmp.dtype)
        dst += tmp


@kernel("Resize", workspace=resize_workspace)
def resize(
    x, roi=None, scales=None, sizes=None, *, out, ws, opset, antialias=0, axes=None,
    coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
    keep_aspect_ratio_policy="stretch", mode="nearest", nearest_mode="round_prefer_floor",
):  # fmt: skip
    if opset < 11:
        # Resize-10 has inputs (X, scales) and asymmetric coordinates with floor rounding.
        roi, scales, sizes = None, roi, None
        coordinate_transformation_mode, nearest_mode = "asymmetric", "floor"
    attrs = dict(
        antialias=antialias, axes=axes, coordinate_transformation_mode=coordinate_transformation_mode,
        cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside, keep_aspect_ratio_policy=keep_aspect_ratio_policy,
        mode=mode, nearest_mode=nearest_mode,
    )  # fmt: skip
    plan = axis_taps(x.shape, out.shape, roi, scales, sizes, attrs)
    _run_plan(x, plan, out, ws, mode != "nearest")
    _extrapolate(out, plan, extrapolation_value)


def _run_plan(x: np.ndarray, plan: list[AxisTaps], out: np.ndarray, ws, filtered: bool) -> None:
    """Apply the axes of `plan` one after the other, through the workspace, into `out`."""
    if not plan:
        np.copyto(out, x)
        return
    if not np.issubdtype(out.dtype, np.floating) and filtered:
        _resize_integer(x, plan, out)
        return
    blocks = _blocks(x.shape, out.shape, [t.axis for t in plan], out.dtype, filtered)
    scratch = Scratch(ws if ws is not None and ws.size >= scratch_bytes(*blocks) else None, "Resize")
    stages = _stage_shapes(x.shape, out.shape, [t.axis for t in plan])
    ping = scratch.take(blocks[0][0], out.dtype) if len(plan) > 1 else None
    pong = scratch.take(blocks[1][0], out.dtype) if len(plan) > 2 else None
    tmp_size = max(int(np.prod(s, dtype=np.int64)) for s in stages)
    tmp_flat = scratch.take((tmp_size,), out.dtype) if filtered else None
    src = x
    for k, taps in enumerate(plan):
        n = int(np.prod(stages[k], dtype=np.int64))
        last = k == len(plan) - 1
        stage = ping if k % 2 == 0 else pong
        dst = out if last or stage is None else stage[:n].reshape(stages[k])
        tmp = None if tmp_flat is None else tmp_flat[:n].reshape(stages[k])
        _apply(src, taps, dst, tmp)
        src = dst


def upsample_workspace(inputs, outputs, *, mode="nearest", **_) -> int:
    return resize_workspace(inputs, outputs, mode=mode, coordinate_transformation_mode="asymmetric")


@kernel("Upsample", workspace=upsample_workspace)
def upsample(x, scales=None, *, out, ws, mode="nearest"):
    # Resize's ancestor (an attribute `scales` before opset 9, an input after): asymmetric
    # coordinates, nearest rounding down, "linear" meaning (bi)linear.
    attrs = dict(
        antialias=0, axes=None, coordinate_transformation_mode="asymmetric", cubic_coeff_a=-0.75, exclude_outside=0,
        keep_aspect_ratio_policy="stretch", mode="linear" if mode in ("linear", "bilinear") else mode,
        nearest_mode="floor",
    )  # fmt: skip
    plan = axis_taps(x.shape, out.shape, None, np.asarray(scales, dtype=np.float64), None, attrs)
    _run_plan(x, plan, out, ws, attrs["mode"] != "nearest")


def _extrapolate(out: np.ndarray, plan: list[AxisTaps], value: float) -> None:
    for taps in plan:
        if taps.outside is not None and taps.outside.any():
            out[(slice(None),) * taps.axis + (taps.outside,)] = value


def _resize_integer(x: np.ndarray, plan: list[AxisTaps], out: np.ndarray) -> None:
    """Linear/cubic on integer images: interpolate in float32 (allocating, a rare path), then
    round and saturate to the output type."""
    src = x.astype(np.float32)
    for taps in plan:
        shape = list(src.shape)
        shape[taps.axis] = taps.index.shape[0]
        dst = np.empty(shape, np.float32)
        _apply(src, taps, dst, np.empty(shape, np.float32))
        src = dst
    info = np.iinfo(out.dtype)
    np.copyto(out, np.clip(np.rint(src), info.min, info.max), casting="unsafe")
