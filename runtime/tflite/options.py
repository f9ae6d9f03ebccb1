"""A TFLite operator's builtin options as a node's attributes: snake_case names, enums by name.

The `tflite` package generates one class per options table with one accessor per field
(``Conv2DOptions.StrideW()``); every field becomes an attribute (``stride_w``), an enum field
its schema name as a str (``padding="SAME"``, ``fused_activation_function="RELU6"``), a vector
field a tuple of ints. Kernels read them as keyword arguments.
"""

from __future__ import annotations

import inspect
import re
import struct
from functools import cache
from typing import Any

import tflite

from runtime.tflite.flat import FlatError, Table

# Which enum spells each enum-valued field (the schema's field types).
_ENUMS: dict[str, Any] = {
    "FusedActivationFunction": tflite.ActivationFunctionType,
    "Padding": tflite.Padding,
    "WeightsFormat": tflite.FullyConnectedOptionsWeightsFormat,
    "KernelType": tflite.LSTMKernelType,
    "Combiner": tflite.CombinerType,
    **dict.fromkeys(
        (
            "QuantizedBiasType",
            "InDataType",
            "OutDataType",
            "OutputType",
            "OutType",
            "IdxOutType",
            "KeyDtype",
            "ValueDtype",
        ),
        tflite.TensorType,
    ),
}
_BY_OPTIONS: dict[tuple[str, str], Any] = {
    ("MirrorPadOptions", "Mode"): tflite.MirrorPadMode,
    ("LSHProjectionOptions", "Type"): tflite.LSHProjectionType,
}
_SKIP = ("Init", "GetRootAs")


def enum_names(enum: Any) -> dict[int, str]:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int)}


OPTIONS_NAMES = enum_names(tflite.BuiltinOptions)


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@cache
def _fields(cls: type) -> tuple[tuple[str, str], ...]:
    """(accessor, kind) per field: kind "vector" for vectors, "scalar" otherwise."""
    names = {n for n, _ in inspect.getmembers(cls, inspect.isfunction)}
    out = []
    for n in sorted(names):
        if n.startswith(_SKIP) or n.endswith(("IsNone", "Length", "AsNumpy", "BufferHasIdentifier")):
            continue
        out.append((n, "vector" if f"{n}AsNumpy" in names else "scalar"))
    return tuple(out)


def builtin_attributes(kind: int, table: Table | None, where: str) -> dict[str, Any]:
    """The attributes of one operator's builtin options table (checked by `Table` already)."""
    if table is None or not kind:
        return {}
    name = OPTIONS_NAMES.get(kind)
    cls = getattr(tflite, name, None) if name else None
    if cls is None:
        raise FlatError(f"{where}: builtin_options_type {kind} is no options table of the TFLite schema")
    options = cls()
    options.Init(table.buf, table.pos)
    attributes: dict[str, Any] = {}
    for accessor, kind_of in _fields(cls):
        try:
            if kind_of == "vector":
                value: Any = getattr(options, f"{accessor}AsNumpy")()
                value = () if isinstance(value, int) else tuple(int(v) for v in value)
            else:
                value = getattr(options, accessor)()
        except (ValueError, IndexError, TypeError, struct.error) as e:  # a vector or string running past the file
            raise FlatError(f"{where}.{snake(accessor)}: the field points outside the file ({e})") from None
        enum = _BY_OPTIONS.get((name or "", accessor)) or _ENUMS.get(accessor)
        if enum is not None and isinstance(value, int):
            value = enum_names(enum).get(value, str(value))
        elif isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        attributes[snake(accessor)] = value
    return attributes
