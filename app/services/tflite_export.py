"""A plan written back into its `.tflite` model as TensorFlow Lite Micro's offline plan, for the CLI
(`memplan plan MODEL.tflite --output planned.tflite`) and REST (`GET /api/v1/plans/{id}/export.tflite`).

The writer is the runtime's (`runtime.tflite.export_plan`); this module finds the model and the plan
and says what went offline and what was left to TensorFlow Lite Micro's own planner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.errors import AppError
from app.services import graphs, library, plans
from app.services.inputs import InputError
from app.storage import PlanRecord, Storage
from runtime.tflite import Export, export_plan, is_tflite


def is_tflite_file(path: Path) -> bool:
    with path.open("rb") as f:
        return is_tflite(f.read(8))


def check_output(input: Path, reorder: bool) -> None:
    """Refuse, before planning, an --output .tflite that cannot be written."""
    if not input.is_file() or not is_tflite_file(input):
        raise InputError(
            f"--output .tflite: {input} is not a .tflite model; the offline plan is written into the model it plans"
        )
    if reorder:
        raise InputError(
            "--output .tflite with --reorder: TensorFlow Lite Micro runs the file's operator order; plan without --reorder"
        )


def ascii_name(filename: str) -> str:
    """A file name safe in a Content-Disposition header."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in filename)


def told(exported: Export) -> str:
    """One line: how many tensors went offline, the head, and what was left out and why."""
    line = f"{len(exported.offsets)} tensors planned offline, head {exported.head:,} bytes"
    if exported.online:
        left = "; ".join(f"{name} ({why})" for name, why in exported.online.items())
        line += f"; left to TensorFlow Lite Micro's own planner: {left}"
    return line


def write_tflite(output: Path, input: Path, graph: Any, plan: Any) -> str:
    """Write the model with the plan; `told`'s line."""
    exported = export_plan(input.read_bytes(), graph, plan)
    output.write_bytes(exported.data)
    return told(exported)


def export_stored(storage: Storage, record: PlanRecord) -> tuple[Export, str]:
    """The stored plan's model with the plan in it, and a file name; 409 when the plan is not of a
    .tflite model or was made for another node order."""
    plans.needs_plan(record)
    _, stored = plans.problem_of(storage, record)
    model = storage.get_model(stored.model_id) if stored.model_id else None
    if model is None or model.format != "tflite":
        what = "a problem without a model" if model is None else f"{model.format} model {model.name!r}"
        raise AppError(
            409,
            f"export.tflite: plan {record.id!r} was made for {what}; only plans of .tflite models can be written "
            "back as TensorFlow Lite Micro's offline plan (try export.csv or the Plan JSON)",
            title="Not a .tflite model",
        )
    if stored.options.get("order") is not None:
        raise AppError(
            409,
            f"export.tflite: plan {record.id!r} was made for a memory-aware node order; TensorFlow Lite Micro runs "
            "the file's operator order, so plan the model without reorder",
            title="Reordered plan",
        )
    path = library.model_path(storage, model)
    graph = graphs.load_graph(path, {})
    with graphs.model_errors():
        exported = export_plan(path.read_bytes(), graph, plans.load_plan(record))
    return exported, f"{model.name}-{record.strategy}.tflite"
