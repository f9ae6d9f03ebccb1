"""Fusions made at load time for inference: BatchNormalization folded into the Conv before
it, and a 1x1 Conv fused with the residual Add after it.

1. At inference a BatchNormalization is an affine map per channel, y = x * s + t with
s = scale / sqrt(var + epsilon) and t = B - mean * s. When its input comes straight from
a Conv whose weights are constants and that nothing else reads, the map can be moved into
the Conv: W' = W * s (per output channel), b' = b * s + t. One node and one tensor fewer:
less time, and one activation fewer to plan, as onnxruntime and TVM do.

The new weights are lazy constants: they are computed when a session first needs them, so
planning a model still reads none of its weights.

2. Add(Conv(X, W, B), R) (or a Sum of the two) with a 1x1 convolution (stride 1, no padding, one group), the
Conv's output read by that Add only and R of the same shape, becomes memplan's
PointwiseConvAdd(X, W, B, R) (`runtime.kernels.fused`): the Conv's output is never stored
whole, and the result can be written over R where R dies. In a ResNet bottleneck that is
the step of peak memory: the block's input, the expanded Conv output and the residual
were live together; fused, only the residual and the input.

3. The exact GELU as exporters spell it before opset 20, x * 0.5 * (1 + Erf(x / sqrt 2)),
becomes one Gelu node: it runs over x where x dies, where the five ops kept x and an
intermediate as large as x live together (a transformer MLP's peak).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from runtime.constants import Constant
from runtime.kernels import MEMPLAN_DOMAIN, attributes_of
from runtime.shapes import TensorType
from runtime.wiring import Wiring, is_onnx_op


def fold_batchnorm(
    nodes: Sequence[onnx.NodeProto], constants: dict[str, Constant], keep: set[str]
) -> tuple[list[onnx.NodeProto], int]:
    """The nodes with every foldable Conv -> BatchNormalization pair merged; and how many."""
    wiring = Wiring.of(nodes)
    merged: dict[str, onnx.NodeProto] = {}  # conv name -> its replacement
    dropped: set[str] = set()  # batch norm names
    for bn in nodes:
        conv = _foldable_conv(bn, wiring, constants, keep)
        if conv is None or conv.name in merged:
            continue
        merged[conv.name] = _merge(conv, bn, constants)
        dropped.add(bn.name)
    out = [merged.get(n.name, n) for n in nodes if n.name not in dropped]
    return out, len(dropped)


def _foldable_conv(
    bn: onnx.NodeProto,
    wiring: Wiring,
    constants: dict[str, Constant],
    keep: set[str],
) -> onnx.NodeProto | None:
    if not is_onnx_op(bn, "BatchNormalization"):
        return None
    if any(bn.output[1:]) or attributes_of(bn).get("training_mode", 0):
        return None  # training statistics are asked for
    if len(bn.input) != 5 or not all(name in constants for name in bn.input[1:]):
        return None
    x = bn.input[0]
    conv = wiring.producer.get(x)
    if conv is None or not is_onnx_op(conv, "Conv"):
        return None
    if wiring.readers[x] != 1 or x in keep or conv.input[1] not in constants:
        return None
    if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in constants:
        return None
    weights = constants[conv.input[1]]
    channels = constants[bn.input[1]].shape
    if not np.issubdtype(weights.dtype, np.floating) or channels != (weights.shape[0],):
        return None
    return conv


def _merge(conv: onnx.NodeProto, bn: onnx.NodeProto, constants: dict[str, Constant]) -> onnx.NodeProto:
    epsilon = float(attributes_of(bn).get("epsilon", 1e-5))
    w = constants[conv.input[1]]
    b = constants[conv.input[2]] if len(conv.input) > 2 and conv.input[2] else None
    scale, shift, mean, var = (constants[name] for name in bn.input[1:])

    def factor() -> np.ndarray:
        return scale.value().astype(np.float64) / np.sqrt(var.value().astype(np.float64) + epsilon)

    def new_weights() -> np.ndarray:
        s = factor().reshape((-1,) + (1,) * (len(w.shape) - 1))
        return (w.value() * s).astype(w.dtype)

    def new_bias() -> np.ndarray:
        s = factor()
        base = b.value().astype(np.float64) if b is not None else 0.0
        return ((base - mean.value()) * s + shift.value()).astype(w.dtype)

    w_name, b_name = _fresh(f"{conv.name}::weights_bn", constants), _fresh(f"{conv.name}::bias_bn", constants)
    constants[w_name] = Constant(w_name, w.shape, w.dtype, "folded", new_weights)
    constants[b_name] = Constant(b_name, (w.shape[0],), w.dtype, "folded", new_bias)
    node = onnx.NodeProto()
    node.CopyFrom(conv)
    del node.input[:]
    node.input.extend([conv.input[0], w_name, b_name])
    node.output[0] = bn.output[0]
    node.doc_string = f"{conv.name} with {bn.name} folded in"
    del node.attribute[:]
    node.attribute.extend(conv.attribute)
    return node


def _fresh(name: str, taken: dict[str, Constant]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    return candidate


# Element types the fused kernel computes in (matmul in the tensor's own precision).
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


def fuse_pointwise_conv_add(
    nodes: Sequence[onnx.NodeProto], constants: dict[str, Constant], types: dict[str, TensorType], keep: set[str]
) -> tuple[list[onnx.NodeProto], int]:
    """The nodes with every fusable 1x1 Conv -> Add pair made one PointwiseConvAdd; and how
    many. The Conv's output leaves `types`. The fused node takes the Add's place in the
    order (both of its inputs are ready there)."""
    wiring = Wiring.of(nodes)
    fused: dict[str, onnx.NodeProto] = {}  # add name -> fused node
    dropped: set[str] = set()  # conv names
    for add in nodes:
        # Sum of two inputs is an Add (older exporters, ResNet-50 among them, write Sum).
        if not is_onnx_op(add, "Add", "Sum") or len(add.input) != 2:
            continue
        for k in (0, 1):
            y, r = add.input[k], add.input[1 - k]
            conv = wiring.producer.get(y)
            if conv is None or conv.name in dropped or y == r:
                continue
            if wiring.readers[y] != 1 or y in keep or not _pointwise(conv, constants):
                continue
            if r in conv.input:
                continue  # Conv(x) + x: the result may go over R, which every band still reads
            if not _same_static_float(types, (y, r, add.output[0])):
                continue
            fused[add.name] = _fused(conv, add, r)
            dropped.add(conv.name)
            types.pop(y, None)
            break
    out = [fused.get(n.name, n) for n in nodes if n.name not in dropped]
    return out, len(fused)


def _pointwise(conv: onnx.NodeProto, constants: dict[str, Constant]) -> bool:
    """A default-domain Conv that is a plain matrix product per pixel."""
    if not is_onnx_op(conv, "Conv") or len(conv.output) != 1:
        return False
    if len(conv.input) < 2 or conv.input[1] not in constants:
        return False
    if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in constants:
        return False
    w = constants[conv.input[1]]
    if len(w.shape) < 3 or any(d != 1 for d in w.shape[2:]):
        return False
    attrs = attributes_of(conv)
    if attrs.get("group", 1) != 1 or any(s != 1 for s in attrs.get("strides", [])):
        return False
    return not any(attrs.get("pads", [])) and attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")


def _same_static_float(types: dict[str, TensorType], names: tuple[str, ...]) -> bool:
    """Every tensor named has the same static shape and the same float element type."""
    found = [types.get(n) for n in names]
    if any(t is None or not t.static or t.elem_type not in _FLOAT_TYPES for t in found):
        return False
    first = found[0]
    return all(t.dims == first.dims and t.elem_type == first.elem_type for t in found)  # type: ignore[union-attr]


def _fused(conv: onnx.NodeProto, add: onnx.NodeProto, residual: str) -> onnx.NodeProto:
    bias = conv.input[2] if len(conv.input) > 2 else ""
    node = onnx.helper.make_node(
        "PointwiseConvAdd",
        [conv.input[0], conv.input[1], bias, residual],
        [add.output[0]],
        name=f"{conv.name}+{add.name}",
        domain=MEMPLAN_DOMAIN,
        doc_string=f"{conv.name} (1x1 Conv) and {add.name} (Add) fused",
    )
    return node


def fuse_erf_gelu(
    nodes: Sequence[onnx.NodeProto], constants: dict[str, Constant], types: dict[str, TensorType], keep: set[str]
) -> tuple[list[onnx.NodeProto], int]:
    """The nodes with every Div -> Erf -> Add -> Mul -> Mul spelling of the exact GELU made
    one Gelu; and how many. The chain's intermediates leave `types`."""
    wiring = Wiring.of(nodes)
    reader_of = {name: node for node in nodes for name in node.input if name}  # the last one; only ones matter

    def only_reader(name: str, op: str) -> onnx.NodeProto | None:
        node = reader_of.get(name)
        if wiring.readers[name] != 1 or name in keep or not is_onnx_op(node, op):
            return None
        return node

    def other(node: onnx.NodeProto, name: str) -> str | None:
        """The input of a two-input node that is not `name`."""
        if len(node.input) != 2 or name not in node.input:
            return None
        return node.input[1] if node.input[0] == name else node.input[0]

    def scalar(name: str | None, value: float) -> bool:
        c = constants.get(name or "")
        if c is None or int(np.prod(c.shape, dtype=np.int64)) != 1 or not np.issubdtype(c.dtype, np.floating):
            return False
        return bool(np.isclose(float(c.value().reshape(())), value, rtol=1e-4, atol=0.0))

    replaced: dict[str, onnx.NodeProto] = {}  # last node's name -> Gelu
    dropped: set[str] = set()
    for erf in nodes:
        if not is_onnx_op(erf, "Erf"):
            continue
        div = wiring.producer.get(erf.input[0])
        if div is None or not is_onnx_op(div, "Div") or len(div.input) != 2 or not scalar(div.input[1], np.sqrt(2.0)):
            continue
        x = div.input[0]
        if only_reader(div.output[0], "Erf") is not erf:
            continue
        add = only_reader(erf.output[0], "Add")
        if add is None or not scalar(other(add, erf.output[0]), 1.0):
            continue
        mul = only_reader(add.output[0], "Mul")
        if mul is None or other(mul, add.output[0]) != x:
            continue
        half = only_reader(mul.output[0], "Mul")
        if half is None or not scalar(other(half, mul.output[0]), 0.5):
            continue
        if not _same_static_float(types, (x, half.output[0])):
            continue
        chain = (div, erf, add, mul)
        if any(n.name in dropped for n in (*chain, half)):
            continue
        replaced[half.name] = onnx.helper.make_node(
            "Gelu", [x], [half.output[0]], name=f"{div.name}..{half.name}", doc_string="exact GELU, five ops fused"
        )
        for n in chain:
            dropped.add(n.name)
            types.pop(n.output[0], None)
    out = [replaced.get(n.name, n) for n in nodes if n.name not in dropped]
    return out, len(replaced)


