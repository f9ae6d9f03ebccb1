"""The squeeze-and-excitation block made one memplan op at load time (after `runtime.fuse`).

MobileNetV3, EfficientNet and their kin scale a map's channels by a gate computed from the
map itself: X -> GlobalAveragePool -> 1x1 Conv + activation (the squeeze: Relu, SiLU,
HardSwish) -> 1x1 Conv + gate activation (Sigmoid, HardSigmoid, a Clip) -> Mul(X, gate).
On a (N, C, 1, 1) vector each of those four steps is a few microseconds of arithmetic and
tens of Python and numpy overhead; fused into one SqueezeExcite(X, W1, B1, W2, B2)
(`runtime.kernels.squeeze_excite`) they are one call, three small tensors fewer to plan,
and the result may be written over X where X dies.

The Convs arrive as `runtime.fuse`'s ConvAct (a Conv and its activation, already fused) or
as plain Convs (no activation). The block is fused only when every intermediate has the
next op as its only reader, no intermediate is a graph output, both Convs are 1x1 with
constant weights, one group and no padding, and X and the result have the same static
float shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

from runtime.constants import Constant
from runtime.kernels import MEMPLAN_DOMAIN, attributes_of
from runtime.shapes import TensorType
from runtime.wiring import Wiring, is_onnx_op

# The activations accepted after each Conv, as ConvAct names them ("" = a plain Conv).
SQUEEZE_ACTIVATIONS = ("", "Relu", "Silu", "HardSwish", "Clip")
GATE_ACTIVATIONS = ("Sigmoid", "HardSigmoid", "Clip")
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


def _map_type(types: dict[str, TensorType], x: str, y: str) -> TensorType | None:
    """X's type when X and Y have the same static float shape of rank 3 or more, else None."""
    tx, ty = types.get(x), types.get(y)
    if tx is None or ty is None or not tx.static or tx.elem_type not in _FLOAT_TYPES:
        return None
    if tx.dims != ty.dims or tx.elem_type != ty.elem_type or len(tx.shape) < 3:
        return None
    return tx


def fuse_squeeze_excite(
    nodes: Sequence[onnx.NodeProto], constants: dict[str, Constant], types: dict[str, TensorType], keep: set[str]
) -> tuple[list[onnx.NodeProto], int]:
    """The nodes with every squeeze-and-excitation block made one SqueezeExcite in its Mul's
    place (X and the weights are ready there); and how many. The intermediates leave `types`."""
    wiring = Wiring.of(nodes)
    fused: dict[str, onnx.NodeProto] = {}  # mul name -> SqueezeExcite
    dropped: set[str] = set()
    for mul in nodes:
        if not is_onnx_op(mul, "Mul") or len(mul.input) != 2 or len(mul.output) != 1:
            continue
        for k in (0, 1):
            block = _block(mul.input[1 - k], mul.input[k], wiring, constants, keep)
            if block is None or any(n.name in dropped for n in block):
                continue
            x = mul.input[1 - k]
            map_type = _map_type(types, x, mul.output[0])
            if map_type is None or not _weights_fit(block[1], block[2], map_type, constants):
                continue
            fused[mul.name] = _fused(x, block, mul)
            for node in block:
                dropped.add(node.name)
                types.pop(node.output[0], None)
            break
    out = [fused.get(n.name, n) for n in nodes if n.name not in dropped]
    return out, len(fused)


def _block(
    x: str, gate: str, wiring: Wiring, constants: dict[str, Constant], keep: set[str]
) -> tuple[onnx.NodeProto, onnx.NodeProto, onnx.NodeProto] | None:
    """(GlobalAveragePool, squeeze Conv, gate Conv) making `gate` from `x`, each output read by
    the next only, or None."""

    def only_once(name: str) -> onnx.NodeProto | None:
        node = wiring.producer.get(name)
        if node is None or wiring.readers[name] != 1 or name in keep or len(node.output) != 1:
            return None
        return node

    expand = only_once(gate)
    if expand is None or _activation(expand, constants) not in GATE_ACTIVATIONS:
        return None
    squeeze = only_once(expand.input[0])
    if squeeze is None or _activation(squeeze, constants) not in SQUEEZE_ACTIVATIONS:
        return None
    pool = only_once(squeeze.input[0])
    if pool is None or not is_onnx_op(pool, "GlobalAveragePool") or pool.input[0] != x:
        return None
    return pool, squeeze, expand


def _activation(conv: onnx.NodeProto, constants: dict[str, Constant]) -> str | None:
    """The activation of a 1x1 Conv or ConvAct with constant weights ("" for none), or None
    when `conv` is neither."""
    if is_onnx_op(conv, "Conv"):
        name = ""
    elif conv.op_type == "ConvAct" and conv.domain == MEMPLAN_DOMAIN:
        name = str(attributes_of(conv).get("activation", "Relu"))
    else:
        return None
    if len(conv.input) < 2 or conv.input[1] not in constants:
        return None
    if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in constants:
        return None
    attrs = attributes_of(conv)
    if attrs.get("group", 1) != 1 or any(attrs.get("pads", [])):
        return None
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    return name


def _weights_fit(
    squeeze: onnx.NodeProto, expand: onnx.NodeProto, x: TensorType, constants: dict[str, Constant]
) -> bool:
    """W1 is (Cs, C, 1, ..., 1) and W2 (C, Cs, 1, ..., 1) for X of C channels, biases (Cs,)
    and (C,), all of X's element type."""
    channels, rank = x.shape[1], len(x.shape)
    w1, w2 = constants[squeeze.input[1]], constants[expand.input[1]]
    ones = (1,) * (rank - 2)
    hidden = w1.shape[0] if len(w1.shape) == rank else -1
    if w1.shape != (hidden, channels, *ones) or w2.shape != (channels, hidden, *ones):
        return False
    dtype = onnx.helper.tensor_dtype_to_np_dtype(x.elem_type)
    for conv, size in ((squeeze, hidden), (expand, channels)):
        bias = conv.input[2] if len(conv.input) > 2 else ""
        if bias and (constants[bias].shape != (size,) or constants[bias].dtype != dtype):
            return False
    return w1.dtype == dtype and w2.dtype == dtype


def _fused(x: str, block: tuple[onnx.NodeProto, ...], mul: onnx.NodeProto) -> onnx.NodeProto:
    pool, squeeze, expand = block
    attrs: dict[str, Any] = {}
    for conv, key in ((squeeze, "squeeze"), (expand, "gate")):
        a = attributes_of(conv) if conv.domain == MEMPLAN_DOMAIN else {}
        attrs[key] = str(a.get("activation", ""))
        for p in ("lo", "hi", "alpha", "beta"):
            if p in a:
                attrs[f"{key}_{p}"] = float(a[p])

    def bias(conv: onnx.NodeProto) -> str:
        return conv.input[2] if len(conv.input) > 2 else ""

    names = "+".join(n.name for n in (*block, mul))
    return onnx.helper.make_node(
        "SqueezeExcite",
        [x, squeeze.input[1], bias(squeeze), expand.input[1], bias(expand)],
        [mul.output[0]],
        name=names,
        domain=MEMPLAN_DOMAIN,
        doc_string=f"squeeze-and-excitation ({names}) fused",
        **attrs,
    )
