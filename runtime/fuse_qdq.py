"""QDQ models made integer at load: DequantizeLinear -> op -> QuantizeLinear becomes one integer op.

onnxruntime's quantizer (QDQ format) writes every quantized op as float maths between a
DequantizeLinear on each input and a QuantizeLinear on the output. Run as written, every activation
between them is float32, four times what an int8 runtime holds. As onnxruntime's QDQ fusions do,
memplan folds each such group (its inputs dequantized, its one output consumed only by a quantize)
into the integer op, whose inputs are the integers the DequantizeLinear nodes read:

1. Conv -> QLinearConv (int32 bias from its DequantizeLinear), MatMul -> QLinearMatMul,
   Gemm -> com.microsoft QGemm;
2. Add, Mul, Sigmoid, LeakyRelu, GlobalAveragePool, AveragePool, Concat -> their com.microsoft
   QLinear ops;
3. any other one-input float op (HardSwish, HardSigmoid, Tanh, ...) -> memplan's QLinearUnary, a
   table of the op's values over the 256 integers;
4. ops that only move or select values (MaxPool, Reshape, Flatten, Transpose, Squeeze, Unsqueeze,
   Dropout, Identity) run on the integers directly when the scale and zero point around them agree.

A DequantizeLinear left with no reader goes. The weights' DequantizeLinear nodes are kept from
constant folding first (`qdq_weights`), or their integers would be gone by the time this runs.
Nothing else changes: a group that does not match (a float op, per-channel activations) stays as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from runtime.constants import Constant

MS = "com.microsoft"
QLINEAR = {  # float op -> (integer op, domain)
    "Conv": ("QLinearConv", ""),
    "MatMul": ("QLinearMatMul", ""),
    "Gemm": ("QGemm", MS),
    "Add": ("QLinearAdd", MS),
    "Mul": ("QLinearMul", MS),
    "Sigmoid": ("QLinearSigmoid", MS),
    "LeakyRelu": ("QLinearLeakyRelu", MS),
    "GlobalAveragePool": ("QLinearGlobalAveragePool", MS),
    "AveragePool": ("QLinearAveragePool", MS),
    "Concat": ("QLinearConcat", MS),
}
# One-input float ops made tables (memplan's QLinearUnary) between a DequantizeLinear and a QuantizeLinear.
UNARY = ("HardSwish", "HardSigmoid", "Tanh", "Relu", "Elu", "Selu", "Softplus", "Softsign", "Gelu", "Mish", "Exp",
         "Neg", "Abs", "Sqrt", "Erf", "Celu", "ThresholdedRelu")  # fmt: skip
MOVES = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Dropout", "Identity")


def _is(node: onnx.NodeProto, op: str) -> bool:
    return node.op_type == op and node.domain in ("", "ai.onnx")


def qdq_weights(nodes: Sequence[onnx.NodeProto], constants: Mapping[str, Constant]) -> set[str]:
    """Outputs of every DequantizeLinear, kept from constant folding: a weight's may read an
    initializer or a QuantizeLinear of a float weight that folds first (a quantizer's output for
    weights made by nodes); folded, its integers would be gone."""
    return {n.output[0] for n in nodes if _is(n, "DequantizeLinear")}


def fuse_qdq(
    nodes: Sequence[onnx.NodeProto], constants: dict[str, Constant], types: Mapping[str, object], keep: set[str]
) -> tuple[list[onnx.NodeProto], int]:
    """The nodes with each matching DequantizeLinear -> op -> QuantizeLinear group made one integer
    op (see the module docstring), and how many groups were folded."""
    producer = {o: n for n in nodes for o in n.output if o}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for name in dict.fromkeys(i for i in n.input if i):
            readers.setdefault(name, []).append(n)
    replaced: dict[int, onnx.NodeProto] = {}  # id of the op -> the integer node
    dropped: set[int] = set()  # ids of QuantizeLinear nodes folded in
    for node in nodes:
        if node.domain not in ("", "ai.onnx") or not node.output or node.output[0] in keep:
            continue
        users = readers.get(node.output[0], [])
        if len(users) != 1 or not _is(users[0], "QuantizeLinear") or users[0].input[0] != node.output[0]:
            continue
        q = users[0]
        made = _integer_node(node, q, producer, constants)
        if made is not None:
            replaced[id(node)] = made
            dropped.add(id(q))
    if not replaced:
        return list(nodes), 0
    out = [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]
    read = {i for n in out for i in n.input if i} | keep
    out = [n for n in out if not (_is(n, "DequantizeLinear") and n.output[0] not in read)]
    return out, len(replaced)


def _dq(name: str, producer: Mapping[str, onnx.NodeProto]) -> tuple[str, str, str] | None:
    """(integers, scale, zero point) of a tensor a DequantizeLinear writes; the zero point is ""
    when it has none (zero: an int32 bias's)."""
    p = producer.get(name)
    while p is not None and _is(p, "Identity"):  # an exporter's shared bias: DequantizeLinear -> Identity
        p = producer.get(p.input[0])
    if p is None or not _is(p, "DequantizeLinear"):
        return None
    return p.input[0], p.input[1], p.input[2] if len(p.input) > 2 else ""


def _per_tensor(triple: tuple[str, str, str], constants: Mapping[str, Constant]) -> bool:
    scale = constants.get(triple[1])
    return scale is not None and scale.nbytes == scale.dtype.itemsize and triple[2] in constants


def _same(a: tuple[str, str, str], b: tuple[str, str, str], constants: Mapping[str, Constant]) -> bool:
    if not (_per_tensor(a, constants) and _per_tensor(b, constants)):
        return False
    return bool(
        np.array_equal(constants[a[1]].value(), constants[b[1]].value())
        and np.array_equal(constants[a[2]].value(), constants[b[2]].value())
    )


def _integer_node(
    node: onnx.NodeProto, q: onnx.NodeProto, producer: Mapping[str, onnx.NodeProto], constants: dict[str, Constant]
) -> onnx.NodeProto | None:
    if len(q.input) < 3 or not q.input[2]:
        return None
    out = (q.output[0], q.input[1], q.input[2])  # (integers, scale, zero point) of the output
    if not _per_tensor(out, constants):
        return None
    op = node.op_type
    if op in MOVES:
        x = _dq(node.input[0], producer)
        if x is None or not _same(x, out, constants) or len(node.output) > 1 and any(node.output[1:]):
            return None
        return _copy(node, op, "", [x[0], *node.input[1:]], [out[0]])
    if op not in QLINEAR:
        return _unary(node, out, producer, constants)
    target, domain = QLINEAR[op]
    data = [_dq(i, producer) if i else None for i in node.input]
    if op == "Concat":
        if not all(d is not None and _per_tensor(d, constants) for d in data):
            return None
        flat = [name for d in data if d is not None for name in d]
        return _copy(node, target, domain, [out[1], out[2], *flat], [out[0]])
    first = data[0]
    if first is None or not _per_tensor(first, constants):
        return None
    if op in ("Sigmoid", "LeakyRelu", "GlobalAveragePool", "AveragePool"):
        return _copy(node, target, domain, [*first, out[1], out[2]], [out[0]])
    second = data[1] if len(data) > 1 else None
    if second is None:
        return None
    if op in ("Add", "Mul"):
        if not _per_tensor(second, constants):
            return None
        return _copy(node, target, domain, [*first, *second, out[1], out[2]], [out[0]])
    bias = _bias(node, data, constants)
    if bias is None:
        return None
    if op == "Conv":
        return _copy(node, target, domain, [*first, *second, out[1], out[2], *bias], [out[0]])
    if op == "MatMul":
        return _copy(node, target, domain, [*first, *second, out[1], out[2]], [out[0]])
    beta = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "beta"), 1.0)
    if beta != 1.0:
        return None
    made = _copy(node, target, domain, [*first, *second, *(bias or [""]), out[1], out[2]], [out[0]])
    del made.attribute[:]
    made.attribute.extend(a for a in node.attribute if a.name in ("alpha", "transA", "transB"))
    return made


