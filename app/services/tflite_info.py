"""What a stored `.tflite` model is: the same summary `modelinfo.summarize` gives an ONNX one.

The file is read whole at upload by the runtime's `.tflite` reader (every offset checked, every
size within the service's tensor limit), so a damaged or unsupported file is refused then with the
field at fault named, and never reaches planning.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import runtime
from app.errors import AppError
from app.services.modelinfo import read_model, summarize
from app.settings import active_limits
from runtime.tflite import is_tflite


def summary_of(path: Path) -> dict[str, Any]:
    """The summary of an ONNX or a `.tflite` model file, told apart by content."""
    with path.open("rb") as f:
        head = f.read(8)
    return summarize_tflite(path) if is_tflite(head) else summarize(read_model(path))


def summarize_tflite(path: Path) -> dict[str, Any]:
    """The model page's first facts of a `.tflite` file; AppError 422 naming what is wrong."""
    try:
        graph = runtime.load_model(path, max_tensor_bytes=active_limits().max_tensor_bytes)
    except runtime.ModelError as e:
        raise AppError(422, f"not a valid .tflite model: {e}", title="Invalid .tflite model") from None

    def io(name: str) -> dict[str, Any]:
        t = graph.tensors[name]
        return {"name": name, "dtype": str(t.dtype), "dims": list(t.shape)}

    ops = Counter(n.op_type if n.domain == "tflite" else f"custom.{n.op_type}" for n in graph.nodes)
    return {
        "format": "tflite",
        "graph_name": graph.name,
        "opset": graph.opset,
        "ir_version": None,
        "producer": "TensorFlow Lite",
        "inputs": [io(n) for n in graph.inputs],
        "outputs": [io(n) for n in graph.outputs],
        "nodes": len(graph.nodes),
        "ops": [{"op_type": op, "count": n} for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))],
        "parameter_bytes": sum(c.nbytes for c in graph.constants.values()),
        "parameters": len(graph.constants),
        "tensor_count": len(graph.tensors),
        "symbolic_dims": [],
        "external_data": False,
        "quantized": any(t.quant is not None for t in graph.tensors.values()),
    }
