"""A parameter store: every distinct weight held once, as a read-only view, by content hash.

Sessions of one model, models cut from one network (a step model and an output layer
sharing an embedding) and the sessions of one model at several batch sizes all read the
same bytes. The store hands each of them the same read-only array:

1. raw little-endian data that lies in a file (an initializer's ``raw_data`` inside the
   .onnx file, found by walking the protobuf wire format, or its external data file) is
   memory-mapped, never read into the heap: the page cache holds it, once (raw data at an
   offset not aligned to its element is copied once instead: numpy would copy it inside
   kernels on every run);
2. anything else (typed fields such as ``float_data``, folded constants) is decoded once;
3. either way the bytes are hashed (BLAKE2b) and the key ``(digest, dtype, shape)`` looks
   up an earlier entry: a match is used instead, and the new copy or mapping is dropped.

`intern(array)` does step 3 for caller memory (`Session.set_shared_input` uses it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.constants import Constant
from runtime.errors import ModelError
from runtime.graph import Graph, load_model
from runtime.states import STATE
from runtime.tflite import is_tflite

Key = tuple[str, str, tuple[int, ...]]
HASH_CHUNK = 1 << 20


@dataclass
class Entry:
    """One distinct parameter: its array, where its bytes live, how many constants use it."""

    array: np.ndarray
    origin: str  # "mapped" (a file's pages), "decoded" (heap, made once) or "bound" (caller memory)
    refs: int = 0


class ParameterStore:
    """Distinct parameters by content; see the module docstring. Not thread-safe."""

    def __init__(self) -> None:
        self._entries: dict[Key, Entry] = {}
        self._files: dict[tuple[str, int, int], np.ndarray] = {}
        self.unaligned = 0  # parameters in a file at an offset not aligned to their element: copied once
        self.requested_bytes = 0  # bytes of every constant shared through the store, repeats included

    def load_model(self, path: str | os.PathLike[str], dims: Mapping[str, int] | None = None, **options: Any) -> Graph:
        """`runtime.load_model(path, dims, **options)` with the parameters shared through the store."""
        graph = load_model(path, dims, **options)
        return self.share(graph, model_path=path)

    def share(
        self, graph: Graph, *, model_path: str | os.PathLike[str] | None = None, skip: Iterable[str] = ()
    ) -> Graph:
        """`graph` with each constant (but those in `skip`) replaced by the store's array.

        With `model_path`, initializers whose raw data lies inside that .onnx file are mapped
        from it; external data is always mapped."""
        inside = raw_data_locations(model_path) if model_path is not None else {}
        model_path_str = os.fspath(model_path) if model_path is not None else ""
        skipped = set(skip)
        constants = {}
        for name, c in graph.constants.items():
            if name in skipped or c.source in ("shared", STATE):  # a state is each session's own (runtime.states)
                constants[name] = c
                continue
            location = c.location
            if c.source == "initializer" and name in inside and inside[name][1] == c.nbytes:
                location = (model_path_str, inside[name][0])
            constants[name] = Constant.of_array(name, self._array_for(c, location), source="shared")
            self.requested_bytes += c.nbytes
        return dataclasses.replace(graph, constants=constants)

    def intern(self, array: np.ndarray) -> np.ndarray:
        """The store's array with the same content as `array` (registering `array`, uncopied, if new)."""
        contiguous = np.ascontiguousarray(array)
        key = _key(contiguous, contiguous.dtype, contiguous.shape)
        self.requested_bytes += contiguous.nbytes
        return self._use(key, contiguous, "bound")

    def _array_for(self, c: Constant, location: tuple[str, int] | None) -> np.ndarray:
        # Packed (4-bit) and ml_dtypes types are not laid out as numpy views them: decode those.
        if location is not None and c.nbytes > 0 and c.dtype.kind in "biufc":
            path, offset = location
            if offset + c.nbytes <= os.path.getsize(path):
                # Hashed through read(), not the mapping: a duplicate's pages never become resident.
                key = _file_key(path, offset, c.nbytes, c.dtype, c.shape)
                if key in self._entries:
                    return self._use(key, self._entries[key].array, "mapped")
                region = self._file(path)[offset : offset + c.nbytes]
                array = region.view(c.dtype.newbyteorder("<")).reshape(c.shape)
                if location[1] % c.dtype.alignment == 0:
                    return self._use(key, array, "mapped")
                # numpy copies unaligned operands inside kernels on every run: one aligned copy instead.
                self.unaligned += 1
                return self._use(key, array.astype(c.dtype, copy=True), "decoded")
        value = c.read()
        return self._use(_key(np.ascontiguousarray(value), c.dtype, c.shape), value, "decoded")

    def _use(self, key: Key, array: np.ndarray, origin: str) -> np.ndarray:
        entry = self._entries.get(key)
        if entry is None:
            array = array.view()
            array.flags.writeable = False
            entry = self._entries[key] = Entry(array, origin)
        entry.refs += 1
        return entry.array

    def _file(self, path: str) -> np.ndarray:
        """One read-only mapping per file (and per version of it: size and mtime are in the key)."""
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        if key not in self._files:
            self._files[key] = np.memmap(path, dtype=np.uint8, mode="r").view(np.ndarray)
        return self._files[key]

    # ---- figures -----------------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def bytes_by_origin(self) -> dict[str, int]:
        out = {"mapped": 0, "decoded": 0, "bound": 0}
        for e in self._entries.values():
            out[e.origin] += e.array.nbytes
        return out

    @property
    def unique_bytes(self) -> int:
        return sum(e.array.nbytes for e in self._entries.values())

    @property
    def shared_bytes(self) -> int:
        """Bytes not held a second time because an equal parameter was already in the store."""
        return self.requested_bytes - self.unique_bytes

    def summary(self) -> dict[str, int]:
        return {
            "parameters": len(self._entries),
            "requested_bytes": self.requested_bytes,
            "unique_bytes": self.unique_bytes,
            "shared_bytes": self.shared_bytes,
            "unaligned_in_file": self.unaligned,
            **{f"{k}_bytes": v for k, v in self.bytes_by_origin().items()},
        }


