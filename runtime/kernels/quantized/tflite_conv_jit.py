"""The compiled route of the integer CONV_2D and DEPTHWISE_CONV_2D (`jit_conv_int`): its workspace
(a ring of output rows), its declaration that the output may start at the input's first byte, and
the call bound once per node with the requantization worked out at prepare."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels.planes import Planes
from runtime.kernels.protocol import Bound, GeneralFn
from runtime.kernels.quantized.common import quant, same_padding
from runtime.kernels.quantized.jit_conv_int import CONV, DEPTHWISE, channel_table, exact_in_float32, row_order

_GEOMETRY = ("stride_h", "stride_w", "dilation_h_factor", "dilation_w_factor")


def _routed(x: Any, w: Any, y: Any) -> bool:
    loop_ok = CONV is not None and DEPTHWISE is not None
    shapes_ok = x is not None and w is not None and y is not None and len(x.shape) == 4 == len(y.shape)
    # 8-bit only: the float32 sums' exactness and the int32 accumulators assume 8-bit products
    return loop_ok and shapes_ok and x.dtype.kind in "iu" and x.dtype.itemsize == 1 and x.dtype == y.dtype


def _geometry(x: Any, w: Any, y: Any, attrs: dict[str, Any]) -> tuple[int, ...]:
    stride_h, stride_w, dil_h, dil_w = (int(attrs.get(name, 1)) for name in _GEOMETRY)
    top, _ = same_padding(x.shape[1], w.shape[1], stride_h, dil_h, y.shape[1], attrs.get("pad_top"))
    left, _ = same_padding(x.shape[2], w.shape[2], stride_w, dil_w, y.shape[2])
    return stride_h, stride_w, dil_h, dil_w, top, left


def _order(x: Any, w: Any, y: Any, attrs: dict[str, Any]):
    geometry = _geometry(x, w, y, attrs)
    shapes = tuple(x.shape), tuple(y.shape)
    return row_order(*shapes, x.dtype.itemsize, y.dtype.itemsize, geometry, w.shape[1], w.shape[2])


def compiled_workspace(x: Any, w: Any, y: Any, attrs: dict[str, Any], *, depthwise: bool) -> int | None:
    """Bytes of a pixel's sums and the ring of output pixels on the compiled route, or None off it."""
    if not _routed(x, w, y):
        return None
    return 4 * y.shape[3] + _order(x, w, y, attrs).slots * y.shape[3] * y.dtype.itemsize


def _over(attrs: dict[str, Any], inputs: Sequence[Any], out: Any) -> bool:
    """Output 0 from input 0's first byte: on the compiled route for one image whose ring stays
    small (at most a quarter of the output's pixels, or two rows)."""
    x, w = inputs[0], inputs[1] if len(inputs) > 1 else None
    if not _routed(x, w, out) or x.shape[0] != 1:
        return False
    return _order(x, w, out, attrs).slots <= max(2 * out.shape[2], out.shape[1] * out.shape[2] // 4)


def compiled_planes(*, depthwise: bool) -> Planes:
    # `depthwise=True` keeps the NCHW plane-wise reading off for these NHWC ops (a filter's
    # axis 0 is not a group count here): only `over`, the compiled route's own, applies.
    return Planes(depthwise=True, over=_over)


def bind_compiled(*, depthwise: bool):
    loop = DEPTHWISE if depthwise else CONV

    def bind(inputs: Sequence[Any], outputs: Sequence[Any], attrs: dict[str, Any], general: GeneralFn) -> Bound | None:
        x, w, y = inputs[0], inputs[1], outputs[0]
        if not _routed(x, w, y) or loop is None:
            return None
        q_in, q_w, q_out = quant(attrs.get("q_inputs"), 0, "input"), quant(attrs.get("q_inputs"), 1, "input"), \
            quant(attrs.get("q_outputs"), 0, "output")  # fmt: skip
        channels = y.shape[3]
        multiplier, shift = qa.conv_multipliers(q_in, q_w, q_out, channels)
        lo, hi = qa.activation_range(attrs.get("fused_activation_function", "NONE"), q_out, y.dtype)
        geometry = np.asarray(_geometry(x, w, y, attrs), np.int64)
        order = _order(x, w, y, attrs)
        taps = int(np.prod(w.shape[1:])) // (channels if depthwise else 1)
        cell = np.float32 if exact_in_float32(taps, 16 if w.dtype.kind == "u" else 15) else np.int32
        x_zero, w_zero = cell(q_in.zero_point[0]), int(q_w.zero_point[0] if q_w.zero_point.size == 1 else 0)
        has_bias = len(inputs) > 2 and inputs[2] is not None
        made: dict[str, np.ndarray] = {}

        def prime(*values: Any, **_: Any) -> None:
            """The constants in the loop's form, once: the requantization table and the filter as
            int32 less its zero point, channels innermost (a filter is a constant, read at prepare)."""
            bias = values[2] if has_bias else None
            made["table"] = channel_table(bias, multiplier, shift, int(q_out.zero_point[0]), lo, hi, channels)
            filters = values[1].astype(cell) - cell(w_zero)
            made["w"] = np.ascontiguousarray(filters[0] if depthwise else filters.transpose(1, 2, 3, 0))

        def run(*values: Any, out: np.ndarray, ws: np.ndarray | None = None, **_: Any) -> None:
            if not made:
                prime(*values)
            size = order.slots * channels
            need = 4 * channels + size * y.dtype.itemsize
            space = ws if ws is not None and ws.size >= need else np.empty(need, np.uint8)
            acc = space[: 4 * channels].view(cell)
            ring = space[4 * channels : need].view(y.dtype).reshape(order.slots, channels)
            image, table, filters = values[0], made["table"], made["w"]
            for n in range(out.shape[0]):
                loop(
                    image[n],
                    x_zero,
                    filters,
                    table,
                    geometry,
                    out[n],
                    ring,
                    acc,
                    order.lag,
                    order.backward,
                    order.direct,
                )

        return Bound(run, prime=prime)

    return bind
