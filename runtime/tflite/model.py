"""Parsing a `.tflite` flatbuffer into plain, checked values: tensors, operators, buffers.

Everything is read through `runtime.tflite.flat` (bounds-checked) and the `tflite` package's
enums and options classes, and checked before anything is allocated: the schema version, one
subgraph, every tensor, buffer and operator-code index in range, shapes static and their sizes
within the limit, constant data as long as its tensor. Errors name the field and its index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tflite

from runtime.errors import ModelError, ShapeError, TensorTooLargeError
from runtime.quantization import QuantParams
from runtime.tflite.flat import FlatError, Table, root
from runtime.tflite.options import builtin_attributes, enum_names

IDENTIFIER = b"TFL3"  # the schema's file_identifier, at bytes 4..8
SCHEMA_VERSION = 3
CUSTOM_CODE = tflite.BuiltinOperator.CUSTOM
OPERATOR_NAMES = enum_names(tflite.BuiltinOperator)
TYPE_NAMES = enum_names(tflite.TensorType)
DTYPES = {
    "FLOAT32": np.float32,
    "FLOAT16": np.float16,
    "FLOAT64": np.float64,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "INT16": np.int16,
    "UINT16": np.uint16,
    "INT32": np.int32,
    "UINT32": np.uint32,
    "INT64": np.int64,
    "UINT64": np.uint64,
    "BOOL": np.bool_,
    "COMPLEX64": np.complex64,
    "COMPLEX128": np.complex128,
}
CONTROL_FLOW = ("WHILE", "IF", "CALL_ONCE", "CALL")


def is_tflite(head: bytes) -> bool:
    """True when the bytes start like a TFLite flatbuffer (its identifier at bytes 4..8)."""
    return len(head) >= 8 and bytes(head[4:8]) == IDENTIFIER


@dataclass(frozen=True)
class TfTensor:
    index: int
    name: str  # unique within the model (the file's name, suffixed with the index when repeated)
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    data: tuple[int, int] | None  # (byte offset, length) of constant data in the file
    quant: QuantParams | None
    is_variable: bool


@dataclass(frozen=True)
class TfOperator:
    index: int
    op_type: str
    domain: str  # "tflite", or "tflite.custom" for custom operators
    version: int
    inputs: tuple[int, ...]  # tensor indices, -1 for an omitted optional input
    outputs: tuple[int, ...]
    attributes: dict[str, Any]


@dataclass(frozen=True)
class TfModel:
    buf: bytes
    name: str
    description: str
    tensors: tuple[TfTensor, ...]
    operators: tuple[TfOperator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def parse(buf: bytes, max_tensor_bytes: int) -> TfModel:
    """The checked contents of a `.tflite` file; `ModelError` naming the field at fault."""
    if not is_tflite(buf):
        raise ModelError(f"not a .tflite model: bytes 4..8 are {bytes(buf[4:8])!r}, not the identifier {IDENTIFIER!r}")
    model = root(buf)
    version = int(model.scalar(0, "I", 0, "version"))
    if version != SCHEMA_VERSION:
        raise ModelError(
            f"model.version: TFLite schema version {version} is not supported; memplan reads schema version "
            f"{SCHEMA_VERSION} (every converter since TensorFlow 1.14 writes it)"
        )
    subgraphs = model.tables(2, "subgraphs")
    if len(subgraphs) != 1:
        raise ModelError(
            f"model.subgraphs: the model has {len(subgraphs)} subgraphs; memplan reads single-subgraph models only "
            "(control flow such as WHILE, IF or CALL_ONCE keeps its bodies in further subgraphs)"
        )
    buffers = model.tables(4, "buffers")
    codes = [_operator_code(t) for t in model.tables(1, "operator_codes")]
    main = subgraphs[0]
    tensors = _tensors(buf, main, buffers, max_tensor_bytes)
    count = len(tensors)
    operators = tuple(_operator(i, t, codes, count) for i, t in enumerate(main.tables(3, "operators")))
    inputs = _indices(main, 1, "inputs", count)
    outputs = _indices(main, 2, "outputs", count)
    if not outputs:
        raise ModelError("model.subgraphs[0].outputs: the subgraph declares no outputs")
    return TfModel(
        buf=buf,
        name=main.string(4, "name") or "model",
        description=model.string(3, "description") or "",
        tensors=tensors,
        operators=operators,
        inputs=inputs,
        outputs=outputs,
    )


def _operator_code(table: Table) -> tuple[str, str, int]:
    """(op_type, domain, version) of one operator code."""
    code = max(int(table.scalar(0, "b", 0, "deprecated_builtin_code")), int(table.scalar(3, "i", 0, "builtin_code")))
    version = int(table.scalar(2, "i", 1, "version"))
    if code == CUSTOM_CODE:
        custom = table.string(1, "custom_code")
        if not custom:
            raise FlatError(f"{table.where}: a CUSTOM operator code without its custom_code name")
        return custom, "tflite.custom", version
    name = OPERATOR_NAMES.get(code)
    if name is None:
        raise FlatError(
            f"{table.where}.builtin_code: {code} is no builtin operator of the TFLite schema this memplan reads"
        )
    return name, "tflite", version


def _indices(table: Table, field: int, name: str, count: int, optional: bool = False) -> tuple[int, ...]:
    array = table.array(field, "i4", name)
    values = () if array is None else tuple(int(v) for v in array)
    for j, v in enumerate(values):
        if not (0 <= v < count or (optional and v == -1)):
            raise FlatError(
                f"{table.where}.{name}[{j}]: tensor index {v} is out of range (the subgraph has {count} tensors)"
            )
    return values


def _operator(index: int, table: Table, codes: list[tuple[str, str, int]], count: int) -> TfOperator:
    code = int(table.scalar(0, "I", 0, "opcode_index"))
    if code >= len(codes):
        raise FlatError(
            f"{table.where}.opcode_index: {code} is out of range (the model has {len(codes)} operator codes)"
        )
    op_type, domain, version = codes[code]
    if op_type in CONTROL_FLOW and domain == "tflite":
        raise ModelError(f"{table.where}: {op_type} calls another subgraph; memplan reads single-subgraph models only")
    kind = int(table.scalar(3, "B", 0, "builtin_options_type"))
    attributes = builtin_attributes(kind, table.table(4, "builtin_options"), table.where)
    if domain == "tflite.custom":
        custom = table.array(5, "u1", "custom_options")
        attributes["custom_options"] = b"" if custom is None else custom.tobytes()
    return TfOperator(
        index=index,
        op_type=op_type,
        domain=domain,
        version=version,
        inputs=_indices(table, 1, "inputs", count, optional=True),
        outputs=_indices(table, 2, "outputs", count),
        attributes=attributes,
    )


def _tensors(buf: bytes, subgraph: Table, buffers: Sequence[Table], limit: int) -> tuple[TfTensor, ...]:
    out: list[TfTensor] = []
    taken: set[str] = set()
    for i, t in enumerate(subgraph.tables(0, "tensors")):
        name = t.string(3, "name") or f"tensor_{i}"
        if name in taken:
            name = f"{name}_{i}"
            while name in taken:
                name += "_"
        taken.add(name)
        where = f"{t.where} ({name!r})"
        type_code = int(t.scalar(1, "b", 0, "type"))
        type_name = TYPE_NAMES.get(type_code, str(type_code))
        if type_name not in DTYPES:
            raise ModelError(
                f"{where}.type: {type_name} tensors are not supported; memplan reads "
                f"{', '.join(sorted(DTYPES))} tensors"
            )
        dtype = np.dtype(DTYPES[type_name])
        raw = t.array(0, "i4", "shape")
        shape = () if raw is None else tuple(int(d) for d in raw)
        if any(d < 0 for d in shape):
            raise ShapeError(
                f"{where}.shape: {list(shape)} has a dynamic (negative) size; memplan plans static shapes only"
            )
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize if shape else dtype.itemsize
        if nbytes > limit:
            raise TensorTooLargeError(
                f"{where}: shape {list(shape)} ({dtype}) would take {nbytes:,} bytes, more than the limit of "
                f"{limit:,} bytes (max_tensor_bytes); refused before allocating"
            )
        data = _buffer(buf, t, buffers, where, nbytes)
        out.append(
            TfTensor(
                i,
                name,
                shape,
                dtype,
                nbytes,
                data,
                _quant(t, shape, where),
                bool(t.scalar(5, "?", False, "is_variable")),
            )
        )
    return tuple(out)


def _buffer(buf: bytes, tensor: Table, buffers: Sequence[Table], where: str, nbytes: int) -> tuple[int, int] | None:
    index = int(tensor.scalar(2, "I", 0, "buffer"))
    if index >= len(buffers) and index != 0:
        raise FlatError(f"{where}.buffer: {index} is out of range (the model has {len(buffers)} buffers)")
    if index == 0 or not buffers:
        return None  # buffer 0 is the schema's empty sentinel
    table = buffers[index]
    span = table.span(0, 1, "data")
    if span is not None and span[1]:
        start, length = span
    else:
        start, length = int(table.scalar(1, "Q", 0, "offset")), int(table.scalar(2, "Q", 0, "size"))
        if start <= 1:
            return None
        if start + length > len(buf):
            raise FlatError(
                f"{table.where}: its data at bytes {start}..{start + length} lies outside the file ({len(buf)} bytes)"
            )
    if length != nbytes:
        raise ModelError(
            f"{where}: buffer {index} holds {length:,} bytes but the tensor's shape and type take {nbytes:,}"
        )
    return start, length


def _quant(tensor: Table, shape: tuple[int, ...], where: str) -> QuantParams | None:
    q = tensor.table(4, "quantization")
    if q is None:
        return None
    scale = q.array(2, "f4", "scale")
    if scale is None or not scale.size:
        return None
    zero = q.array(3, "i8", "zero_point")
    axis = int(q.scalar(6, "i", 0, "quantized_dimension"))
    if scale.size > 1 and not (0 <= axis < len(shape) and shape[axis] == scale.size):
        # Converters write some biases with their filter's quantized_dimension: the one axis that fits is meant.
        fits = [k for k, d in enumerate(shape) if d == scale.size]
        axis = fits[0] if len(fits) == 1 else -1
    if scale.size > 1 and axis < 0:
        raise ModelError(
            f"{where}.quantization: {scale.size} per-channel scales along axis {axis}, but the shape is {list(shape)}"
        )
    try:
        return QuantParams(scale.copy(), np.zeros(1, np.int64) if zero is None or not zero.size else zero.copy(), axis)
    except ValueError as e:
        raise ModelError(f"{where}.{e}") from None
