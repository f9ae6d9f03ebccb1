"""Which input rows an op reads for a band of its output rows: one declared function per op.

A region function takes a node's attributes, its input's shape and a band of output rows
``[y0, y1)`` on the height axis, and returns the input rows ``[a, b)`` it reads and the
attribute overrides under which the node's own kernel, run on exactly those input rows, writes
exactly those output rows. Only the pads change, and only at the borders: a band inside the map
reads real rows where the whole map read padding. So the same registered kernel runs on a band
of rows; nothing here computes anything.

Each registration also declares the op's layout, so the height axis comes from the graph: an
op with its own layout names the axis its maps keep their rows on (ONNX's Conv: 2 of NCHW;
TensorFlow Lite's CONV_2D: 1 of NHWC); an elementwise op keeps its input's, and a transpose
moves it (`moves`). `extra` adds what the region function needs beyond the attributes (a
filter's height, PAD's paddings: constant inputs of the node); the height axis of the band's
input reaches the function as attribute `AXIS`.

The registry is keyed by (domain, op type), as the kernels are. An op without a region
function, or a node whose attributes a region function refuses (returns None), ends a chain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.kernels import DEFAULT_DOMAINS, MEMPLAN_DOMAIN

QUANTIZED_DOMAIN = "com.microsoft"  # onnxruntime's quantized ops (QLinearAdd, ...)


@dataclass(frozen=True)
class Region:
    """Input rows [a, b) read for the output band, and the node's attributes for that band;
    `columns`: zero columns (left, right) the band's input is given instead of the node's own
    left and right pads (a convolution's, so that it runs unpadded on its band)."""

    a: int
    b: int
    overrides: Mapping[str, Any]
    columns: tuple[int, int] = (0, 0)


# (attributes, input shape, output shape, y0, y1) -> Region, or None when the node cannot be split
RegionFn = Callable[[Mapping[str, Any], tuple[int, ...], tuple[int, ...], int, int], Region | None]

# (graph, node) -> values the region function reads beside the attributes (constant inputs)
ExtraFn = Callable[[Any, Any], Mapping[str, Any]]
# (graph, node) -> for each input axis, the output axis it becomes (a transpose's inverse permutation)
MovesFn = Callable[[Any, Any], tuple[int, ...] | None]

NCHW, NHWC = 2, 1  # the height axis of a 4-D map in each layout
AXIS = "__height_axis"  # the attribute a region function finds the band input's height axis under
JOINS_CONSTANT = "__joins_constant"  # a Concat with a constant input


@dataclass(frozen=True)
class Layout:
    """Where an op's maps keep their rows: `height` its own axis (None: its input's, moved by `moves`)."""

    height: int | None = None
    moves: MovesFn | None = None
    extra: ExtraFn | None = None


_REGIONS: dict[tuple[str, str], RegionFn] = {}
_LAYOUTS: dict[tuple[str, str], Layout] = {}


def region(
    *keys: str | tuple[str, str], height: int | None = None, moves: MovesFn | None = None, extra: ExtraFn | None = None
) -> Callable[[RegionFn], RegionFn]:
    """Register `fn` as the region function of each op type ("Conv") or (domain, op type), with
    the op's layout (`Layout`)."""

    def wrap(fn: RegionFn) -> RegionFn:
        for key in keys:
            domain, op = ("", key) if isinstance(key, str) else key
            _REGIONS[(domain, op)] = fn
            _LAYOUTS[(domain, op)] = Layout(height, moves, extra)
        return fn

    return wrap


def _key_of(node: Any) -> tuple[str, str]:
    return ("" if node.domain in DEFAULT_DOMAINS else node.domain, node.op_type)


def region_of(node: Any) -> RegionFn | None:
    return _REGIONS.get(_key_of(node))


def layout_of(node: Any) -> Layout:
    return _LAYOUTS.get(_key_of(node), Layout())


def attributes_of(graph: Any, node: Any, axis: int) -> dict[str, Any]:
    """What a node's region function reads: its attributes, its layout's `extra`, and `AXIS`."""
    extra = layout_of(node).extra
    return {**node.attributes, **(extra(graph, node) if extra is not None else {}), AXIS: axis}


def tileable_ops() -> list[str]:
    """Every op with a region function, as "op" or "domain.op"."""
    return sorted(op if not domain else f"{domain}.{op}" for domain, op in _REGIONS)


def _pair(value: Any, default: int) -> tuple[int, int]:
    if value is None:
        return default, default
    values = [int(v) for v in value]
    return (values[0], values[1]) if len(values) == 2 else (values[0], values[0])


def _explicit_pads(attrs: Mapping[str, Any], shape: tuple[int, ...], effective: tuple[int, int]) -> list[int] | None:
    """[top, left, bottom, right] whatever the node's auto_pad, or None for a form not handled."""
    mode = str(attrs.get("auto_pad", "NOTSET"))
    strides = _pair(attrs.get("strides"), 1)
    if mode == "NOTSET":
        pads = [int(p) for p in attrs.get("pads") or [0, 0, 0, 0]]
        return pads if len(pads) == 4 else None
    if mode == "VALID":
        return [0, 0, 0, 0]
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        return None
    begin, end = [], []
    for size, stride, k in zip(shape[2:], strides, effective, strict=True):
        total = max(0, (-(-size // stride) - 1) * stride + k - size)
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    return [begin[0], begin[1], end[0], end[1]]


@region("Conv", (MEMPLAN_DOMAIN, "ConvAct"), height=NCHW)
def conv_window(
    attrs: Mapping[str, Any], shape: tuple[int, ...], out_shape: tuple[int, ...], y0: int, y1: int
) -> Region | None:
    """`window`; for a dense convolution, with the left and right zero padding written into the
    band's input: its kernel takes its fastest routes on unpadded columns (a 3x3 band of 56
    columns 7x faster here). A grouped one keeps its pads: no wider copy of its band is made."""
    found = window(attrs, shape, out_shape, y0, y1)
    if found is None or int(attrs.get("group", 1)) != 1:
        return found
    pads = list(found.overrides["pads"])
    columns = (pads[1], pads[3])
    return Region(found.a, found.b, {**found.overrides, "pads": [pads[0], 0, pads[2], 0]}, columns)


@region("MaxPool", "AveragePool", "LpPool", "QLinearConv", (QUANTIZED_DOMAIN, "QLinearAveragePool"), height=NCHW)
def window(
    attrs: Mapping[str, Any], shape: tuple[int, ...], out_shape: tuple[int, ...], y0: int, y1: int
) -> Region | None:
    """A sliding window of kernel_shape, strides, dilations and pads over H and W."""
    if len(shape) != 4 or int(attrs.get("ceil_mode", 0)):
        return None
    kernel = attrs.get("kernel_shape")
    if kernel is None or len(kernel) != 2:
        return None
    stride, _ = _pair(attrs.get("strides"), 1)
    dilation, dilation_w = _pair(attrs.get("dilations"), 1)
    effective = ((int(kernel[0]) - 1) * dilation + 1, (int(kernel[1]) - 1) * dilation_w + 1)
    pads = _explicit_pads(attrs, shape, effective)
    if pads is None:
        return None
    height = shape[2]
    start = y0 * stride - pads[0]
    end = (y1 - 1) * stride - pads[0] + effective[0]
    a, b = max(start, 0), min(end, height)
    top, bottom = a - start, end - b
    return Region(a, b, {"auto_pad": "NOTSET", "pads": [top, pads[1], bottom, pads[3]]})


@region(
    "Relu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Softplus",
    "Mish",
    "Erf",
    "Identity",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "Sum",
    "QuantizeLinear",
    "DequantizeLinear",
    (QUANTIZED_DOMAIN, "QLinearAdd"),
    (QUANTIZED_DOMAIN, "QLinearMul"),
    (QUANTIZED_DOMAIN, "QLinearSigmoid"),
    (QUANTIZED_DOMAIN, "QLinearLeakyRelu"),
)
def same_rows(
    attrs: Mapping[str, Any], shape: tuple[int, ...], out_shape: tuple[int, ...], y0: int, y1: int
) -> Region | None:
    """Each output row reads the same row of every row-split input (elementwise maps, a
    per-channel affine map, a 1x1 convolution plus its residual, maps joined along another
    axis; the stage checks that the inputs and output have as many rows on their height axes).
    An op whose `axis` attribute names the height axis (a Concat of rows, a per-row scale) is
    refused."""
    if len(shape) != len(out_shape) or len(shape) not in (4, 5):
        return None
    if attrs.get(JOINS_CONSTANT):
        return None
    along = attrs.get("axis")
    if along is not None and int(along) % len(out_shape) == int(attrs.get(AXIS, NCHW)):
        return None
    return Region(y0, y1, {})


# LRN sums squares across channels at one pixel: a row of its output reads that row alone
region("BatchNormalization", "LRN", (MEMPLAN_DOMAIN, "PointwiseConvAdd"), height=NCHW)(same_rows)


def constant_inputs(graph: Any, node: Any) -> Mapping[str, Any]:
    """A Concat of a constant: the constant would have to be cut into bands too, so it is refused."""
    return {JOINS_CONSTANT: any(name in graph.constants for name in node.inputs if name)}


region("Concat", extra=constant_inputs)(same_rows)
region((QUANTIZED_DOMAIN, "QLinearConcat"))(same_rows)  # its constants are scales and zero points
