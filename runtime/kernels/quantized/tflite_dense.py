"""FULLY_CONNECTED: int8/uint8 (per-tensor or per-channel filter) with TFLite's requantization, and float32.

The input's last axis is the accumulation depth (every other axis a batch row); rows go through
BLAS in float32 over depth chunks short enough to be exact, summed in float64: the int32
accumulators TFLite keeps.
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.protocol import Bound
from runtime.kernels.quantized.common import EXACT_DEPTH, TFLITE, float_activation, quant, rows_per_band
from runtime.kernels.quantized.jit_conv_int import DENSE, channel_table


def _blocks(x, w, y, integer):
    """Batch rows, rows per band and the workspace blocks: a band's input columns over one depth
    chunk (float32, exact up to EXACT_DEPTH), the chunk's products (float32) and their sums (float64)."""
    depth, channels = w.shape[-1], w.shape[0]
    batches = int(np.prod(x.shape)) // depth
    if not integer:
        return batches, batches, []
    chunk = min(depth, EXACT_DEPTH)
    rows = rows_per_band(chunk * 4 + channels * 12, batches, y.nbytes)
    return batches, rows, [((rows, chunk), np.float32), ((rows, channels), np.float32), ((rows, channels), np.float64)]


def _compiled(x, y) -> bool:
    typed = x is not None and y is not None and x.dtype.kind in "iu" and x.dtype.itemsize == 1 and x.dtype == y.dtype
    return DENSE is not None and typed  # 8-bit only: int32 sums of 8-bit products


def dense_workspace(inputs, outputs, **_) -> int:
    if _compiled(inputs[0], outputs[0]):
        return 0  # the compiled loop sums each output in a register
    return scratch_bytes(*_blocks(inputs[0], inputs[1], outputs[0], inputs[0].dtype.kind in "iu")[2])


def dense_matrix(w: np.ndarray, integer: bool) -> np.ndarray:
    return np.ascontiguousarray(w.T, dtype=np.float32)


def dense_constants(values, inputs, outputs, **_) -> dict:
    w = values[1] if len(values) > 1 else None
    return {} if w is None else {"w_matrix": dense_matrix(w, inputs[0].dtype.kind in "iu")}


def dense_multipliers(q_in, q_w, q_out, channels):
    """Per-channel filters: TFLite's double product per channel; per-tensor: its float32 product."""
    if q_w.per_channel:
        return qa.conv_multipliers(q_in, q_w, q_out, channels)
    return qa.dense_multiplier(q_in, q_w, q_out)


def bind_dense(inputs, outputs, attrs, general):
    """The compiled call, its requantization worked out once (the bias, a constant, read on the first call)."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    if not _compiled(x, y) or w is None:
        return None
    meta = x
    q_in, q_w = quant(attrs.get("q_inputs"), 0, "input"), quant(attrs.get("q_inputs"), 1, "input")
    q_out = quant(attrs.get("q_outputs"), 0, "output")
    channels, depth = w.shape[0], w.shape[-1]
    multiplier, shift = dense_multipliers(q_in, q_w, q_out, channels)
    lo, hi = qa.activation_range(attrs.get("fused_activation_function", "NONE"), q_out, y.dtype)
    x_zero, w_zero = np.int32(q_in.zero_point[0]), np.int32(q_w.zero_point[0] if q_w.zero_point.size == 1 else 0)
    cache: dict[str, np.ndarray] = {}

    def table_of(values) -> np.ndarray:
        table = cache.get("table")
        if table is None:
            bias = values[2] if len(values) > 2 else None
            table = cache["table"] = channel_table(bias, multiplier, shift, int(q_out.zero_point[0]), lo, hi, channels)
        return table

    def run(*values, out, ws=None, **_):
        DENSE(values[0].reshape(-1, depth), x_zero, values[1].reshape(channels, depth), w_zero, table_of(values),
              out.reshape(-1, channels))  # fmt: skip

    def prime(*values, out, ws=None, **_):
        """At prepare: the table, and the loop compiled (or loaded from numba's cache) by one call on
        zeros with the step's shapes, types and read-only flags, so that no run compiles it. An input
        the caller holds (io="external") has no array yet: its meta's shape and type, writeable."""
        given = values[0]
        x = np.zeros(meta.shape if given is None else given.shape, meta.dtype if given is None else given.dtype)
        x.flags.writeable = True if given is None else given.flags.writeable
        DENSE(x.reshape(-1, depth), x_zero, values[1].reshape(channels, depth), w_zero, table_of(values),
              np.zeros((x.size // depth, channels), out.dtype))  # fmt: skip

    return Bound(run, prime=prime)


@kernel("FULLY_CONNECTED", domain=TFLITE, workspace=dense_workspace, constants=dense_constants, bind=bind_dense)
def fully_connected(x, w, b=None, *, out, ws, fused_activation_function="NONE", keep_num_dims=False, q_inputs=None,
                    q_outputs=None, w_matrix=None, prepared_weights=True, **_):  # fmt: skip
    integer = x.dtype.kind in "iu"
    batches, rows, blocks = _blocks(x, w, out, integer)
    depth, channels = w.shape[-1], w.shape[0]
    matrix = w_matrix if w_matrix is not None else dense_matrix(w, integer)
    flat = x.reshape(batches, depth)
    target = out.reshape(batches, channels)
    if not integer:
        np.matmul(flat, matrix, out=target)
        if b is not None:
            target += b
        float_activation(target, fused_activation_function)
        return
    q_in, q_w, q_out = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input"), quant(q_outputs, 0, "output")
    multiplier, shift = dense_multipliers(q_in, q_w, q_out, channels)
    lo, hi = qa.activation_range(fused_activation_function, q_out, out.dtype)
    zero, w_zero = int(q_in.zero_point[0]), int(q_w.zero_point[0])
    scratch = Scratch(ws, "FULLY_CONNECTED")
    columns_all, part_all, sums_all = (scratch.take(*block) for block in blocks)
    weights = matrix - w_zero if w_zero else matrix
    for r0 in range(0, batches, rows):
        r1 = min(batches, r0 + rows)
        part, sums = part_all[: r1 - r0], sums_all[: r1 - r0]
        sums[...] = 0
        for k0 in range(0, depth, EXACT_DEPTH):  # exact float32 products, summed in float64
            k1 = min(depth, k0 + EXACT_DEPTH)
            columns = columns_all[: r1 - r0, : k1 - k0]
            np.subtract(flat[r0:r1, k0:k1], zero, out=columns, dtype=np.float32)
            np.matmul(columns, weights[k0:k1], out=part)
            sums += part
        total = sums.astype(np.int64) + (0 if b is None else b.astype(np.int64))
        target[r0:r1] = qa.requantize(total, multiplier, shift, int(q_out.zero_point[0]), lo, hi)
