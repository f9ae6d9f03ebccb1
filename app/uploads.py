"""Receive an upload: stream it to disk, hash it, enforce the size limit, check it is ONNX.

The body is parsed as it arrives (multipart field ``file``, or a raw body), so a 2 GiB
model never sits in memory and an oversize one is refused as soon as it crosses the limit.
A model with external data comes as a .zip holding one .onnx and its data files.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fastapi import Request
from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header

from app.errors import AppError

FIELD = "file"
ZIP_MAGIC = b"PK\x03\x04"


@dataclass
class Incoming:
    path: Path  # the complete file, still in the incoming folder
    sha256: str
    size: int
    filename: str


class _Sink:
    """Writes one file part to disk while hashing and counting it against the limit."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.hash = hashlib.sha256()
        self.size = 0
        self.file = path.open("wb")

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise AppError(
                413,
                f"the file is larger than the upload limit of {self.limit:,} bytes; "
                "the server sets it with MEMPLAN_MAX_UPLOAD_BYTES",
                limit=self.limit,
            )
        self.hash.update(data)
        self.file.write(data)

    def close(self) -> None:
        self.file.close()


async def receive(request: Request, temp: Path, limit: int) -> Incoming:
    """Stream the request's file to `temp`; AppError (4xx) when it is missing or too large."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + 64 * 1024:
        # Refuse before reading: multipart framing adds far less than 64 KiB.
        raise AppError(
            413, f"the upload ({int(declared):,} bytes) is larger than the limit of {limit:,} bytes", limit=limit
        )
    content_type = request.headers.get("content-type", "")
    try:
        if content_type.startswith("multipart/form-data"):
            filename, sink = await _receive_multipart(request, temp, limit, content_type)
        else:
            sink = _Sink(temp, limit)
            try:
                async for chunk in request.stream():
                    sink.write(chunk)
            finally:
                sink.close()
            filename = request.query_params.get("name") or "model.onnx"
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sink.size == 0:
        temp.unlink(missing_ok=True)
        raise AppError(422, "the uploaded file is empty; send an .onnx model (or a .zip of one with its data files)")
    return Incoming(temp, sink.hash.hexdigest(), sink.size, _safe_name(filename))


async def _receive_multipart(request: Request, temp: Path, limit: int, content_type: str) -> tuple[str, _Sink]:
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise AppError(400, "multipart body without a boundary; send the file as multipart/form-data field 'file'")
    state: dict = {"headers": {}, "field": b"", "value": b"", "sink": None, "filename": None, "done": False}

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state["field"] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        state["value"] += data[start:end]

    def on_header_end() -> None:
        state["headers"][state["field"].lower()] = state["value"]
        state["field"], state["value"] = b"", b""

    def on_headers_finished() -> None:
        _, disposition = parse_options_header(state["headers"].get(b"content-disposition", b""))
        if disposition.get(b"name") == FIELD.encode() and state["sink"] is None:
            state["filename"] = disposition.get(b"filename", b"model.onnx").decode("utf-8", "replace")
            state["sink"] = _Sink(temp, limit)
            state["current"] = True
        else:
            state["current"] = False

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if state.get("current"):
            state["sink"].write(data[start:end])

    def on_part_begin() -> None:
        state["headers"] = {}

    def on_part_end() -> None:
        if state.get("current"):
            state["sink"].close()
            state["current"] = False

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    try:
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
    finally:
        if state["sink"] is not None:
            state["sink"].close()
    if state["sink"] is None:
        raise AppError(422, f"no multipart field {FIELD!r}; send the model as form field {FIELD!r}")
    return state["filename"], state["sink"]


def _safe_name(filename: str) -> str:
    name = PurePosixPath(filename.replace("\\", "/")).name.strip() or "model.onnx"
    return name[:200]


def sniff_format(path: Path) -> str:
    with path.open("rb") as f:
        head = f.read(4)
    return "zip" if head == ZIP_MAGIC else "onnx"


def unpack_zip(archive: Path, into: Path) -> Path:
    """Extract a model archive safely; the path of its one .onnx file.

    Accepted: exactly one ``*.onnx`` member (in any folder) and its external data files,
    with relative paths that stay inside the archive's folder.
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            members = [m for m in zf.infolist() if not m.is_dir()]
            bad = [m.filename for m in members if m.filename.startswith("/") or ".." in PurePosixPath(m.filename).parts]
            if bad:
                raise AppError(422, f"the .zip has paths outside its folder: {bad[:3]}; use relative paths")
            onnx_files = [m.filename for m in members if m.filename.lower().endswith(".onnx")]
            if len(onnx_files) != 1:
                raise AppError(
                    422,
                    f"the .zip must hold exactly one .onnx file (next to its external data files); found {len(onnx_files)}"
                    + (f": {onnx_files[:5]}" if onnx_files else ""),
                )
            into.mkdir(parents=True, exist_ok=True)
            zf.extractall(into)
    except zipfile.BadZipFile as e:
        raise AppError(422, f"the .zip is damaged or truncated ({e}); re-create it and upload again") from None
    return into / onnx_files[0]
