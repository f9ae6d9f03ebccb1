"""PAD with its output over its input: a compiled loop that moves every element to its padded place,
last first, then fills the border.

With non-negative paddings each output axis is at least as long as the input's, so an element's
padded flat index is never below its own: moving elements from the last one down only overwrites
bytes already moved. A pad before a stride-2 depthwise conv (MobileNetV2's) then needs no second
copy of the map at the model's peak."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime.kernels._jit import compiled


def _pad_over(x, out, before, fill):  # pragma: no cover - compiled
    """`x` and `out` 4-D views of the same bytes from the same first one; `before` the pads before each axis."""
    a0, a1, a2, a3 = x.shape
    for i in range(a0 - 1, -1, -1):
        for j in range(a1 - 1, -1, -1):
            for k in range(a2 - 1, -1, -1):
                for m in range(a3 - 1, -1, -1):
                    out[i + before[0], j + before[1], k + before[2], m + before[3]] = x[i, j, k, m]
    for i in range(out.shape[0]):
        outside_i = i < before[0] or i >= before[0] + a0
        for j in range(out.shape[1]):
            outside_j = outside_i or j < before[1] or j >= before[1] + a1
            for k in range(out.shape[2]):
                outside_k = outside_j or k < before[2] or k >= before[2] + a2
                for m in range(out.shape[3]):
                    if outside_k or m < before[3] or m >= before[3] + a3:
                        out[i, j, k, m] = fill


PAD_OVER = compiled(_pad_over)


def band_pads(paddings: Any, shape: Sequence[int], out_shape: Sequence[int], pad_rows: Any = None) -> np.ndarray:
    """PAD's (before, after) per axis; with `pad_rows` ``[axis, at]`` (a tiled band, `runtime.tiling`)
    the input's first row goes to row `at` of the output on that axis, which may leave it partly
    or wholly outside (negative pads)."""
    pads = np.array(paddings, dtype=np.int64).reshape(len(shape), 2)
    if pad_rows is not None:
        axis, at = int(pad_rows[0]), int(pad_rows[1])
        pads[axis] = (at, out_shape[axis] - at - shape[axis])
    return pads


def pads_over(attrs: dict[str, Any], inputs: Sequence[Any], out: Any) -> bool:
    """Whether PAD may write its output from its input's first byte: a 4-D input of out's dtype, on
    the compiled route, wholly inside the output."""
    x = inputs[0] if inputs else None
    if PAD_OVER is None or x is None or out is None or len(x.shape) != 4 or len(out.shape) != 4:
        return False
    if attrs.get("pad_rows") is not None:
        axis, at = (int(v) for v in attrs["pad_rows"])
        if at < 0 or at + x.shape[axis] > out.shape[axis]:
            return False
    return x.dtype == out.dtype and all(o >= i for o, i in zip(out.shape, x.shape, strict=True))


def pad_over(x: np.ndarray, out: np.ndarray, pads: np.ndarray, fill: Any) -> bool:
    """Pad `x` into `out` over its own bytes when they start at the same one; False when they do not."""
    if PAD_OVER is None or x.ndim != 4 or x.ctypes.data != out.ctypes.data:
        return False
    PAD_OVER(x, out, np.ascontiguousarray(pads[:, 0], dtype=np.int64), out.dtype.type(fill))
    return True