def _bias(node: onnx.NodeProto, data: list, constants: dict[str, Constant]) -> list[str] | None:
    """[] without a bias; [int32 bias] when a DequantizeLinear of int32 with zero offset gives it, or
    when it is a float constant (quantized here as onnxruntime's quantizer does: to the scale
    input scale x weight scale, rounded to nearest even); None otherwise."""
    if len(node.input) < 3 or not node.input[2] or node.op_type == "MatMul":
        return []
    d = data[2]
    if d is None and node.input[2] in constants:
        return _quantized_bias(node, data, constants)
    if d is None or d[0] not in constants or constants[d[0]].dtype != np.int32:
        return None
    zero = constants.get(d[2])
    if d[2] and (zero is None or np.any(zero.value() != 0)):
        return None
    return [d[0]]


def _copy(node: onnx.NodeProto, op: str, domain: str, inputs: list[str], outputs: list[str]) -> onnx.NodeProto:
    made = helper.make_node(op, inputs, outputs, name=node.name, domain=domain or None)
    made.attribute.extend(node.attribute)
    return made


def _quantized_bias(node: onnx.NodeProto, data: list, constants: dict[str, Constant]) -> list[str] | None:
    bias = constants[node.input[2]]
    x, w = data[0], data[1]
    if bias.dtype != np.float32 or x is None or w is None or w[1] not in constants or x[1] not in constants:
        return None
    scale = constants[x[1]].value().astype(np.float32) * constants[w[1]].value().astype(np.float32)
    value = np.rint(bias.value() / scale.reshape(-1)).astype(np.int32)
    name = f"{node.input[2]}_int32"
    constants[name] = Constant(name, tuple(value.shape), np.dtype(np.int32), "folded", _value=value)
    return [name]


def _unary(
    node: onnx.NodeProto,
    out: tuple[str, str, str],
    producer: Mapping[str, onnx.NodeProto],
    constants: dict[str, Constant],
) -> onnx.NodeProto | None:
    """A one-input float op (HardSwish, HardSigmoid, Tanh, Relu, ...) as memplan's QLinearUnary: a
    table of its values over the input's 256 integers."""
    if node.op_type not in UNARY or len([i for i in node.input if i]) != 1:
        return None
    x = _dq(node.input[0], producer)
    if x is None or not _per_tensor(x, constants):
        return None
    made = _copy(node, "QLinearUnary", "memplan", [*x, out[1], out[2]], [out[0]])
    made.attribute.append(helper.make_attribute("op", node.op_type))
    return made
