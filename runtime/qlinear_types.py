"""Types of com.microsoft's QLinear ops' outputs, which onnx's shape inference does not know.

A QOperator model (onnxruntime's quantizer, QOperator format) writes QLinearAdd, QLinearConcat,
QGemm and the like: onnx leaves their outputs untyped, and everything after them. `infer_quantized`
runs onnx's inference, gives each such output its type from its inputs' (broadcast, concatenation,
pooling windows, a product's rows and columns), hands those to onnx as value_info, and infers again,
until nothing more is learned.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from runtime.shapes import TensorType, infer, value_info

MS = "com.microsoft"
MAX_ROUNDS = 64  # each round types the QLinear ops whose inputs the last one typed


def infer_quantized(skel: onnx.ModelProto) -> dict[str, TensorType]:
    types = infer(skel)
    # Small constants are initializers, whose types inference does not list.
    constants = {i.name: TensorType(i.data_type, tuple(int(d) for d in i.dims)) for i in skel.graph.initializer}
    for _ in range(MAX_ROUNDS):
        learned = {}
        known = {**constants, **types}
        for node in skel.graph.node:
            if node.domain != MS or not node.output or node.output[0] in types and types[node.output[0]].static:
                continue
            t = _output_type(node, known)
            if t is not None:
                learned[node.output[0]] = t
        if not learned:
            break
        skel.graph.value_info.extend(value_info(name, t) for name, t in learned.items())
        types = infer(skel)
        types.update(learned)
    return types


def _known(types: dict[str, TensorType], name: str) -> TensorType | None:
    t = types.get(name)
    return t if t is not None and t.static else None


def _output_type(node: onnx.NodeProto, types: dict[str, TensorType]) -> TensorType | None:
    op, ins = node.op_type, list(node.input)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    first = _known(types, ins[0]) if ins else None
    if op in ("QLinearAdd", "QLinearMul"):
        second = _known(types, ins[3]) if len(ins) > 3 else None
        if first is None or second is None:
            return None
        return TensorType(first.elem_type, tuple(np.broadcast_shapes(first.shape, second.shape)))
    if op in ("QLinearSigmoid", "QLinearLeakyRelu"):
        return first
    if op == "QLinearGlobalAveragePool" and first is not None:
        n, rest = first.shape[0], first.shape[1:]
        dims = (
            (n, *([1] * (len(rest) - 1)), rest[-1])
            if attrs.get("channels_last")
            else (n, rest[0], *([1] * (len(rest) - 1)))
        )
        return TensorType(first.elem_type, dims)
    if op == "QLinearAveragePool" and first is not None:
        return TensorType(first.elem_type, (*first.shape[:2], *_pooled(first.shape[2:], attrs)))
    if op == "QLinearConcat":
        parts = [_known(types, ins[i]) for i in range(2, len(ins), 3)]
        if not parts or any(p is None for p in parts):
            return None
        shapes = [p.shape for p in parts if p is not None]
        axis = int(attrs.get("axis", 0)) % len(shapes[0])
        joined = list(shapes[0])
        joined[axis] = sum(s[axis] for s in shapes)
        return TensorType(parts[0].elem_type if parts[0] is not None else TensorProto.UINT8, tuple(joined))
    if op == "QGemm":
        b = _known(types, ins[3]) if len(ins) > 3 else None
        if first is None or b is None:
            return None
        rows = first.shape[1] if attrs.get("transA") else first.shape[0]
        cols = b.shape[0] if attrs.get("transB") else b.shape[1]
        zero = _known(types, ins[8]) if len(ins) > 8 and ins[8] else None
        elem = (
            zero.elem_type if zero is not None else (first.elem_type if len(ins) > 7 and ins[7] else TensorProto.FLOAT)
        )
        return TensorType(elem, (rows, cols))
    return None


def _pooled(spatial: tuple[int, ...], attrs: dict) -> tuple[int, ...]:
    kernel = [int(k) for k in attrs.get("kernel_shape", [])]
    strides = [int(s) for s in attrs.get("strides", [1] * len(kernel))]
    pads = [int(p) for p in attrs.get("pads", [0] * 2 * len(kernel))]
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    out = []
    for i, size in enumerate(spatial):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(math.ceil(size / strides[i]))
            continue
        span = size + (0 if auto == "VALID" else pads[i] + pads[i + len(kernel)]) - kernel[i]
        steps = math.ceil(span / strides[i]) if attrs.get("ceil_mode") else span // strides[i]
        out.append(steps + 1)
    return tuple(out)
