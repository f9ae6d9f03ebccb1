"""Static types for every tensor: binding the inputs' shapes, onnx's inference, memplan's own.

memplan plans static sizes, so every tensor needs a concrete shape. The caller binds the
graph inputs, by whole shapes (whatever the model declares: -1, 0, '?' reused for several
axes) or by naming symbolic dims; onnx's shape inference (with data propagation) does the
rest; a few op families it may leave unknown (ops from unknown domains, nodes after one
whose inference failed) are covered by memplan's own rules in `RULES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from runtime.constants import Constant
from runtime.errors import ShapeError, UnboundDim, UnboundDimError, show_dims

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


def check_shapes(
    declared: Mapping[str, Dims | None], shapes: Mapping[str, Sequence[int]]
) -> dict[str, tuple[int, ...]]:
    """Whole input shapes given by the caller, checked against the inputs' declared dims.

    A whole shape binds every axis of its input whatever the model declares there (-1, 0, a
    name, a name reused for other axes, nothing), except a fixed positive size, which it must
    repeat. Refused, naming the input and what it takes: a name that is no graph input, a
    wrong rank, a size that is not a positive whole number.
    """
    checked: dict[str, tuple[int, ...]] = {}
    for name, sizes in shapes.items():
        where = f"shape of {name!r}"
        if name not in declared:
            listed = ", ".join(f"{n!r} {show_dims(d)}" for n, d in declared.items()) or "none"
            raise ShapeError(f"{where}: the model has no input {name!r}; its inputs are {listed}")
        sizes = list(sizes)
        for axis, size in enumerate(sizes):
            if isinstance(size, bool) or not isinstance(size, int | np.integer) or size <= 0:
                raise ShapeError(
                    f"{where}: sizes must be positive whole numbers, got {size!r} at axis {axis} of {sizes}"
                )
        dims = declared[name]
        if dims is not None and len(dims) != len(sizes):
            raise ShapeError(
                f"{where}: {len(sizes)} size(s) given, but input {name!r} {show_dims(dims)} has rank {len(dims)}; "
                f"give {len(dims)} sizes, e.g. {'x'.join(map(str, example_shape(dims, {})))}"
            )
        for axis, (d, size) in enumerate(zip(dims or (), sizes, strict=True)):
            if isinstance(d, int) and d > 0 and d != size:
                raise ShapeError(f"{where}: axis {axis} of input {name!r} is fixed at {d} in the model, got {size}")
        checked[name] = tuple(int(x) for x in sizes)
    return checked


def example_shape(dims: Dims, bound: Mapping[str, int]) -> list[int]:
    """A whole shape to suggest for declared `dims`: fixed sizes kept, named dims bound in `bound`,
    1 for a leading (batch) axis and 224 for any other free one."""
    out = []
    for axis, d in enumerate(dims):
        if isinstance(d, int) and d > 0:
            out.append(d)
        elif isinstance(d, str) and d in bound and bound[d] > 0:
            out.append(bound[d])
        else:
            out.append(1 if axis == 0 else 224)
    return out


def bind_inputs(
    inputs: Iterable[onnx.ValueInfoProto],
    dims: Mapping[str, int],
    shapes: Mapping[str, Sequence[int]] | None = None,
    default_dim: int | None = None,
) -> tuple[dict[str, TensorType], dict[str, int]]:
    """Concrete types of the graph inputs, and the value each dim name took.

    An input in `shapes` takes that whole shape (`check_shapes`). Any other input's symbolic
    dims are bound by name from `dims`; a dim nothing binds (a name missing from `dims`, an
    unnamed dim, a negative size) takes `default_dim` when given, else it is listed in an
    `UnboundDimError` with its input and axis. A name in `dims` that no input declares is an
    error. The names returned are those whose every axis got the same size (a name reused for
    axes of different sizes binds none), for binding the graph outputs' declared dims.
    """
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ShapeError(f"dims[{name!r}]: must be a non-negative integer, got {value!r}")
    declared: dict[str, TensorType] = {}
    for vi in inputs:
        t = type_of(vi)
        if t is None:
            raise ShapeError(
                f"graph input {vi.name!r} is not a tensor with an element type; memplan runs tensor inputs only"
            )
        declared[vi.name] = t
    whole = check_shapes({name: t.dims for name, t in declared.items()}, shapes or {})
    bound: dict[str, TensorType] = {}
    unbound: list[UnboundDim] = []
    for name, t in declared.items():
        if name in whole:
            bound[name] = TensorType(t.elem_type, whole[name])
            continue
        if t.dims is None:
            raise ShapeError(
                f"graph input {name!r} declares no shape, not even its rank; give its whole shape "
                f"(shapes={{{name!r}: [sizes]}}, or --shape {name}=1x3x224x224 on the command line)"
            )
        out: list[int] = []
        for axis, d in enumerate(t.dims):
            if isinstance(d, int) and d >= 0:
                out.append(d)
            elif isinstance(d, str) and d in dims:
                out.append(int(dims[d]))
            elif default_dim is not None:
                out.append(default_dim)
            else:
                unbound.append(UnboundDim(name, axis, d))
        bound[name] = TensorType(t.elem_type, tuple(out))
    if unbound:
        names = dict.fromkeys(u.input for u in unbound)
        raise UnboundDimError(
            unbound,
            {n: list(declared[n].dims or ()) for n in names},
            {n: example_shape(declared[n].dims or (), dims) for n in names},
        )
    declared_names = {d for t in declared.values() for d in t.dims or () if isinstance(d, str)}
    unused = sorted(set(dims) - declared_names)
    if unused:
        raise ShapeError(
            f"dims names {unused}, which no graph input uses; symbolic dims of the inputs: {sorted(declared_names)}"
        )
    return bound, _names_bound(declared, bound)


def _names_bound(declared: Mapping[str, TensorType], bound: Mapping[str, TensorType]) -> dict[str, int]:
    sizes: dict[str, set[int]] = {}
    for name, t in declared.items():
        for d, size in zip(t.dims or (), bound[name].shape, strict=False):
            if isinstance(d, str):
                sizes.setdefault(d, set()).add(size)
    return {d: next(iter(s)) for d, s in sorted(sizes.items()) if len(s) == 1}


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
    The graph outputs keep their declared types, with the symbolic dims in `dims` bound and
    negative sizes made unknown."""
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
            elif d.HasField("dim_value") and d.dim_value < 0:
                d.Clear()  # -1 (Paddle's "unknown") would contradict the size inference finds
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
