"""Static types for every tensor: binding symbolic dims, onnx's inference, memplan's own.

memplan plans static sizes, so every tensor needs a concrete shape. The caller binds the
graph inputs' symbolic dims; onnx's shape inference (with data propagation) does the
rest; a few op families it may leave unknown (ops from unknown domains, nodes after one
whose inference failed) are covered by memplan's own rules in `RULES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from runtime.constants import Constant
from runtime.errors import ShapeError

# Constants up to this size go into the model handed to onnx's inference as data (shape
# inputs, axes, pads are tiny); larger ones go in as typed inputs, so no weight is copied.
SMALL_CONSTANT_BYTES = 1 << 16

Dims = tuple[int | str | None, ...]


@dataclass(frozen=True)
class TensorType:
    elem_type: int
    dims: Dims | None  # None: rank unknown

    @property
    def static(self) -> bool:
        return self.dims is not None and all(isinstance(d, int) and d >= 0 for d in self.dims)

    @property
    def shape(self) -> tuple[int, ...]:
        assert self.static and self.dims is not None
        return tuple(int(d) for d in self.dims)  # type: ignore[arg-type]


def type_of(value_info: onnx.ValueInfoProto) -> TensorType | None:
    """The tensor type of a ValueInfoProto, or None when it is not a tensor with a type."""
    if not value_info.type.HasField("tensor_type"):
        return None
    tt = value_info.type.tensor_type
    if not tt.elem_type:
        return None
    if not tt.HasField("shape"):
        return TensorType(tt.elem_type, None)
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorType(tt.elem_type, tuple(dims))


def bind_dims(
    inputs: Iterable[onnx.ValueInfoProto], dims: Mapping[str, int], default_dim: int | None
) -> dict[str, TensorType]:
    """Concrete types of the graph inputs; every symbolic dim must be bound by `dims`.

    Unnamed unknown dims take `default_dim` when given. Errors list each unbound dim with
    the inputs that use it, and each name in `dims` that no input uses.
    """
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ShapeError(f"dims[{name!r}]: must be a non-negative integer, got {value!r}")
    bound: dict[str, TensorType] = {}
    unbound: dict[str, list[str]] = {}
    used: set[str] = set()
    for vi in inputs:
        t = type_of(vi)
        if t is None:
            raise ShapeError(
                f"graph input {vi.name!r} is not a tensor with an element type; memplan runs tensor inputs only"
            )
        if t.dims is None:
            raise ShapeError(f"graph input {vi.name!r} has no shape; memplan needs the rank and size of every input")
        out: list[int] = []
        for axis, d in enumerate(t.dims):
            if isinstance(d, int) and d < 0:
                raise ShapeError(f"graph input {vi.name!r}: dim {axis} is {d}; a dim is a size >= 0 or a symbolic name")
            if isinstance(d, int):
                out.append(d)
            elif isinstance(d, str) and d in dims:
                used.add(d)
                out.append(int(dims[d]))
            elif default_dim is not None:
                out.append(default_dim)
            else:
                label = d if isinstance(d, str) else f"<unnamed axis {axis} of {vi.name}>"
                unbound.setdefault(label, []).append(vi.name)
        bound[vi.name] = TensorType(t.elem_type, tuple(out))
    if unbound:
        listed = "; ".join(f"{dim!r} (used by {', '.join(map(repr, names))})" for dim, names in sorted(unbound.items()))
        raise ShapeError(
            f"unbound symbolic dimension(s): {listed}; bind them with dims={{name: size}} or pass default_dim"
        )
    unused = sorted(set(dims) - used)
    if unused:
        raise ShapeError(
            f"dims names {unused}, which no graph input uses; symbolic dims of the inputs: {_all_params(bound, inputs)}"
        )
    return bound


def _all_params(_bound: Mapping[str, TensorType], inputs: Iterable[onnx.ValueInfoProto]) -> list[str]:
    params: set[str] = set()
    for vi in inputs:
        t = type_of(vi)
        if t is not None and t.dims is not None:
            params.update(d for d in t.dims if isinstance(d, str))
    return sorted(params)


def value_info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, t.elem_type, None if t.dims is None else list(t.dims))


def constant_type(c: Constant) -> TensorType:
    return TensorType(helper.np_dtype_to_tensor_dtype(c.dtype), c.shape)


def skeleton(
    model: onnx.ModelProto,
    nodes: Iterable[onnx.NodeProto],
    inputs: Mapping[str, TensorType],
    constants: Mapping[str, Constant],
    dims: Mapping[str, int],
) -> onnx.ModelProto:
    """A light copy of `model` for onnx's checker and inference: the given nodes, inputs
    with bound dims, small constants as initializers and large ones as typed inputs.
    The graph outputs keep their declared types, with the symbolic dims in `dims` bound."""
    graph = onnx.GraphProto(name=model.graph.name or "memplan")
    graph.node.extend(nodes)
    graph.input.extend(value_info(name, t) for name, t in inputs.items())
    for name, c in constants.items():
        # External data stays on disk until something executes: inference sees its type only.
        if c.nbytes <= SMALL_CONSTANT_BYTES and c.dtype.kind != "O" and (c.loaded or c.source != "external"):
            graph.initializer.append(numpy_helper.from_array(c.value(), name))
        else:
            graph.input.append(value_info(name, constant_type(c)))
    for declared in model.graph.output:
        vi = graph.output.add()
        vi.CopyFrom(declared)
        for d in vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ():
            if d.HasField("dim_param") and d.dim_param in dims:
                d.dim_value = int(dims[d.dim_param])
    skel = onnx.ModelProto(ir_version=max(model.ir_version, 4), graph=graph)
    skel.opset_import.extend(model.opset_import)
    skel.functions.extend(model.functions)
    return skel


def infer(skel: onnx.ModelProto) -> dict[str, TensorType]:
    """Types onnx's shape inference (with data propagation) finds for the skeleton's tensors."""
    try:
        inferred = onnx.shape_inference.infer_shapes(skel, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as e:
        raise ShapeError(f"onnx shape inference failed: {str(e).strip()}") from None
    types: dict[str, TensorType] = {}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        t = type_of(vi)
        if t is not None:
            types[vi.name] = t
    return types


# ---- memplan's own rules for what onnx leaves unknown -----------------------------------------------

Rule = Callable[[onnx.NodeProto, list[TensorType | None], int], list[TensorType | None]]
RULES: dict[str, Rule] = {}

_SAME_SHAPE = [
    "Abs",
    "Acos",
    "Asin",
    "Atan",
    "Ceil",
    "Celu",
    "Cos",
    "Cosh",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "LRN",
    "Mish",
    "Neg",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "Clip",
]
_BROADCAST = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Mod", "BitShift"]
_COMPARE = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"]


def _same_shape(node: onnx.NodeProto, ins: list[TensorType | None], opset: int) -> list[TensorType | None]:
    return [ins[0]] + [None] * (len(node.output) - 1) if ins and ins[0] is not None else [None] * len(node.output)


def _dropout(node: onnx.NodeProto, ins: list[TensorType | None], opset: int) -> list[TensorType | None]:
    # The mask has the input's shape; it is bool from opset 10 on, the input's type before.
    x = ins[0] if ins else None
    if x is None:
        return [None] * len(node.output)
    out: list[TensorType | None] = [x, TensorType(TensorProto.BOOL if opset >= 10 else x.elem_type, x.dims)]
    return out[: len(node.output)]


def _broadcast_dims(types: list[TensorType | None]) -> Dims | None:
    if any(t is None or not t.static for t in types):
        return None
    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in types if t is not None)))
    except ValueError:
        return None


def _broadcast(node: onnx.NodeProto, ins: list[TensorType | None], opset: int) -> list[TensorType | None]:
    dims = _broadcast_dims(ins)
    return [None if dims is None or ins[0] is None else TensorType(ins[0].elem_type, dims)]


def _compare(node: onnx.NodeProto, ins: list[TensorType | None], opset: int) -> list[TensorType | None]:
    dims = _broadcast_dims(ins)
    return [None if dims is None else TensorType(TensorProto.BOOL, dims)]


def _where(node: onnx.NodeProto, ins: list[TensorType | None], opset: int) -> list[TensorType | None]:
    dims = _broadcast_dims(ins)
    return [None if dims is None or ins[1] is None else TensorType(ins[1].elem_type, dims)]


def _cast(node: onnx.NodeProto, ins: list[TensorType | None], opset: int) -> list[TensorType | None]:
    to = next((a.i for a in node.attribute if a.name == "to"), 0)
    return [None if not to or ins[0] is None else TensorType(to, ins[0].dims)]


for _op in _SAME_SHAPE:
    RULES[_op] = _same_shape
for _op in _BROADCAST:
    RULES[_op] = _broadcast
for _op in _COMPARE:
    RULES[_op] = _compare
RULES["Where"] = _where
RULES["Cast"] = _cast
RULES["Dropout"] = _dropout


def fill_unknown(nodes: Iterable[onnx.NodeProto], types: dict[str, TensorType], opset: int) -> None:
    """Apply `RULES`, in schedule order, to outputs whose shapes onnx left unknown; then,
    backwards, give the input of a shape-preserving op the shape of its known output."""
    nodes = list(nodes)
    _forward(nodes, types, opset)
    for node in reversed(nodes):
        if node.domain not in ("", "ai.onnx") or not node.input or not node.output:
            continue
        if RULES.get(node.op_type) not in (_same_shape, _cast) and node.op_type != "CastLike":
            continue
        out, src = types.get(node.output[0]), types.get(node.input[0])
        if out is not None and out.static and src is not None and not src.static and src.elem_type:
            # e.g. ReduceSum -> Cast -> Sqrt -> CastLike(declared graph output): the reduction's
            # axes arrive at run time, but the model promises the output's shape.
            types[node.input[0]] = TensorType(src.elem_type, out.dims)
    _forward(nodes, types, opset)


def _forward(nodes: Iterable[onnx.NodeProto], types: dict[str, TensorType], opset: int) -> None:
    for node in nodes:
        if all(not o or (o in types and types[o].static) for o in node.output):
            continue
        rule = RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if rule is None:
            continue
        ins = [types.get(name) if name else None for name in node.input]
        for name, t in zip(node.output, rule(node, ins, opset), strict=False):
            if name and t is not None and t.static and not (name in types and types[name].static):
                types[name] = t
