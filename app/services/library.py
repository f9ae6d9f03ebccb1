"""The model library: taking files in (uploads, the example gallery) and finding them again.

A file is checked before it is kept: an .onnx must parse as an ONNX model, a .tflite (told by
its content) must read whole as one, a .zip must hold exactly one .onnx with its data files.
Content is stored once per SHA-256, so the same model uploaded twice (even at the same moment)
is one file and one record.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import onnx

import runtime
from app.errors import AppError
from app.services import chart_windows, graphs
from app.services.modelinfo import read_model, summarize
from app.services.tflite_info import summarize_tflite
from app.services.uploads import Incoming, sniff_format, unpack_zip
from app.storage import ModelRecord, Storage
from runtime.shapes import check_shapes as check_shapes_of

EXAMPLES_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def ingest(storage: Storage, incoming: Incoming) -> tuple[ModelRecord, bool]:
    """Check, keep and record an uploaded file; (record, newly stored)."""
    fmt = sniff_format(incoming.path)
    try:
        if fmt == "tflite":
            summary = summarize_tflite(incoming.path)
        elif fmt == "zip":
            scratch = storage.incoming / f"{incoming.path.stem}.d"
            try:
                model = read_model(unpack_zip(incoming.path, scratch))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        else:
            model = read_model(incoming.path)
        if fmt != "tflite":
            summary = summarize(model)
    except BaseException:
        incoming.path.unlink(missing_ok=True)
        raise
    storage.keep_blob(incoming.path, incoming.sha256, fmt)
    name = Path(incoming.filename).stem or "model"
    return storage.add_model(
        sha256=incoming.sha256, name=name, filename=incoming.filename, fmt=fmt, size=incoming.size, summary=summary
    )


def model_path(storage: Storage, record: ModelRecord) -> Path:
    """The .onnx file of a stored model; a .zip is unpacked next to its blob on first use."""
    blob = storage.model_file(record)
    if not blob.exists():
        raise AppError(410, f"the file of model {record.id!r} is missing from the data directory; upload it again")
    if record.format != "zip":
        return blob
    folder = blob.with_suffix(".d")
    found = sorted(folder.rglob("*.onnx")) if folder.exists() else []
    if not found:
        return unpack_zip(blob, folder)
    return found[0]


def remove(storage: Storage, record: ModelRecord) -> None:
    blob = storage.model_file(record)
    graphs.forget(blob)
    if record.format == "zip":
        shutil.rmtree(blob.with_suffix(".d"), ignore_errors=True)
    storage.delete_model(record.id)
    chart_windows.forget_deleted(storage)  # the chart columns of its plans, kept or written, go with them


def examples() -> list[dict[str, Any]]:
    """The zoo models shipped inside the onnx wheel, smallest name first."""
    out: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES_DIR.glob("*.onnx")):
        out.append({"name": path.stem.removeprefix("light_"), "file": path.name, "bytes": path.stat().st_size})
    return out


def import_example(storage: Storage, name: str) -> tuple[ModelRecord, bool]:
    known = {e["name"]: e for e in examples()}
    if name not in known:
        raise AppError(404, f"no example {name!r}; accepted: {', '.join(sorted(known))}", title="Unknown example")
    source = EXAMPLES_DIR / str(known[name]["file"])
    temp = storage.incoming_path()
    shutil.copyfile(source, temp)
    digest = hashlib.sha256(temp.read_bytes()).hexdigest()
    return ingest(storage, Incoming(temp, digest, temp.stat().st_size, source.name))


def model_out(record: ModelRecord, new: bool | None = None) -> dict[str, Any]:
    return {
        **record.to_json(),
        "new": new,
        "links": {
            "self": f"/api/v1/models/{record.id}",
            "page": f"/models/{record.id}",
            "plans": f"/api/v1/models/{record.id}/plans",
            "runs": f"/api/v1/models/{record.id}/runs",
        },
    }


def check_dims(record: ModelRecord, dims: dict[str, int]) -> None:
    known = record.summary.get("symbolic_dims", [])
    unknown = sorted(set(dims) - set(known))
    if unknown:
        accepted = ", ".join(known) if known else "none (every input dim is fixed)"
        raise AppError(
            422,
            f"dims: the model has no symbolic dim {unknown[0]!r}; its symbolic dims are: {accepted}",
            title="Invalid dims",
        )


def check_shapes(record: ModelRecord, shapes: dict[str, list[int]]) -> None:
    """Whole input shapes against the stored model's declared inputs, before any work: 422 naming
    the input and what it takes (`runtime.shapes.check_shapes`), for an unknown input, a wrong
    rank, a size that is not positive, or a fixed size contradicted."""
    if not shapes:
        return
    declared = {v["name"]: (tuple(v["dims"]) or None) for v in record.summary.get("inputs", [])}
    try:
        check_shapes_of(declared, shapes)
    except runtime.ShapeError as e:
        raise AppError(422, f"shapes: {e}", title="Invalid shapes") from None
