"""A model's tensors as the model page lists them: kind, dtype, shape, bytes and quantization.

Quantized models (`.tflite` files, quantized ONNX) carry a scale and zero point per tensor or per
channel (`runtime.quantization.QuantParams`); the table spells them so that a reviewer sees which
tensors are int8 and how they map to real numbers, beside the float ones.
"""

from __future__ import annotations

from typing import Any

from app.errors import AppError
from app.services import graphs, library
from app.services.listings import check_paging
from app.storage import ModelRecord, Storage

MAX_ROWS = 400  # the page's table; the JSON twin pages through every tensor, 200 at most a page


def quantization_text(quant: Any) -> str:
    """'' for a float tensor; 'scale 0.0235 · zero point -128'; or the per-channel ranges."""
    if quant is None:
        return ""
    d = quant.describe()
    if "axis" not in d:
        return f"scale {d['scale']:.6g} · zero point {d['zero_point']}"
    zeros = ", ".join(str(z) for z in d["zero_points"])
    return (
        f"per channel (axis {d['axis']}, {d['channels']}): scale {d['scale_min']:.4g}–{d['scale_max']:.4g} · "
        f"zero point {zeros}"
    )


def tensor_rows(graph: Any, offset: int = 0, limit: int = MAX_ROWS) -> dict[str, Any]:
    """Rows in the graph's order (inputs, constants, then the schedule's results) from `offset`."""
    tensors = list(graph.tensors.values())
    rows = [
        {
            "name": t.name,
            "kind": t.kind,
            "dtype": str(t.dtype),
            "shape": [int(d) for d in t.shape],
            "bytes": int(t.nbytes),
            "quantization": t.quant.describe() if t.quant is not None else None,
            "quantization_text": quantization_text(t.quant),
        }
        for t in tensors[offset : offset + limit]
    ]
    return {
        "items": rows,
        "total": len(tensors),
        "offset": offset,
        "limit": limit,
        "quantized": sum(1 for t in tensors if t.quant is not None),
    }


def model_tensors(storage: Storage, record: ModelRecord, offset: int = 0, limit: int = MAX_ROWS) -> dict[str, Any]:
    """GET /api/v1/models/{id}/tensors; 422 when the model's dims are symbolic (sizes need dims)."""
    check_paging(limit, offset)
    if record.summary.get("symbolic_dims"):
        raise AppError(
            422,
            f"tensors: model {record.id!r} has symbolic dims ({', '.join(record.summary['symbolic_dims'])}); its tensors "
            "get sizes when it is planned with dims",
            title="Symbolic dims",
        )
    return tensor_rows(graphs.load_graph(library.model_path(storage, record), {}), offset, limit)