def fuse_conv_activation(
    nodes: Sequence[onnx.NodeProto], constants: dict[str, Constant], types: dict[str, TensorType], keep: set[str]
) -> tuple[list[onnx.NodeProto], int]:
    """The nodes with every Conv followed by an activation it alone feeds (Relu, Clip with
    constant bounds, HardSigmoid, HardSwish, Sigmoid, or x * Sigmoid(x)) made one memplan
    ConvAct in the Conv's place, and every PointwiseConvAdd so followed given the activation
    as attributes (a ResNet block's last Relu); and how many. The Conv's output leaves `types`."""
    wiring = Wiring.of(nodes)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for name in dict.fromkeys(n for n in node.input if n):
            readers.setdefault(name, []).append(node)
    fused: dict[str, onnx.NodeProto] = {}  # conv name -> ConvAct
    dropped: set[str] = set()
    for conv in nodes:
        residual = conv.op_type == "PointwiseConvAdd" and conv.domain == MEMPLAN_DOMAIN
        if not (is_onnx_op(conv, "Conv") or residual) or len(conv.output) != 1 or conv.output[0] in keep:
            continue
        y = conv.output[0]
        t = types.get(y)
        if t is None or t.elem_type not in _FLOAT_TYPES:
            continue
        found = _activation_after(y, readers.get(y, []), wiring, constants, keep)
        if found is None or any(n.name in dropped for n in found[2]):
            continue
        attrs, out, chain = found
        fused[conv.name] = _with_activation(conv, attrs, out, chain) if residual else _conv_act(conv, attrs, out, chain)
        dropped.update(n.name for n in chain)
        for node in (conv, *chain[:-1]):  # the Conv's output, and the Sigmoid's of x * Sigmoid(x)
            types.pop(node.output[0], None)
    out_nodes = [fused.get(n.name, n) for n in nodes if n.name not in dropped]
    return out_nodes, len(fused)


