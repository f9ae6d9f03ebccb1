"""A `.tflite` model as memplan's `Graph`: the same value the ONNX path builds.

Nodes are the main subgraph's operators in file order (that order is the schedule), op_type the
builtin operator's schema name (``CONV_2D``) in domain ``"tflite"``, or the custom code in
``"tflite.custom"``; attributes are the builtin options (`runtime.tflite.options`) plus
``q_inputs`` and ``q_outputs``, the `QuantParams` (or None) of each input and output. Tensors keep
the file's layout (NHWC) and dtype; constant buffers become `graph.constants`, outside the arena
as TensorFlow Lite Micro keeps them in flash, read from the file only when a kernel needs them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from runtime.constants import Constant
from runtime.errors import ModelError, ShapeError
from runtime.graph_types import Graph, Node, TensorInfo
from runtime.tflite.checks import check_operators
from runtime.tflite.model import SCHEMA_VERSION, TfModel, TfTensor, parse


def read_tflite(
    buf: bytes,
    *,
    max_tensor_bytes: int,
    shapes: Mapping[str, Sequence[int]] | None = None,
    path: str | None = None,
) -> Graph:
    """The graph of a `.tflite` file's bytes. Input shapes are fixed in the file: `shapes`, when
    given, must repeat them. With the file's `path`, the graph is named after it and its constants
    say where their bytes lie in it, so that a `ParameterStore` maps them instead of copying."""
    model = parse(bytes(buf), max_tensor_bytes)
    check_operators(model)
    tensors = model.tensors
    names = [t.name for t in tensors]
    _check_shapes(model, shapes or {})
    producer: dict[int, str] = {}
    nodes = []
    constants: dict[str, Constant] = {}
    inputs = set(model.inputs)
    provided: set[int] = set()  # constants read so far
    for op in model.operators:
        node_name = f"{op.op_type}_{op.index}"
        for j, i in enumerate(op.inputs):
            if i < 0 or i in inputs or i in producer or i in provided:
                continue
            t = tensors[i]
            if t.data is not None or t.is_variable:
                constants[t.name] = _constant(model.buf, t, path)
                provided.add(i)
            elif any(i in later.outputs for later in model.operators[op.index :]):
                raise ModelError(
                    f"operator {op.index} ({op.op_type}) reads tensor {t.name!r} (input {j}) before an operator after it "
                    "writes it; memplan uses the file's operator order as its schedule"
                )
            else:
                raise ModelError(
                    f"operator {op.index} ({op.op_type}) reads tensor {t.name!r} (input {j}), which no operator, graph "
                    "input or constant buffer provides"
                )
        for i in op.outputs:
            if i in producer or i in inputs or tensors[i].data is not None:
                raise ModelError(
                    f"operator {op.index} ({op.op_type}) writes tensor {tensors[i].name!r}, which is already "
                    f"{'written by ' + producer[i] if i in producer else 'a graph input or a constant'}"
                )
            producer[i] = node_name
        attributes = dict(op.attributes)
        attributes["q_inputs"] = tuple(tensors[i].quant if i >= 0 else None for i in op.inputs)
        attributes["q_outputs"] = tuple(tensors[i].quant for i in op.outputs)
        nodes.append(
            Node(
                node_name,
                op.op_type,
                tuple(names[i] if i >= 0 else "" for i in op.inputs),
                tuple(names[i] for i in op.outputs),
                attributes,
                op.version,
                op.domain,
                None,
            )
        )
    for i in model.outputs:
        if i not in producer and i not in inputs and tensors[i].data is None:
            raise ModelError(f"graph output {names[i]!r} is produced by no operator and is no input or constant")
    name = os.path.splitext(os.path.basename(path))[0] if path else None
    return _graph(model, tuple(nodes), producer, constants, max_tensor_bytes, name)


def _check_shapes(model: TfModel, shapes: Mapping[str, Sequence[int]]) -> None:
    declared = {model.tensors[i].name: model.tensors[i].shape for i in model.inputs}
    for input_name, sizes in shapes.items():
        if input_name not in declared:
            raise ShapeError(f"shapes: the model has no input {input_name!r}; its inputs are: {', '.join(declared)}")
        if tuple(sizes) != declared[input_name]:
            raise ShapeError(
                f"shapes: input {input_name!r} of a .tflite model has the fixed shape {list(declared[input_name])} in the "
                f"file; {list(sizes)} cannot be bound"
            )


def _constant(buf: bytes, t: TfTensor, path: str | None) -> Constant:
    if t.is_variable:
        # A state: a session keeps its own copy from run to run. It starts, and is reset, as TensorFlow
        # Lite Micro resets variable tensors: int8 ones to their zero point, every other to zero bytes.
        zero = int(t.quant.zero_point[0]) if t.quant is not None and t.dtype == np.int8 else 0
        return Constant(t.name, t.shape, t.dtype, "state", lambda: np.full(t.shape, zero, t.dtype))
    assert t.data is not None  # read_tflite makes constants of tensors with data or variable ones only
    start, length = t.data
    dtype = t.dtype.newbyteorder("<")

    def load() -> np.ndarray:
        return (
            np.frombuffer(buf, dtype=dtype, count=length // t.dtype.itemsize, offset=start)
            .astype(t.dtype)
            .reshape(t.shape)
        )

    constant = Constant.lazy(t.name, t.shape, t.dtype, load)
    if path is not None:
        constant.location = (path, start)  # little-endian raw bytes, as the schema stores them
    return constant


def _graph(
    model: TfModel,
    nodes: tuple[Node, ...],
    producer: dict[int, str],
    constants: dict[str, Constant],
    limit: int,
    name: str | None,
) -> Graph:
    consumers: dict[str, list[str]] = {}
    for n in nodes:
        for tensor_name in dict.fromkeys(n.inputs):
            if tensor_name:
                consumers.setdefault(tensor_name, []).append(n.name)
    outputs = {model.tensors[i].name for i in model.outputs}
    infos: dict[str, TensorInfo] = {}

    def add(t: TfTensor, kind: str, made_by: str | None) -> None:
        infos[t.name] = TensorInfo(
            t.name, t.shape, t.dtype, t.nbytes, kind, made_by, tuple(consumers.get(t.name, ())), t.quant
        )

    for i in model.inputs:
        add(model.tensors[i], "input", None)
    for t in model.tensors:
        if t.name in constants and t.name not in infos:
            add(t, "constant", None)
    for i, node_name in producer.items():
        t = model.tensors[i]
        add(t, "output" if t.name in outputs else "activation", node_name)
    return Graph(
        name=name or model.name,
        nodes=nodes,
        tensors=infos,
        inputs=tuple(model.tensors[i].name for i in model.inputs),
        outputs=tuple(model.tensors[i].name for i in model.outputs),
        constants=constants,
        opset=SCHEMA_VERSION,
        dims={},
        max_tensor_bytes=limit,
    )
