"""What a stored model lacks, said before anyone clicks: the ops memplan has no kernel for (it can
plan the model, not run it) and what stops a training step (ops without a backward kernel, no
trainable initializer, an output the loss cannot take), as runtime.training itself answers."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import runtime
from app.errors import AppError
from app.services import graphs, library
from app.storage import ModelRecord, Storage
from runtime import kernels
from runtime.training import backward_ops, build_training_step

# Above this file size the training step is not built for the page (seconds of work): op types decide.
BUILD_ABOVE_BYTES = 64 << 20
# Ops that compute shapes or pass values on, which a training step never differentiates through.
NO_GRADIENT_NEEDED = {"Constant", "ConstantOfShape", "Shape", "Size", "Range", "Cast"}


def missing_kernels(
    storage: Storage, record: ModelRecord, options: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The op types memplan has no kernel for in the model as loaded (with a plan's `options`: its
    dims, shapes and fusions), with their node counts. The file's op types are looked at first; only
    when one lacks a kernel is the graph loaded, since folding at load may remove it."""
    if record.format not in ("onnx", "zip"):
        return []  # other formats' readers say what they cannot read at upload
    known = set(kernels.supported_ops())
    estimate = [op for op in record.summary.get("ops", []) if op["op_type"] not in known]
    if not estimate:
        return []
    options = options or {}
    try:
        graph = graphs.load_graph(
            library.model_path(storage, record),
            options.get("dims") or {},
            shapes=options.get("shapes"),
            fuse=graphs.memory_of(options).fuse,
        )
    except AppError:  # open dims: the file's op types are the answer
        return estimate
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if kernels.kernel_of(node) is None:
            label = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            counts[label] = counts.get(label, 0) + 1
    return [{"op_type": op, "count": n} for op, n in sorted(counts.items())]


def kernel_message(ops: dict[str, list[str]]) -> str:
    """A run refused for ops without a kernel, in a browser user's words."""
    listed = "; ".join(
        f"{op} ({len(nodes)} node{'s' if len(nodes) != 1 else ''}, e.g. {nodes[0]!r})"
        for op, nodes in sorted(ops.items())
    )
    return (
        f"memplan has no kernel for {listed}: it can plan this model's memory but cannot run it; "
        "the model's page lists which ops are missing"
    )


def training(path: Path, summary: dict[str, Any], size: int, fmt: str = "onnx") -> dict[str, Any]:
    """{ready, lacks: [sentences], how}: whether a training step can be built (with the default
    cross-entropy loss), and if not what the model lacks. `how` says whether the step was built
    ("built") or op types alone were compared ("op types", for open dims or a large file)."""
    if fmt not in ("onnx", "zip"):
        return {
            "ready": False,
            "lacks": [f"training steps are built from ONNX models, not {fmt} files"],
            "how": "format",
        }
    if summary.get("symbolic_dims") or size > BUILD_ABOVE_BYTES:
        return _by_op_types(summary)
    return _built(str(path), path.stat().st_mtime_ns)


def _by_op_types(summary: dict[str, Any]) -> dict[str, Any]:
    differentiable = set(backward_ops()) | NO_GRADIENT_NEEDED
    lacking = [op for op in summary.get("ops", []) if op["op_type"] not in differentiable]
    lacks = []
    if lacking:
        listed = ", ".join(f"{op['op_type']} ({op['count']})" for op in lacking)
        lacks.append(f"ops without a backward kernel: {listed}")
    made = any(op["op_type"] == "ConstantOfShape" for op in summary.get("ops", []))
    if not summary.get("parameters") and not made:  # ConstantOfShape's weights are trained as initializers are
        lacks.append("no trainable weights: none stored as initializers or made by ConstantOfShape")
    return {"ready": not lacks, "lacks": lacks, "how": "op types"}


@lru_cache(maxsize=64)
def _built(path: str, mtime: int) -> dict[str, Any]:
    try:
        build_training_step(path)
    except runtime.UnsupportedOpError as e:
        listed = ", ".join(f"{op} ({len(nodes)})" for op, nodes in sorted(e.ops.items()))
        return {"ready": False, "lacks": [f"ops without a backward kernel: {listed}"], "how": "built"}
    except runtime.ModelError as e:
        return {"ready": False, "lacks": [str(e)], "how": "built"}
    return {"ready": True, "lacks": [], "how": "built"}
