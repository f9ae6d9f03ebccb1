"""What a stored model is, read from its protobuf alone (no weights, no runtime).

Used at upload to refuse files that are not ONNX models, and for the model page's summary:
inputs and outputs with their dims (symbolic ones by name), the op histogram, parameter
bytes and tensor count. Deeper facts (folded constants, sizes, lifetimes) come from the runtime.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper

from app.errors import AppError


def read_model(path: Path) -> onnx.ModelProto:
    """The model's protobuf without external data; AppError 415/422 when it is not ONNX."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except DecodeError as e:
        raise AppError(
            415,
            f"not an ONNX model (nor a .tflite one): the file does not parse as an ONNX protobuf ({e}) and lacks the "
            "TFLite identifier 'TFL3' at bytes 4..8; it may be truncated or another format. Upload an .onnx "
            "(torch.onnx.export, tf2onnx) or a .tflite model",
        ) from None
    except Exception as e:  # onnx raises assorted errors on garbage
        raise AppError(415, f"not an ONNX model: {type(e).__name__}: {e}") from None
    graph = model.graph
    if model.ir_version <= 0 or not graph.node or not graph.output:
        raise AppError(
            415,
            "not an ONNX model: the file parses but has no IR version, nodes or outputs; "
            "it may be truncated or not an .onnx file",
        )
    return model


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]


def _dtype(value: onnx.ValueInfoProto) -> str:
    elem = value.type.tensor_type.elem_type
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))
    except Exception:
        if elem in onnx.TensorProto.DataType.values():
            return onnx.TensorProto.DataType.Name(elem).lower()
        return f"unknown ({elem})" if elem else "unknown"


def _tensor_bytes(t: onnx.TensorProto) -> int:
    for entry in t.external_data:
        if entry.key == "length":
            return int(entry.value)
    count = int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except Exception:
        itemsize = 1
    return count * itemsize


def summarize(model: onnx.ModelProto) -> dict[str, Any]:
    """The facts the model page shows first; JSON-serialisable."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [{"name": v.name, "dtype": _dtype(v), "dims": _dims(v)} for v in graph.input if v.name not in initializers]
    outputs = [{"name": v.name, "dtype": _dtype(v), "dims": _dims(v)} for v in graph.output]
    ops = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in graph.node)
    param_bytes = sum(_tensor_bytes(t) for t in graph.initializer)
    for node in graph.node:
        if node.op_type == "Constant":
            param_bytes += sum(_tensor_bytes(a.t) for a in node.attribute if a.type == onnx.AttributeProto.TENSOR)
    tensors = {v["name"] for v in inputs} | initializers | {o for n in graph.node for o in n.output if o}
    symbols = sorted({d for v in inputs for d in v["dims"] if isinstance(d, str)})
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if any(isinstance(x, bytes) for x in (graph.name, model.producer_name, model.producer_version)) or any(
        isinstance(v["name"], bytes) for v in (*inputs, *outputs)
    ):
        # Protobuf hands back bytes for a string field that is not UTF-8: the file is damaged.
        raise AppError(422, "not a valid ONNX model: some names are not UTF-8 text; the file may be damaged")
    return {
        "graph_name": graph.name,
        "opset": opset,
        "ir_version": model.ir_version,
        "producer": (model.producer_name + " " + model.producer_version).strip(),
        "inputs": inputs,
        "outputs": outputs,
        "nodes": len(graph.node),
        "ops": [{"op_type": op, "count": n} for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))],
        "parameter_bytes": param_bytes,
        "parameters": len(initializers),
        "tensor_count": len(tensors),
        "symbolic_dims": symbols,
        "external_data": any(t.data_location == onnx.TensorProto.EXTERNAL for t in graph.initializer),
    }
