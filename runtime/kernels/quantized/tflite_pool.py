"""AVERAGE_POOL_2D, MAX_POOL_2D (NHWC) and MEAN: TFLite's integer rounding, and float32.

The integer average divides each window's int32 sum by the number of taps inside the image,
rounding half away from zero; MEAN scales the sum by ``input_scale / output_scale / count``
with the count folded into the fixed-point multiplier as TFLite does.
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.protocol import Bound
from runtime.kernels.quantized.common import TFLITE, fill_band, float_activation, quant, same_padding, taps
from runtime.kernels.quantized.jit_pool_int import POOL, POOL_PLANES, pool_route
from runtime.kernels.quantized.jit_requantize import channel_parameters, requantize_rows


def _geometry(x, y, stride_h, stride_w, filter_height, filter_width, pad_top=None):
    top, bottom = same_padding(x[1], filter_height, stride_h, 1, y[1], pad_top)
    left, right = same_padding(x[2], filter_width, stride_w, 1, y[2])
    return top, left, (x[1] + top + bottom, x[2] + left + right, x[3])


def pool_workspace(inputs, outputs, *, stride_h=1, stride_w=1, filter_height=1, filter_width=1, pad_top=None,
                   **_) -> int:  # fmt: skip
    x, y = inputs[0], outputs[0]
    attrs = {"stride_h": stride_h, "stride_w": stride_w, "filter_height": filter_height, "filter_width": filter_width,
             "pad_top": pad_top}  # fmt: skip
    if pool_route(x, y, attrs) is not None:
        return 4 * y.shape[3]  # one pixel's sums: the compiled route's only scratch
    _, _, band = _geometry(x.shape, y.shape, stride_h, stride_w, filter_height, filter_width, pad_top)
    cell = np.int32 if x.dtype.kind in "iu" else x.dtype
    return scratch_bytes((band, cell), (y.shape[1:], cell))


def _pool(x, out, ws, average, stride_h, stride_w, filter_height, filter_width, activation, q_outputs,
          pad_top=None) -> None:  # fmt: skip
    top, left, band_shape = _geometry(x.shape, out.shape, stride_h, stride_w, filter_height, filter_width, pad_top)
    integer = x.dtype.kind in "iu"
    scratch = Scratch(ws, "AVERAGE_POOL_2D" if average else "MAX_POOL_2D")
    cell = np.int32 if integer else x.dtype
    band, acc = scratch.take(band_shape, cell), scratch.take(out.shape[1:], cell)
    oh, ow = out.shape[1], out.shape[2]
    lowest = np.iinfo(x.dtype).min if integer else -np.inf
    stride = (stride_h, stride_w)
    count = _counts(x.shape, out.shape, top, left, stride, filter_height, filter_width)
    if integer:
        lo, hi = qa.activation_range(activation, quant(q_outputs, 0, "output"), out.dtype)
    for n in range(x.shape[0]):
        fill_band(x, n, -top, left, band, 0 if average else lowest)
        acc[...] = 0 if average else lowest
        for ky in range(filter_height):
            for kx in range(filter_width):
                tap = taps(band, ky, kx, oh, ow, stride, (1, 1))
                np.add(acc, tap, out=acc) if average else np.maximum(acc, tap, out=acc)
        if not integer:
            if average:
                acc /= count
            float_activation(acc, activation)
            out[n] = acc
        elif average:
            total = acc.astype(np.int64)
            half = count // 2
            rounded = np.where(total > 0, (total + half) // count, -((half - total) // count))
            out[n] = np.clip(rounded, lo, hi)
        else:
            out[n] = np.clip(acc, lo, hi)


def _counts(x, y, top, left, stride, fh, fw) -> np.ndarray:
    """Taps of each output's window inside the image, (OH, OW, 1)."""

    def along(size, out_size, pad, s, f):
        start = np.arange(out_size) * s - pad
        return np.minimum(start + f, size) - np.maximum(start, 0)

    rows = along(x[1], y[1], top, stride[0], fh)
    cols = along(x[2], y[2], left, stride[1], fw)
    return (rows[:, None] * cols[None, :])[..., None].astype(np.int64)


