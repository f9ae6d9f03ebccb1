"""Receive an upload: stream it to disk, hash it, enforce the size limit, check it is ONNX.

The body is parsed as it arrives (multipart field ``file``, or a raw body), so a 2 GiB
model never sits in memory and an oversize one is refused as soon as it crosses the limit.
A model with external data comes as a .zip holding one .onnx and its data files.
"""

from __future__ import annotations

import hashlib
import stat
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from python_multipart import MultipartParser
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import parse_options_header

from app.errors import AppError
from app.settings import Limits, active_limits
from runtime.tflite import is_tflite

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


async def receive(
    chunks: AsyncIterator[bytes],
    *,
    content_type: str,
    declared: str | None,
    name: str | None,
    temp: Path,
    limit: int,
) -> Incoming:
    """Stream an upload's file to `temp`; AppError (4xx) when it is missing or too large.

    `chunks` is the request body as it arrives; `declared` its Content-Length (if sent);
    `name` the file name of a raw (non-multipart) body.
    """
    if declared and declared.isdigit() and int(declared) > limit + 64 * 1024:
        # Refuse before reading: multipart framing adds far less than 64 KiB.
        raise AppError(
            413, f"the upload ({int(declared):,} bytes) is larger than the limit of {limit:,} bytes", limit=limit
        )
    try:
        if content_type.startswith("multipart/form-data"):
            filename, sink = await _receive_multipart(chunks, temp, limit, content_type)
        else:
            sink = _Sink(temp, limit)
            try:
                async for chunk in chunks:
                    sink.write(chunk)
            finally:
                sink.close()
            filename = name or "model.onnx"
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sink.size == 0:
        temp.unlink(missing_ok=True)
        raise AppError(
            422,
            "the uploaded file is empty; send an .onnx or .tflite model (or a .zip of an .onnx with its data files)",
        )
    return Incoming(temp, sink.hash.hexdigest(), sink.size, _safe_name(filename))


async def _receive_multipart(
    chunks: AsyncIterator[bytes], temp: Path, limit: int, content_type: str
) -> tuple[str, _Sink]:
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
        async for chunk in chunks:
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as e:
        raise AppError(400, f"the multipart body is malformed ({e}); send the model as form field {FIELD!r}") from None
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
    """The format by content: "zip", "tflite" (its identifier at bytes 4..8) or "onnx"."""
    with path.open("rb") as f:
        head = f.read(8)
    if head[:4] == ZIP_MAGIC:
        return "zip"
    return "tflite" if is_tflite(head) else "onnx"


def unpack_zip(archive: Path, into: Path, limits: Limits | None = None) -> Path:
    """Extract a model archive safely; the path of its one .onnx file.

    Accepted: exactly one ``*.onnx`` member (in any folder) and its external data files,
    with relative paths that stay inside the archive's folder, no links, and at most
    `zip_max_entries` members, `zip_max_bytes` unpacked, and `zip_max_ratio` unpacked
    bytes per compressed byte for any member (a zip bomb is refused before extraction).
    """
    limits = limits or active_limits()
    try:
        with zipfile.ZipFile(archive) as zf:
            members = [m for m in zf.infolist() if not m.is_dir()]
            _check_members(members, limits)
            onnx_files = [m.filename for m in members if m.filename.lower().endswith(".onnx")]
            if len(onnx_files) != 1:
                raise AppError(
                    422,
                    f"the .zip must hold exactly one .onnx file (next to its external data files); found {len(onnx_files)}"
                    + (f": {onnx_files[:5]}" if onnx_files else ""),
                )
            into.mkdir(parents=True, exist_ok=True)
            for member in members:
                _extract(zf, member, into)
    except zipfile.BadZipFile as e:
        raise AppError(422, f"the .zip is damaged or truncated ({e}); re-create it and upload again") from None
    except (zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError, ValueError) as e:
        # Unsupported compression, encryption, bad CRC: nothing we can unpack.
        raise AppError(422, f"the .zip cannot be unpacked ({type(e).__name__}: {e}); use plain deflate") from None
    return into / onnx_files[0]


def _check_members(members: list[zipfile.ZipInfo], limits: Limits) -> None:
    if len(members) > limits.zip_max_entries:
        raise AppError(
            422,
            f"the .zip has {len(members):,} files; at most {limits.zip_max_entries:,} are accepted (zip_max_entries)",
        )
    bad = [m.filename for m in members if m.filename.startswith("/") or ".." in PurePosixPath(m.filename).parts]
    bad += [m.filename for m in members if "\\" in m.filename or ":" in m.filename]
    if bad:
        raise AppError(422, f"the .zip has paths outside its folder: {bad[:3]}; use relative paths")
    links = [m.filename for m in members if stat.S_ISLNK(m.external_attr >> 16)]
    if links:
        raise AppError(422, f"the .zip holds symbolic links {links[:3]}; put the data files themselves in it")
    total = sum(m.file_size for m in members)
    if total > limits.zip_max_bytes:
        raise AppError(
            422, f"the .zip unpacks to {total:,} bytes; at most {limits.zip_max_bytes:,} are accepted (zip_max_bytes)"
        )
    for m in members:
        if m.file_size > 1024 * 1024 and m.file_size > limits.zip_max_ratio * max(m.compress_size, 1):
            raise AppError(
                422,
                f"the .zip member {m.filename!r} expands {m.file_size / max(m.compress_size, 1):,.0f} times; "
                f"at most {limits.zip_max_ratio:,.0f} is accepted (zip_max_ratio)",
            )


def _extract(zf: zipfile.ZipFile, member: zipfile.ZipInfo, into: Path) -> None:
    """Copy one member, counting bytes: the header's size may lie, the stream may not exceed it."""
    target = into / member.filename
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with zf.open(member) as source, target.open("wb") as sink:
        while chunk := source.read(1 << 20):
            written += len(chunk)
            if written > member.file_size:
                raise AppError(422, f"the .zip member {member.filename!r} holds more bytes than its header declares")
            sink.write(chunk)
