"""What the integer kernels share: the quantization of a node's tensors, TFLite's SAME/VALID
padding, the float fused activations, and requantizing an int32 accumulator into `out`."""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.quantization import QuantParams

TFLITE = "tflite"
CHUNK_BYTES = 1 << 19  # a band's scratch (columns, accumulators): bounded whatever the layer's size


def quant(params: Any, index: int, what: str) -> QuantParams:
    """The quantization of a node's input or output `index`; a clear error when it has none."""
    found = params[index] if params is not None and index < len(params) else None
    if found is None:
        raise ValueError(f"{what} {index} is an integer tensor without quantization (scale and zero point)")
    return found


def is_quantized(x: np.ndarray) -> bool:
    return x.dtype.kind in "iu"


def same_padding(
    in_size: int, filter_size: int, stride: int, dilation: int, out_size: int, before: int | None = None
) -> tuple[int, int]:
    """TFLite's padding before and after one spatial axis, for the output size the graph gives
    (SAME pads the lesser half first; VALID's total is zero); `before` given (a tiled band's rows
    above its input, `runtime.tiling`), the padding after is what the window still reads past the end."""
    effective = (filter_size - 1) * dilation + 1
    total = max((out_size - 1) * stride + effective - in_size, 0)
    if before is not None:
        return before, max((out_size - 1) * stride + effective - in_size - before, 0)
    return total // 2, total - total // 2


def float_activation(y: np.ndarray, activation: str) -> None:
    """A fused activation applied in place to a float output."""
    if activation == "NONE":
        return
    if activation == "RELU":
        np.maximum(y, 0, out=y)
    elif activation == "RELU6":
        np.clip(y, 0, 6, out=y)
    elif activation == "RELU_N1_TO_1":
        np.clip(y, -1, 1, out=y)
    elif activation == "TANH":
        np.tanh(y, out=y)
    elif activation == "SIGN_BIT":
        np.copyto(y, np.signbit(y).astype(y.dtype))
    else:
        raise ValueError(f"fused_activation_function {activation!r}; accepted: NONE, RELU, RELU6, RELU_N1_TO_1, TANH")


MIN_BAND_BYTES = 1 << 13


def rows_per_band(row_bytes: int, rows: int, output_bytes: int | None = None) -> int:
    """Rows of a band whose scratch is `row_bytes` a row: at most CHUNK_BYTES, and no more than the
    layer's output (at least MIN_BAND_BYTES), so that on a microcontroller-sized model the scratch
    stays below the activations it serves; at least one row."""
    budget = CHUNK_BYTES if output_bytes is None else min(CHUNK_BYTES, max(MIN_BAND_BYTES, output_bytes))
    return max(1, min(rows, budget // max(1, row_bytes)))


def fill_band(x: np.ndarray, n: int, top: int, left: int, buf: np.ndarray, fill: Any, shift: int | None = None) -> None:
    """`buf` (rows, padded width, C) <- image `n` of NHWC `x` from row `top` (negative or past the
    end: padding) placed at column `left`, `fill` elsewhere; with `shift`, ``x - shift`` in buf's dtype."""
    height, width = x.shape[1], x.shape[2]
    rows = buf.shape[0]
    lo, hi = max(top, 0), min(top + rows, height)
    if lo > top or hi < top + rows or left > 0 or buf.shape[1] > left + width:
        buf[...] = fill
    if hi <= lo:
        return
    target = buf[lo - top : hi - top, left : left + width]
    if shift is None:
        np.copyto(target, x[n, lo:hi], casting="unsafe")
    else:
        np.subtract(x[n, lo:hi], shift, out=target, dtype=buf.dtype, casting="unsafe")


def taps(
    band: np.ndarray, ky: int, kx: int, rows: int, cols: int, stride: tuple[int, int], dilation: tuple[int, int]
) -> np.ndarray:
    """The (rows, cols, C) view of a padded band that filter tap (ky, kx) reads."""
    y0, x0 = ky * dilation[0], kx * dilation[1]
    return band[y0 : y0 + (rows - 1) * stride[0] + 1 : stride[0], x0 : x0 + (cols - 1) * stride[1] + 1 : stride[1]]


# float32 sums of 8-bit products are exact below 2**24: 255 * 128 * 512 is just under it, so a
# product of depth at most EXACT_DEPTH runs through float32 BLAS (twice float64's speed) exactly.
EXACT_DEPTH = 512


def exact_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, part: np.ndarray) -> None:
    """``out = a @ b`` exactly for integer-valued float32 `a` (rows, depth) and `b` (depth, columns)
    with 8-bit magnitudes: float32 products over depth chunks of EXACT_DEPTH, summed in `out`
    (float64); `part` is float32 scratch of out's shape."""
    depth = a.shape[1]
    if depth <= EXACT_DEPTH:
        np.matmul(a, b, out=part)
        np.copyto(out, part)
        return
    out[...] = 0
    for k0 in range(0, depth, EXACT_DEPTH):
        k1 = min(depth, k0 + EXACT_DEPTH)
        np.matmul(a[:, k0:k1], b[k0:k1], out=part)
        out += part


def merged_shapes(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The three shapes with neighbouring axes merged where each input spans the output on both or is
    stretched on both (so that the compiled rows are as long as they can be), with leading axes of one
    up to four dimensions (the compiled 8-bit ADD, SUB and MUL of both formats take such views)."""
    shapes = [[1] * (len(out) - len(v)) + list(v) for v in (a, b)] + [list(out)]
    merged = [[shape[0]] for shape in shapes] if out else [[1], [1], [1]]
    for axis in range(1, len(out)):
        prev, cur = [m[-1] for m in merged], [shape[axis] for shape in shapes]
        joins = all(
            (p == prev[2] and c == cur[2]) or (p == 1 and c == 1)
            for p, c in zip(prev[:2], cur[:2], strict=True)
        )  # fmt: skip
        for m, c in zip(merged, cur, strict=True):
            if joins:
                m[-1] *= c
            else:
                m.append(c)
    return [(1,) * (4 - len(m)) + tuple(m) for m in merged]
