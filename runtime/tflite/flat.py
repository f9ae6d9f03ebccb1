"""A bounds-checked walk over a flatbuffer, so that a damaged `.tflite` is refused, never trusted.

The generated accessors of the `tflite` package read wherever an offset points: on a truncated or
corrupted file they raise struct errors deep inside, read garbage, or iterate over a vector length
of four billion. Every table, vector and string the reader touches goes through `Table` here first:
its vtable, its inline size and every offset are checked against the file's length, and a
`FlatError` names the path to the field at fault (``subgraphs[0].tensors[12].shape``) and the byte
offset where it points.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from runtime.errors import ModelError


class FlatError(ModelError):
    """The flatbuffer is damaged: an offset, a length or a vtable points outside the file."""


_SCALARS = {"b": 1, "B": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8, "f": 4, "d": 8, "?": 1}


class Table:
    """One flatbuffer table at `pos` of `buf`, with its vtable checked; `where` names it in errors."""

    def __init__(self, buf: bytes, pos: int, where: str) -> None:
        self.buf, self.pos, self.where = buf, pos, where
        size = len(buf)
        if pos < 0 or pos % 4 or pos + 4 > size:
            raise FlatError(f"{where}: the table offset {pos} is outside the file ({size} bytes) or misaligned")
        vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        if vtable < 0 or vtable % 2 or vtable + 4 > size:
            raise FlatError(f"{where}: its vtable offset {vtable} is outside the file ({size} bytes)")
        vsize, inline = struct.unpack_from("<HH", buf, vtable)
        if vsize < 4 or vsize % 2 or vtable + vsize > size or inline < 4 or pos + inline > size:
            raise FlatError(
                f"{where}: its vtable at byte {vtable} declares {vsize} vtable bytes and {inline} table bytes, "
                f"which do not fit in the file ({size} bytes)"
            )
        self._fields = struct.unpack_from(f"<{(vsize - 4) // 2}H", buf, vtable + 4)
        self._inline = inline

    def slot(self, field: int) -> int | None:
        """The byte offset where field number `field` is stored in the file, or None when absent."""
        off = self._fields[field] if field < len(self._fields) else 0
        return self.pos + off if off else None

    def _at(self, field: int, width: int, name: str) -> int | None:
        """Where field number `field` is stored, or None when it is absent."""
        off = self._fields[field] if field < len(self._fields) else 0
        if not off:
            return None
        if off + width > self._inline:
            raise FlatError(f"{self.where}.{name}: its slot at +{off} lies outside the table's {self._inline} bytes")
        return self.pos + off

    def scalar(self, field: int, fmt: str, default: float | int | bool, name: str) -> float | int | bool:
        at = self._at(field, _SCALARS[fmt], name)
        return default if at is None else struct.unpack_from("<" + fmt, self.buf, at)[0]

    def _target(self, field: int, name: str) -> int | None:
        at = self._at(field, 4, name)
        if at is None:
            return None
        target = at + struct.unpack_from("<I", self.buf, at)[0]
        if target + 4 > len(self.buf):
            raise FlatError(
                f"{self.where}.{name}: its offset points to byte {target}, past the end of the file ({len(self.buf)} bytes)"
            )
        return target

    def table(self, field: int, name: str) -> Table | None:
        target = self._target(field, name)
        return None if target is None else Table(self.buf, target, f"{self.where}.{name}")

    def span(self, field: int, width: int, name: str) -> tuple[int, int] | None:
        """(start of the elements, element count) of a vector field, its whole extent checked."""
        target = self._target(field, name)
        if target is None:
            return None
        count = struct.unpack_from("<I", self.buf, target)[0]
        if target + 4 + count * width > len(self.buf):
            raise FlatError(
                f"{self.where}.{name}: a vector of {count:,} elements at byte {target} runs past the end of the file "
                f"({len(self.buf)} bytes)"
            )
        return target + 4, count

    def array(self, field: int, dtype: str, name: str) -> np.ndarray | None:
        """A vector of scalars as a numpy array (a view of the file), or None when absent."""
        kind = np.dtype(dtype).newbyteorder("<")
        found = self.span(field, kind.itemsize, name)
        if found is None:
            return None
        start, count = found
        return np.frombuffer(self.buf, dtype=kind, count=count, offset=start)

    def tables(self, field: int, name: str) -> Sequence[Table]:
        """A vector of tables, each checked; empty when absent."""
        found = self.span(field, 4, name)
        if found is None:
            return ()
        start, count = found
        out = []
        for i in range(count):
            at = start + 4 * i
            out.append(Table(self.buf, at + struct.unpack_from("<I", self.buf, at)[0], f"{self.where}.{name}[{i}]"))
        return out

    def string(self, field: int, name: str) -> str | None:
        found = self.span(field, 1, name)
        if found is None:
            return None
        start, count = found
        try:
            return self.buf[start : start + count].decode("utf-8")
        except UnicodeDecodeError:
            raise FlatError(f"{self.where}.{name}: the string at byte {start} is not UTF-8 text") from None


def root(buf: bytes) -> Table:
    if len(buf) < 8:
        raise FlatError(f"the file has {len(buf)} bytes, too few for a flatbuffer (a root offset and an identifier)")
    return Table(buf, struct.unpack_from("<I", buf, 0)[0], "model")
