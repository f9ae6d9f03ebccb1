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
3. an inference BatchNormalization -> a depthwise 1x1 QLinearConv (per-channel scale and bias);
4. any other one-input float op (HardSwish, HardSigmoid, Tanh, ...) -> memplan's QLinearUnary, a
   table of the op's values over the 256 integers;
5. an op -> Relu -> QuantizeLinear chain -> the integer op, then a Relu on its integers (a clamp at
   the zero point, exactly what quantizing the float Relu gives);
6. ops that only move or select values (MaxPool, Reshape, Flatten, Transpose, Squeeze, Unsqueeze,
   Dropout, Identity) run on the integers directly when the scale and zero point around them agree;
7. then a QLinearSigmoid read only by a QLinearMul of its own input by it (SiLU, Swish) -> memplan's
   QLinearSigmoidMul, one table of the pair's integers that runs over its input.

A DequantizeLinear left with no reader goes. The weights' DequantizeLinear nodes are kept from
constant folding first (`qdq_weights`), or their integers would be gone by the time this runs.
Nothing else changes: a group that does not match (a float op, per-channel activations) stays as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from runtime.constants import Constant
from runtime.quantization import QuantParams

MS = "com.microsoft"
QLINEAR = {  # float op -> (integer op, domain)
    "Conv": ("QLinearConv", ""),
    "MatMul": ("QLinearMatMul", ""),
    "Gemm": ("QGemm", MS),
    "Add": ("QLinearAdd", MS),
    "Sum": ("QLinearAdd", MS),  # of two inputs
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
    nodes: Sequence[onnx.NodeProto], constants: dict[str, Constant], types: dict[str, Any], keep: set[str]
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
        if node.domain not in ("", "ai.onnx") or not node.output or node.output[0] in keep or id(node) in replaced:
            continue
        users = readers.get(node.output[0], [])
        relu = users[0] if len(users) == 1 and _is(users[0], "Relu") and users[0].output[0] not in keep else None
        if relu is not None:  # op -> Relu -> QuantizeLinear: the integer op, then a clamp at the zero point
            users = readers.get(relu.output[0], [])
        ahead = relu.output[0] if relu is not None else node.output[0]
        if len(users) != 1 or not _is(users[0], "QuantizeLinear") or users[0].input[0] != ahead:
            continue
        q = users[0]
        made = _integer_node(node, q, producer, constants)
        if made is None:
            continue
        replaced[id(node)] = made
        dropped.add(id(q))
        if relu is not None:
            middle = f"{node.output[0]}_quantized"
            made.output[0] = middle
            types[middle] = types[q.output[0]]
            clamp = [middle, q.input[1], q.input[2], q.input[1], q.input[2]]
            replaced[id(relu)] = helper.make_node(
                "QLinearUnary", clamp, [q.output[0]], name=relu.name, domain="memplan", op="Relu"
            )
    out = [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]
    read = {i for n in out for i in n.input if i} | keep
    out = [n for n in out if not (_is(n, "DequantizeLinear") and n.output[0] not in read)]
    out, silu = _sigmoid_mul(out, keep)
    return out, len(replaced) + silu


def _sigmoid_mul(nodes: list[onnx.NodeProto], keep: set[str]) -> tuple[list[onnx.NodeProto], int]:
    """Each QLinearSigmoid whose only reader is a QLinearMul of its own input by it (SiLU, Swish) made
    one memplan QLinearSigmoidMul with the Mul's output: a table of the pair's integers, which runs
    over its input instead of holding the input and its sigmoid at once."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for name in dict.fromkeys(i for i in n.input if i):
            readers.setdefault(name, []).append(n)
    joined: dict[int, onnx.NodeProto] = {}
    gone: set[int] = set()
    for s in nodes:
        if s.op_type != "QLinearSigmoid" or s.domain != MS or len(s.input) < 5 or s.output[0] in keep:
            continue
        users = readers.get(s.output[0], [])
        mul = users[0] if len(users) == 1 and users[0].op_type == "QLinearMul" and users[0].domain == MS else None
        if mul is None or id(mul) in joined:
            continue
        sides = [list(mul.input[0:3]), list(mul.input[3:6])]
        x_side, s_side = list(s.input[0:3]), [s.output[0], *s.input[3:5]]
        if sorted(map(tuple, sides)) != sorted(map(tuple, (x_side, s_side))):
            continue
        y = list(mul.input[6:8])
        joined[id(mul)] = helper.make_node(
            "QLinearSigmoidMul", [*x_side, *s.input[3:5], *y], [mul.output[0]], name=mul.name, domain="memplan"
        )
        gone.add(id(s))
    return [joined.get(id(n), n) for n in nodes if id(n) not in gone], len(joined)


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
    if op == "BatchNormalization":
        return _batchnorm(node, out, producer, constants)
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
    if op == "Sum" and len(node.input) != 2:
        return None
    if op in ("Add", "Mul", "Sum"):
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


def _batchnorm(
    node: onnx.NodeProto,
    out: tuple[str, str, str],
    producer: Mapping[str, onnx.NodeProto],
    constants: dict[str, Constant],
) -> onnx.NodeProto | None:
    """Inference BatchNormalization (a quantizer leaves it when the model was not pre-processed) as
    a depthwise 1x1 QLinearConv: per channel ``y = a * x + b``, `a` an int8 weight of +-127 with
    scale |a| / 127 (exact) and `b` an int32 bias at scale ``x_scale * w_scale``, as a BatchNorm
    folded into a conv would be quantized."""
    x = _dq(node.input[0], producer)
    params = [_constant(p, producer, constants) for p in node.input[1:5]]
    if x is None or not _per_tensor(x, constants) or len(params) != 4 or any(p is None for p in params):
        return None
    if any(o for o in node.output[1:]):
        return None  # training outputs
    eps = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "epsilon"), 1e-5)
    gamma, beta, mean, var = (np.asarray(p, dtype=np.float64) for p in params)
    a = gamma / np.sqrt(var + eps)
    b = beta - mean * a
    w_scale = np.where(a == 0, 1.0, np.abs(a) / 127).astype(np.float32)
    weight = (np.sign(a) * 127).astype(np.int8).reshape(-1, 1, 1, 1)
    x_scale = float(constants[x[1]].value())
    bias = np.rint(b / (x_scale * w_scale.astype(np.float64))).astype(np.int32)
    made: dict[str, np.ndarray] = {
        "w": weight,
        "w_scale": w_scale,
        "w_zero": np.zeros(a.size, np.int8),
        "bias": bias,
    }
    names = []
    for key, value in made.items():
        name = f"{node.name}_{key}"
        constants[name] = Constant(name, tuple(value.shape), value.dtype, "folded", _value=value)
        names.append(name)
    inputs = [*x, names[0], names[1], names[2], out[1], out[2], names[3]]
    conv = helper.make_node("QLinearConv", inputs, [out[0]], name=node.name, group=int(a.size), kernel_shape=[1, 1])
    return conv


def _constant(
    name: str, producer: Mapping[str, onnx.NodeProto], constants: Mapping[str, Constant]
) -> np.ndarray | None:
    """A constant's value, or a DequantizeLinear's of constants (dequantized here, in float32)."""
    if name in constants:
        return constants[name].value()
    d = _dq(name, producer)
    if d is None or not all(not n or n in constants for n in d):
        return None
    zero = constants[d[2]].value().astype(np.int64) if d[2] else 0
    return ((constants[d[0]].value().astype(np.int64) - zero) * constants[d[1]].value()).astype(np.float32)


# Where an integer op names its tensors' quantization: (tensor, scale, zero point) input indices,
# the tensor "out" for output 0, and the channel axis of a per-channel scale.
QUANTIZED_TENSORS: dict[str, tuple[tuple[int | str, int, int, int], ...]] = {
    "QLinearConv": ((0, 1, 2, 1), (3, 4, 5, 0), ("out", 6, 7, 1)),
    "QLinearMatMul": ((0, 1, 2, -1), (3, 4, 5, -1), ("out", 6, 7, -1)),
    "QGemm": ((0, 1, 2, -1), (3, 4, 5, 0), ("out", 7, 8, -1)),
    "QLinearAdd": ((0, 1, 2, 1), (3, 4, 5, 1), ("out", 6, 7, 1)),
    "QLinearMul": ((0, 1, 2, 1), (3, 4, 5, 1), ("out", 6, 7, 1)),
    "QLinearSigmoid": ((0, 1, 2, 1), ("out", 3, 4, 1)),
    "QLinearLeakyRelu": ((0, 1, 2, 1), ("out", 3, 4, 1)),
    "QLinearGlobalAveragePool": ((0, 1, 2, 1), ("out", 3, 4, 1)),
    "QLinearAveragePool": ((0, 1, 2, 1), ("out", 3, 4, 1)),
    "QLinearUnary": ((0, 1, 2, 1), ("out", 3, 4, 1)),
    "QLinearSigmoidMul": ((0, 1, 2, 1), ("out", 5, 6, 1)),
    "QLinearConcat": (("out", 0, 1, 1),),
}


def quantization_of(nodes: Sequence[Any], constants: Mapping[str, Constant]) -> dict[str, QuantParams]:
    """The quantization (`QuantParams`) of every tensor a quantized ONNX graph's integer ops,
    QuantizeLinear or DequantizeLinear nodes name with constant scales, by tensor name: what the
    model page shows beside each tensor's dtype, as a `.tflite` file's tensors carry it."""
    found: dict[str, QuantParams] = {}

    def note(tensor: str, scale: str, zero: str, axis: int) -> None:
        if not tensor or scale not in constants or (zero and zero not in constants):
            return
        s = constants[scale].value()
        z = constants[zero].value() if zero else np.zeros(s.shape, np.int64)
        found.setdefault(tensor, QuantParams(s, z, axis if s.size > 1 else None))

    for n in nodes:
        ins = list(n.inputs)
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain in ("", "ai.onnx") and len(ins) > 1:
            axis = int(n.attributes.get("axis", 1))
            zero = ins[2] if len(ins) > 2 else ""
            tensor = n.outputs[0] if n.op_type == "QuantizeLinear" else ins[0]
            note(tensor, ins[1], zero, axis)
            continue
        for tensor, scale, zero, axis in QUANTIZED_TENSORS.get(n.op_type, ()):
            if max(scale, zero) < len(ins):
                name = n.outputs[0] if tensor == "out" else ins[int(tensor)]
                note(name, ins[scale], ins[zero], axis)
        if n.op_type == "QLinearConcat":
            for i in range(2, len(ins) - 2, 3):
                note(ins[i], ins[i + 1], ins[i + 2], 1)
    return found