def _activation_after(
    y: str, after: list[onnx.NodeProto], wiring: Wiring, constants: dict[str, Constant], keep: set[str]
) -> tuple[dict[str, Any], str, list[onnx.NodeProto]] | None:
    """(ConvAct attributes, output, nodes replaced) of the activation reading Conv output `y`, or None."""
    if wiring.readers[y] == 1 and len(after) == 1:
        act = after[0]
        if len(act.output) != 1 or act.input[0] != y:
            return None
        if is_onnx_op(act, "Relu", "HardSwish", "Sigmoid"):
            return {"activation": act.op_type}, act.output[0], [act]
        if is_onnx_op(act, "HardSigmoid"):
            a = attributes_of(act)
            return {"activation": "HardSigmoid", "alpha": a.get("alpha", 0.2), "beta": a.get("beta", 0.5)}, act.output[0], [act]  # fmt: skip
        if is_onnx_op(act, "Clip"):
            bounds = _clip_bounds(act, constants)
            return None if bounds is None else ({"activation": "Clip", **bounds}, act.output[0], [act])
        return None
    # x * Sigmoid(x): the Conv output read by a Sigmoid and by the Mul of the two.
    if wiring.readers[y] != 2 or len(after) != 2:
        return None
    sigmoid = next((n for n in after if is_onnx_op(n, "Sigmoid")), None)
    mul = next((n for n in after if is_onnx_op(n, "Mul")), None)
    if sigmoid is None or mul is None or len(sigmoid.output) != 1 or len(mul.input) != 2:
        return None
    gate = sigmoid.output[0]
    if sorted(mul.input) != sorted([y, gate]) or wiring.readers[gate] != 1 or gate in keep:
        return None
    return {"activation": "Silu"}, mul.output[0], [sigmoid, mul]


