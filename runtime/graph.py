"""Loading an ONNX model into memplan's `Graph`: static types, folded constants, a schedule.

`load_model` is the only way in. It parses the model without reading external weights,
checks its structure (unique names, no cycle, nodes in topological order: that order is
the schedule memplan plans and runs), runs onnx's checker, binds the caller's symbolic
dims, folds everything computed only from constants, and gives every remaining tensor a
static shape, a numpy dtype and a size in bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnx

from runtime.constants import Constant, from_initializer, np_dtype
from runtime.errors import ModelError, ShapeError, TensorTooLargeError
from runtime.fold import fold_pass
from runtime.fuse import fold_batchnorm, fuse_conv_activation, fuse_erf_gelu, fuse_pointwise_conv_add
from runtime.fuse_qdq import fuse_qdq, qdq_weights, quantization_of
from runtime.fuse_se import fuse_squeeze_excite
from runtime.graph_types import DEFAULT_MAX_TENSOR_BYTES, FUSIONS, Graph, Node, TensorInfo
from runtime.kernels import attributes_of
from runtime.qlinear_types import infer_quantized
from runtime.shapes import TensorType, bind_inputs, fill_unknown, skeleton, type_of
from runtime.tflite import is_tflite, read_tflite

__all__ = ["DEFAULT_MAX_TENSOR_BYTES", "FUSIONS", "Graph", "Node", "TensorInfo", "load_model"]

MAX_FOLD_ROUNDS = 16  # each round may expose more constants (Shape -> Gather -> Reshape chains)


def load_model(
    source: str | os.PathLike[str] | bytes | onnx.ModelProto,
    dims: Mapping[str, int] | None = None,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    default_dim: int | None = None,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    base_dir: str | os.PathLike[str] | None = None,
    fold: bool = True,
    fuse: bool = True,
) -> Graph:
    """Load, check, bind, fold and type a model; see the module docstring.

    `source` is a path, the serialized bytes, or a ModelProto; a `.tflite` file (told by its content,
    the identifier "TFL3" at bytes 4..8) is read by `runtime.tflite` into the same Graph. `shapes` binds whole input
    shapes ({input name: sizes}) whatever the model declares (-1, 0, unnamed, a name reused
    for different axes); `dims` binds the other inputs' symbolic dims by name; `default_dim`,
    when given, sizes every dim left unbound (otherwise an unbound dim is an `UnboundDimError`
    naming its input and axis). External
    data is looked up in the model's folder (`base_dir` for bytes or a ModelProto). Any
    tensor larger than `max_tensor_bytes` is refused before it is allocated. With `fuse`,
    inference BatchNormalization is folded into the Conv before it, a 1x1 Conv is fused
    with the residual Add after it, the exact GELU's five ops become one Gelu, and a Conv
    with the activation after it becomes one ConvAct (`runtime.fuse`).
    """
    tflite_bytes, tflite_path = _tflite_source(source)
    if tflite_bytes is not None:  # picked by content: the TFLite identifier at bytes 4..8
        if dims:
            raise ShapeError(f"dims: a .tflite model has no symbolic dims to bind ({', '.join(dims)} given)")
        return read_tflite(tflite_bytes, max_tensor_bytes=max_tensor_bytes, shapes=shapes, path=tflite_path)
    model, model_dir = _parse(source, base_dir)
    graph = model.graph
    opset = _default_opset(model)
    constants = {t.name: from_initializer(t, model_dir) for t in graph.initializer}
    input_protos = [vi for vi in graph.input if vi.name not in constants]
    nodes = _named_nodes(graph)
    _check_structure(graph, nodes, constants)
    outputs = tuple(vi.name for vi in graph.output)
    for vi in (*input_protos, *graph.output):
        if type_of(vi) is None:
            kind = vi.type.WhichOneof("value") or "untyped"
            raise ShapeError(
                f"graph input or output {vi.name!r} is {kind.replace('_type', '')}, not a tensor; memplan runs tensors only"
            )
    declared = {vi.name: t for vi in input_protos if (t := type_of(vi)) is not None}
    _check(skeleton(model, nodes, declared, constants, {}))

    inputs, named = bind_inputs(input_protos, dict(dims or {}), shapes, default_dim)
    for name, t in inputs.items():
        _check_bytes(name, t.shape, np_dtype(t.elem_type, f"input {name!r}"), "graph input", max_tensor_bytes)
    keep = set(outputs)
    # A QDQ model's weights stay DequantizeLinear nodes until fuse_qdq makes their ops integer.
    fold_keep = keep | qdq_weights(nodes, constants) if fuse else keep
    folded = 0
    types = infer_quantized(skeleton(model, nodes, inputs, constants, named))
    for _ in range(MAX_FOLD_ROUNDS if fold else 0):
        nodes, count = fold_pass(nodes, constants, types, fold_keep, opset, max_tensor_bytes)
        if not count:
            break
        folded += count
        types = infer_quantized(skeleton(model, nodes, inputs, constants, named))
    fused = 0
    if fuse:
        nodes, fused = fold_batchnorm(nodes, constants, keep)
        if fused:
            types = infer_quantized(skeleton(model, nodes, inputs, constants, named))
    fill_unknown(nodes, types, opset)
    residual = gelus = activations = excites = qdq = 0
    if fuse:
        nodes, qdq = fuse_qdq(nodes, constants, types, keep)
        if qdq and fold:  # the DequantizeLinear nodes of weights no integer op took fold as before
            nodes, count = fold_pass(nodes, constants, types, keep, opset, max_tensor_bytes)
            folded += count
        # After typing: the fused node's output keeps the Add's type, the Conv's output goes.
        nodes, residual = fuse_pointwise_conv_add(nodes, constants, types, keep)
        nodes, gelus = fuse_erf_gelu(nodes, constants, types, keep)
        nodes, activations = fuse_conv_activation(nodes, constants, types, keep)
        nodes, excites = fuse_squeeze_excite(nodes, constants, types, keep)
    types.update(inputs)
    loaded = _build(model, nodes, inputs, outputs, constants, types, opset, named, max_tensor_bytes, model_dir, folded)
    loaded.fusions = {
        "batchnorm_into_conv": fused,
        "pointwise_conv_add": residual,
        "gelu": gelus,
        "conv_activation": activations,
        "squeeze_excite": excites,
        "qdq": qdq,
    }
    for name, q in quantization_of(loaded.nodes, loaded.constants).items():  # quantized ONNX's integer tensors
        if name in loaded.tensors and loaded.tensors[name].dtype.kind in "iu":
            loaded.tensors[name] = replace(loaded.tensors[name], quant=q)
    return loaded


# ---- parsing and structure ----------------------------------------------------------------------------


def _tflite_source(source: Any) -> tuple[bytes | None, str | None]:
    """(the file's bytes, its path if it is a file) when `source` is a `.tflite` model; (None, None) otherwise."""
    if isinstance(source, bytes | bytearray | memoryview):
        return (bytes(source), None) if is_tflite(bytes(source[:8])) else (None, None)
    if isinstance(source, str | os.PathLike) and os.path.isfile(source):
        with open(source, "rb") as f:
            if is_tflite(f.read(8)):
                f.seek(0)
                return f.read(), os.path.abspath(os.fspath(source))
    return None, None


def _parse(source: Any, base_dir: Any) -> tuple[onnx.ModelProto, str | None]:
    model_dir = None if base_dir is None else os.fspath(base_dir)
    if isinstance(source, onnx.ModelProto):
        model = source
    elif isinstance(source, bytes | bytearray | memoryview):
        model = onnx.ModelProto()
        try:
            model.ParseFromString(bytes(source))
        except Exception as e:  # protobuf raises DecodeError, or RuntimeWarning-like errors
            raise ModelError(f"the bytes are not an ONNX model: protobuf could not parse them ({e})") from None
    else:
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise ModelError(f"model file {path!r} does not exist")
        try:
            model = onnx.load(path, load_external_data=False)
        except Exception as e:
            raise ModelError(
                f"{os.path.basename(path)!r} is not an ONNX model: protobuf could not parse it ({e})"
            ) from None
        model_dir = model_dir or os.path.dirname(os.path.abspath(path))
    if not model.HasField("graph") or not model.graph.output:
        raise ModelError("not an ONNX model: it has no graph, or its graph has no outputs")
    return model, model_dir


def _default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    raise ModelError("opset_import: the model imports no version of the default ONNX domain ('' or 'ai.onnx')")


def _named_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes, each with a unique name (synthesised from op type and index when
    missing or repeated)."""
    taken = {n.name for n in graph.node if n.name}
    seen: set[str] = set()
    out = []
    for i, proto in enumerate(graph.node):
        node = onnx.NodeProto()
        node.CopyFrom(proto)
        if not node.name or node.name in seen:
            base = f"{node.op_type}_{i}"
            name, k = base, 1
            while name in taken or name in seen:
                name, k = f"{base}_{k}", k + 1
            node.name = name
        seen.add(node.name)
        out.append(node)
    return out


def _check_structure(graph: onnx.GraphProto, nodes: list[onnx.NodeProto], constants: Mapping[str, Constant]) -> None:
    """Unique tensor names, no cycle, and every node after the producers of its inputs."""
    producer: dict[str, str] = {}
    for kind, names in (
        ("initializer", [t.name for t in graph.initializer]),
        ("graph input", [vi.name for vi in graph.input if vi.name not in constants]),
    ):
        for name in names:
            if name in producer:
                raise ModelError(f"duplicate tensor name {name!r}: {kind} {name!r} is also {producer[name]}")
            producer[name] = f"a {kind}"
    position: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.output:
            if not name:
                continue
            if name in producer:
                raise ModelError(
                    f"duplicate tensor name {name!r}: node {node.name!r} writes it but it is already {producer[name]}; "
                    "every tensor must have exactly one producer"
                )
            producer[name] = f"the output of node {node.name!r}"
            position[name] = i
    for i, node in enumerate(nodes):
        for name in node.input:
            if not name or name in constants or (name in producer and name not in position):
                continue
            if name not in position:
                raise ModelError(
                    f"node {node.name!r} ({node.op_type}) reads {name!r}, which no node, graph input or initializer provides"
                )
            if position[name] >= i:
                cycle = _find_cycle(nodes, position)
                if cycle:
                    raise ModelError(
                        f"the graph has a cycle: {' -> '.join(map(repr, cycle))}; memplan runs acyclic graphs only"
                    )
                raise ModelError(
                    f"node {node.name!r} reads {name!r} before node {nodes[position[name]].name!r} writes it; memplan uses "
                    "the model's node order as its schedule, so nodes must be in topological order"
                )
    for name in (vi.name for vi in graph.output):
        if name not in producer:
            raise ModelError(f"graph output {name!r} is produced by no node and is no input or initializer")


def _find_cycle(nodes: list[onnx.NodeProto], position: Mapping[str, int]) -> list[str] | None:
    """Node names along one cycle of the data-flow graph, first repeated at the end; None if acyclic."""
    succ: dict[int, list[int]] = {i: [] for i in range(len(nodes))}
    for i, node in enumerate(nodes):
        for name in node.input:
            if name in position:
                succ[position[name]].append(i)
    state = [0] * len(nodes)  # 0 new, 1 on the stack, 2 done
    for root in range(len(nodes)):
        if state[root]:
            continue
        stack = [(root, iter(succ[root]))]
        path = [root]
        state[root] = 1
        while stack:
            i, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[i] = 2
                stack.pop()
                path.pop()
            elif state[nxt] == 1:
                loop = path[path.index(nxt) :] + [nxt]
                return [nodes[k].name for k in loop]
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
                path.append(nxt)
    return None


def _check(skel: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(skel)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()
        raise ModelError(f"onnx checker rejected the model: {' '.join(line.strip() for line in first[:4])}") from None


# ---- types and tensors --------------------------------------------------------------------------------


def _check_bytes(name: str, shape: tuple[int, ...], dtype: np.dtype, what: str, limit: int) -> int:
    if dtype.kind == "O":
        raise ShapeError(f"{what} {name!r} holds strings; memplan places numeric tensors only")
    nbytes = int(np.prod(np.array(shape, dtype=np.float64))) * dtype.itemsize
    if nbytes > limit:
        raise TensorTooLargeError(
            f"{what} {name!r} of shape {list(shape)} ({dtype}) would take {nbytes:,} bytes, more than the limit of "
            f"{limit:,} bytes (max_tensor_bytes); refused before allocating"
        )
    return nbytes


def _static_type(name: str, node: onnx.NodeProto, types: Mapping[str, TensorType]) -> tuple[tuple[int, ...], np.dtype]:
    t = types.get(name)
    where = f"tensor {name!r} (output of node {node.name!r}, {node.op_type})"
    if t is None or t.dims is None:
        raise ShapeError(f"{where}: its shape could not be inferred; memplan needs a static shape for every tensor")
    if not t.static:
        dims = [d if isinstance(d, int) else (d or "?") for d in t.dims]
        raise ShapeError(
            f"{where}: shape {dims} is not static (it depends on data or an unbound dim); memplan plans static sizes only"
        )
    return t.shape, np_dtype(t.elem_type, where)


def _build(
    model: onnx.ModelProto,
    protos: list[onnx.NodeProto],
    inputs: Mapping[str, TensorType],
    outputs: tuple[str, ...],
    constants: dict[str, Constant],
    types: Mapping[str, TensorType],
    opset: int,
    dims: dict[str, int],
    limit: int,
    model_dir: str | None,
    folded: int,
) -> Graph:
    versions = {o.domain or "": int(o.version) for o in model.opset_import}
    nodes = tuple(
        Node(
            p.name,
            p.op_type,
            tuple(p.input),
            tuple(p.output),
            attributes_of(p),
            versions.get(p.domain, opset) if p.domain not in ("", "ai.onnx") else opset,
            p.domain,
            p,
        )
        for p in protos
    )
    consumers: dict[str, list[str]] = {}
    for n in nodes:
        for name in dict.fromkeys(n.inputs):
            if name:
                consumers.setdefault(name, []).append(n.name)
    tensors: dict[str, TensorInfo] = {}

    def add(name: str, shape: tuple[int, ...], dtype: np.dtype, kind: str, producer: str | None, what: str) -> None:
        nbytes = (
            _check_bytes(name, shape, dtype, what, limit)
            if kind != "constant"
            else int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        )
        tensors[name] = TensorInfo(name, shape, dtype, nbytes, kind, producer, tuple(consumers.get(name, ())))

    for name, t in inputs.items():
        add(name, t.shape, np_dtype(t.elem_type, name), "input", None, "graph input")
    used = {name for n in nodes for name in n.inputs if name} | set(outputs)
    kept = {name: c for name, c in constants.items() if name in used and name not in tensors}
    for name, c in kept.items():
        add(name, c.shape, c.dtype, "constant", None, "constant")
    for p, n in zip(protos, nodes, strict=True):
        for name in n.outputs:
            if name:
                shape, dtype = _static_type(name, p, types)
                add(
                    name,
                    shape,
                    dtype,
                    "output" if name in outputs else "activation",
                    n.name,
                    f"tensor (output of node {n.name!r})",
                )
    return Graph(
        name=model.graph.name or "model",
        nodes=nodes,
        tensors=tensors,
        inputs=tuple(inputs),
        outputs=outputs,
        constants=kept,
        opset=opset,
        dims=dims,
        max_tensor_bytes=limit,
        model_dir=model_dir,
        folded=folded,
    )