def _bind(average: bool):
    def bind(inputs, outputs, attrs, general):
        """The compiled route for 8-bit pools, its geometry and order worked out once."""
        x, y = inputs[0], outputs[0]
        route = pool_route(x, y, attrs)
        if route is None or POOL is None:
            return None
        geometry, order = np.asarray(route[0], np.int64), route[1]
        window = np.asarray([attrs.get("filter_height", 1), attrs.get("filter_width", 1)], np.int64)
        lo, hi = qa.activation_range(
            attrs.get("fused_activation_function", "NONE"), quant(attrs.get("q_outputs"), 0, "output"), y.dtype
        )

        def run(x, *_, out, ws=None, **__):
            acc = (ws[: 4 * out.shape[3]] if ws is not None else np.empty(4 * out.shape[3], np.uint8)).view(np.int32)
            for n in range(out.shape[0]):
                POOL(x[n], out[n], acc, geometry, window, average, lo, hi, order.backward)

        return Bound(run)

    return bind


@kernel("AVERAGE_POOL_2D", domain=TFLITE, workspace=pool_workspace, planes=POOL_PLANES, bind=_bind(True))
def average_pool_2d(x, *, out, ws, padding="SAME", stride_h=1, stride_w=1, filter_height=1, filter_width=1,
                    fused_activation_function="NONE", q_outputs=None, pad_top=None, **_):  # fmt: skip
    _pool(x, out, ws, True, stride_h, stride_w, filter_height, filter_width, fused_activation_function, q_outputs,
          pad_top)  # fmt: skip


@kernel("MAX_POOL_2D", domain=TFLITE, workspace=pool_workspace, planes=POOL_PLANES, bind=_bind(False))
def max_pool_2d(x, *, out, ws, padding="SAME", stride_h=1, stride_w=1, filter_height=1, filter_width=1,
                fused_activation_function="NONE", q_outputs=None, pad_top=None, **_):  # fmt: skip
    _pool(x, out, ws, False, stride_h, stride_w, filter_height, filter_width, fused_activation_function, q_outputs,
          pad_top)  # fmt: skip


def _axes(axis, ndim: int) -> tuple[int, ...]:
    return tuple(sorted({int(a) % ndim for a in np.atleast_1d(axis)}))


def mean_workspace(inputs, outputs, **_) -> int:
    return scratch_bytes((outputs[0].shape, np.int64)) if inputs[0].dtype.kind in "iu" else 0


@kernel("MEAN", domain=TFLITE, workspace=mean_workspace)
def mean(x, axis, *, out, ws, keep_dims=False, q_inputs=None, q_outputs=None, **_):
    axes = _axes(axis, x.ndim)
    if x.dtype.kind == "f":
        np.copyto(out, np.mean(x, axis=axes, dtype=np.float32).reshape(out.shape))
        return
    qi, qo = quant(q_inputs, 0, "input"), quant(q_outputs, 0, "output")
    count = int(np.prod([x.shape[a] for a in axes]))
    total = Scratch(ws, "MEAN").take(out.shape, np.int64)
    kept = tuple(1 if i in axes else size for i, size in enumerate(x.shape))
    np.sum(x, axis=axes, dtype=np.int64, out=total.reshape(kept), keepdims=True)
    multiplier, shift = qa.quantize_multiplier(float(qi.scale[0]) / float(qo.scale[0]))
    m, s = int(multiplier[0]), int(shift[0])
    bits = min(count.bit_length() - 1, 32, 31 + s)  # the count folded into the multiplier, as TFLite's
    m, s = (m << bits) // count, s - bits
    lo, hi = qa.dtype_range(out.dtype)
    # One compiled pass from the sums in the workspace into `out` (numpy's requantize makes five
    # int64 temporaries of the output's size beside the arena).
    params = channel_parameters(-int(qi.zero_point[0]) * count, m, s, 1)
    requantize_rows(total.reshape(1, -1), params, int(qo.zero_point[0]), lo, hi, out.reshape(1, -1))