def _clip_bounds(clip: onnx.NodeProto, constants: dict[str, Constant]) -> dict[str, float] | None:
    """Clip's bounds when constant (inputs from opset 11, attributes before), else None."""
    bounds: dict[str, float] = {}
    a = attributes_of(clip)
    for key, index, attr in (("lo", 1, "min"), ("hi", 2, "max")):
        name = clip.input[index] if len(clip.input) > index else ""
        if name:
            c = constants.get(name)
            if c is None or int(np.prod(c.shape, dtype=np.int64)) != 1:
                return None
            bounds[key] = float(c.value().reshape(()))
        elif attr in a:
            bounds[key] = float(a[attr])
    return bounds


def _with_activation(
    node: onnx.NodeProto, attrs: dict[str, Any], output: str, chain: list[onnx.NodeProto]
) -> onnx.NodeProto:
    """A copy of fused `node` that also applies the activation and writes `output`."""
    fused = onnx.NodeProto()
    fused.CopyFrom(node)
    fused.output[0] = output
    fused.name = f"{node.name}+{'+'.join(n.name for n in chain)}"
    fused.attribute.extend(onnx.helper.make_attribute(key, value) for key, value in attrs.items())
    return fused


def _conv_act(conv: onnx.NodeProto, attrs: dict[str, Any], output: str, chain: list[onnx.NodeProto]) -> onnx.NodeProto:
    names = "+".join(n.name for n in chain)
    node = onnx.helper.make_node(
        "ConvAct",
        list(conv.input),
        [output],
        name=f"{conv.name}+{names}",
        domain=MEMPLAN_DOMAIN,
        doc_string=f"{conv.name} (Conv) and {names} ({attrs['activation']}) fused",
        **attrs,
    )
    node.attribute.extend(conv.attribute)
    return node