class PreparedConstants:
    """What a session's kernels prepare from their weights at prepare (`Kernel.constants`: packed
    columns, Winograd transforms, requantization tables), each distinct array held once by
    content. The band nodes of a tiled stage (`runtime.tiling`) are copies of one node on rows
    of its map, so each would otherwise prepare and keep its own copy of the same weights:
    ``held(made)`` returns `made` with every array equal to one made before replaced by that
    one, and `added` says how many bytes the call added."""

    def __init__(self) -> None:
        self._arrays: dict[Key, np.ndarray] = {}
        self.added = 0

    def __call__(self, made: dict[str, Any]) -> dict[str, Any]:
        self.added = 0
        held = dict(made)
        for name, value in made.items():
            if not isinstance(value, np.ndarray):
                continue
            if value.dtype.kind not in "biufc":  # not hashed as bytes: held as made
                self.added += int(value.nbytes)
                continue
            key = _key(np.ascontiguousarray(value), value.dtype, value.shape)
            if key not in self._arrays:
                self._arrays[key] = value
                self.added += int(value.nbytes)
            held[name] = self._arrays[key]
        return held


def _key(data: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> Key:
    digest = hashlib.blake2b(data.reshape(-1).view(np.uint8).data, digest_size=20).hexdigest()
    return digest, np.dtype(dtype).str, tuple(shape)


def _file_key(path: str, offset: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...]) -> Key:
    digest = hashlib.blake2b(digest_size=20)
    chunk = bytearray(min(nbytes, HASH_CHUNK))
    view = memoryview(chunk)
    with open(path, "rb") as f:
        f.seek(offset)
        left = nbytes
        while left:
            got = f.readinto(view[: min(left, len(chunk))])
            if not got:
                raise ModelError(f"{os.path.basename(path)!r} ended {left} bytes before a parameter's data did")
            digest.update(view[:got])
            left -= got
    return digest.hexdigest(), np.dtype(dtype).str, tuple(shape)


# ---- where raw_data lies in an .onnx file ----------------------------------------------------------------

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_NAME, _TENSOR_RAW_DATA = 7, 5, 8, 9


def raw_data_locations(path: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """Initializer name -> (byte offset, length) of its raw_data in an .onnx file (main graph only).

    Walks the protobuf wire format over a read-only mapping, skipping every field but
    ModelProto.graph, GraphProto.initializer and TensorProto's name and raw_data, so that
    finding the offsets reads a few bytes per field, not the weights."""
    path = os.fspath(path)
    if os.path.getsize(path) == 0:
        return {}
    with open(path, "rb") as f:
        if is_tflite(f.read(8)):
            return {}  # a .tflite file holds no initializers; its constants are hashed from their values
    data = np.memmap(path, dtype=np.uint8, mode="r")
    buf = data.data
    found: dict[str, tuple[int, int]] = {}
    for field_no, start, end in _fields(buf, 0, len(buf)):
        if field_no != _MODEL_GRAPH:
            continue
        for g_field, g_start, g_end in _fields(buf, start, end):
            if g_field != _GRAPH_INITIALIZER:
                continue
            name, raw = None, (0, -1)
            for t_field, t_start, t_end in _fields(buf, g_start, g_end):
                if t_field == _TENSOR_NAME:
                    name = bytes(buf[t_start:t_end]).decode("utf-8", "replace")
                elif t_field == _TENSOR_RAW_DATA:
                    raw = (t_start, t_end - t_start)
            if name is not None and raw[1] >= 0:
                found[name] = raw
    return found


def _fields(buf: memoryview, pos: int, end: int) -> Iterable[tuple[int, int, int]]:
    """(field number, start, end) of every length-delimited field in buf[pos:end]; others skipped."""
    while pos < end:
        key, pos = _varint(buf, pos)
        field_no, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield field_no, pos, pos + length
            pos += length
        else:
            raise ModelError(f"the model file has protobuf wire type {wire} at byte {pos}, which ONNX does not use")
    if pos != end:
        raise ModelError("the model file's protobuf fields run past their message: the file is truncated or corrupt")


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ModelError("the model file ends inside a protobuf varint: it is truncated")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
