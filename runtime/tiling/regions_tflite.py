"""Region functions of TensorFlow Lite's builtin operators (NHWC maps, domain ``tflite``).

CONV_2D, DEPTHWISE_CONV_2D and the 2-D pools keep their rows on axis 1; a band runs with
attribute ``pad_top``, the rows of padding above its input, which the kernels take instead of
working out SAME padding from the shapes (a band's own shapes would give another split). PAD
takes ``pad_rows = [axis, at]``: its input's first row goes to row ``at`` of the band's output
(outside it when the band is all padding), the rest is padding. Elementwise ops keep their
input's axis; TRANSPOSE moves it as its permutation says (the NCHW input of a converted
PyTorch model made NHWC by its first op).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from runtime.kernels.quantized.common import TFLITE, same_padding
from runtime.tiling.regions import AXIS, NHWC, Region, constant_inputs, region, same_rows

FILTER = "__filter_height"  # a convolution's filter height, from its weights' shape (OHWI or 1HWC)
PADDINGS = "__paddings"  # PAD's paddings, a constant input


def _filter_height(graph: Any, node: Any) -> Mapping[str, Any]:
    weights: tuple[int, ...] = ()
    if len(node.inputs) > 1 and node.inputs[1]:
        weights = graph.tensors[node.inputs[1]].shape
    return {FILTER: int(weights[1])} if len(weights) == 4 else {}


def _constant(graph: Any, name: str) -> np.ndarray | None:
    found = graph.constants.get(name) if name else None
    return None if found is None else np.asarray(found.value())


def _paddings(graph: Any, node: Any) -> Mapping[str, Any]:
    value = _constant(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    return {} if value is None else {PADDINGS: value.reshape(-1, 2).astype(np.int64)}


def _permutation(graph: Any, node: Any) -> tuple[int, ...] | None:
    """Where each input axis of TRANSPOSE goes: output axis j is input axis perm[j]."""
    perm = _constant(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    if perm is None:
        return None
    order = [int(p) for p in perm.reshape(-1)]
    return tuple(order.index(axis) for axis in range(len(order))) if sorted(order) == list(range(len(order))) else None


@region((TFLITE, "CONV_2D"), (TFLITE, "DEPTHWISE_CONV_2D"), height=NHWC, extra=_filter_height)
@region((TFLITE, "AVERAGE_POOL_2D"), (TFLITE, "MAX_POOL_2D"), height=NHWC)
def nhwc_window(
    attrs: Mapping[str, Any], shape: tuple[int, ...], out_shape: tuple[int, ...], y0: int, y1: int
) -> Region | None:
    """TFLite's sliding window over rows (SAME or VALID, stride, dilation): the input rows the
    band reads and the padding above them."""
    kernel = attrs.get(FILTER, attrs.get("filter_height"))
    if len(shape) != 4 or len(out_shape) != 4 or kernel is None or attrs.get("pad_top") is not None:
        return None
    stride, dilation = int(attrs.get("stride_h", 1)), int(attrs.get("dilation_h_factor", 1))
    effective = (int(kernel) - 1) * dilation + 1
    top, _ = same_padding(shape[NHWC], int(kernel), stride, dilation, out_shape[NHWC])
    start = y0 * stride - top
    end = (y1 - 1) * stride - top + effective
    a, b = max(start, 0), min(end, shape[NHWC])
    return Region(a, b, {"pad_top": a - start})


@region((TFLITE, "PAD"), (TFLITE, "PADV2"), extra=_paddings)
def pad_rows(
    attrs: Mapping[str, Any], shape: tuple[int, ...], out_shape: tuple[int, ...], y0: int, y1: int
) -> Region | None:
    """Output rows [y0, y1) read input rows [y0 - before, y1 - before), clipped to the map; a
    band all padding reads one row it leaves outside (a tile has at least one row)."""
    pads, axis = attrs.get(PADDINGS), int(attrs.get(AXIS, NHWC))
    if pads is None or len(shape) != 4 or pads.shape[0] != len(shape) or (pads < 0).any() or "pad_rows" in attrs:
        return None
    before, height = int(pads[axis, 0]), shape[axis]
    a = min(max(y0 - before, 0), height - 1)
    b = max(min(y1 - before, height), a + 1)
    return Region(a, b, {"pad_rows": [axis, a + before - y0]})


region(
    *((TFLITE, op) for op in ("ADD", "SUB", "MUL", "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU", "LOGISTIC",
                              "TANH", "HARD_SWISH", "PRELU", "QUANTIZE", "DEQUANTIZE")),
)(same_rows)  # fmt: skip
region((TFLITE, "TRANSPOSE"), moves=_permutation)(same_rows)
region((TFLITE, "CONCATENATION"), extra=constant_inputs)(same_rows)  # refused along the rows (`axis`)
