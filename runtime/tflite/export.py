"""A plan handed back to TensorFlow Lite Micro: its offsets as `OfflineMemoryAllocation` metadata.

TensorFlow Lite Micro reads an offline plan from the model's metadata named
``OfflineMemoryAllocation``: a buffer of int32 ``[version 0, subgraph 0, n, offset of tensor 0, ...,
offset of tensor n-1]``, one entry per tensor of the subgraph, -1 for a tensor its own planner should
place (it then places those, and its kernels' scratch, around the offline ones). Offsets are bytes
from the start of the arena's head.

Only what its kernels compute correctly is written. TensorFlow Lite Micro gives an operator's
outputs and inputs overlapping lifetimes (created and last used in the same scope), so two tensors
live together may share bytes only where its kernel allows it: a RESHAPE writing its output over
its dying input at the same offset (the kernel copies only when the two differ), and ADD, SUB or MUL
over a dying input of the same shape at the same offset (elementwise, element i read before it is
written). Any other overlap memplan's own in-place kernels may use is left out: the later tensor is
written as -1, and `Export.online` says which and why.

The file is rewritten without rebuilding it: a new root table, its buffers and metadata vectors and
the new metadata go in front of the original body, which moves by a multiple of 16 bytes so that
every relative offset and every buffer's 16-byte alignment still hold.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from planner import Plan
from runtime.errors import ModelError
from runtime.graph_types import Graph
from runtime.tflite.flat import Table, root
from runtime.tflite.model import TfModel, parse

METADATA_NAME = "OfflineMemoryAllocation"
FORMAT_VERSION = 0
IN_PLACE_OPS = ("RESHAPE",)  # output over its input at the same offset, any shape
ELEMENTWISE_OPS = ("ADD", "SUB", "MUL")  # output over a same-shape input at the same offset


@dataclass(frozen=True)
class Export:
    data: bytes  # the model with the metadata
    offsets: dict[str, int]  # tensor -> arena offset, for the tensors planned offline
    online: dict[str, str] = field(default_factory=dict)  # tensor -> why TensorFlow Lite Micro places it itself
    head: int = 0  # the highest end of the offline tensors

    def summary(self) -> dict[str, object]:
        return {"offline": len(self.offsets), "head": self.head, "online": dict(self.online)}


def export_plan(buf: bytes, graph: Graph, plan: Plan, pool: str = "arena") -> Export:
    """`buf` (the `.tflite` the graph was read from) with `plan`'s offsets as TensorFlow Lite Micro's
    offline plan; `ModelError` if the plan is not of this model."""
    model = parse(bytes(buf), 1 << 62)
    names = [t.name for t in model.tensors]
    if set(graph.tensors) - set(names) or [n.op_type for n in graph.nodes] != [o.op_type for o in model.operators]:
        raise ModelError("export: the plan's graph is not this .tflite model's (its tensors or operators differ)")
    first, last = _lifetimes(model)
    offsets: dict[int, int] = {}
    online: dict[str, str] = {}
    for t in model.tensors:
        if t.data is not None or t.is_variable or not t.nbytes or t.index not in first:
            continue  # not in TensorFlow Lite Micro's head: constants, states, unused tensors
        placed = plan.offsets.get(t.name)
        if placed is None or placed.pool != pool:
            online[t.name] = "outside the planned arena in this plan (e.g. io=external)"
        elif placed.offset < 0 or placed.offset > np.iinfo(np.int32).max:
            online[t.name] = f"offset {placed.offset} does not fit the metadata's int32"
        else:
            offsets[t.index] = placed.offset
    allowed = _allowed_overlaps(model, offsets, last)
    for a, b in _overlaps(model, offsets, first, last):
        if (a, b) not in allowed and a in offsets and b in offsets:
            later = b if (first[b], b) > (first[a], a) else a
            other = a if later == b else b
            del offsets[later]
            online[names[later]] = (
                f"shares bytes with {names[other]!r} while both are live, which TensorFlow Lite Micro's kernel "
                f"does not allow (only {', '.join(IN_PLACE_OPS + ELEMENTWISE_OPS)} over a dying input)"
            )
    values = [FORMAT_VERSION, 0, len(model.tensors)] + [offsets.get(i, -1) for i in range(len(model.tensors))]
    head = max((offsets[i] + model.tensors[i].nbytes for i in offsets), default=0)
    data = with_metadata(bytes(buf), METADATA_NAME, struct.pack(f"<{len(values)}i", *values))
    return Export(data, {names[i]: o for i, o in sorted(offsets.items())}, online, head)


def _lifetimes(model: TfModel) -> tuple[dict[int, int], dict[int, int]]:
    """First and last scope of each tensor as TensorFlow Lite Micro counts them: graph inputs from 0,
    operator k's inputs and outputs at k + 1, graph outputs to the end."""
    first: dict[int, int] = dict.fromkeys(model.inputs, 0)
    last: dict[int, int] = {}
    for k, op in enumerate(model.operators, start=1):
        for i in op.outputs:
            first.setdefault(i, k)
        for i in (*op.inputs, *op.outputs):
            if i >= 0:
                last[i] = k
    for i in model.outputs:
        last[i] = len(model.operators) + 1
    return first, {i: last.get(i, first[i]) for i in first}


def _overlaps(
    model: TfModel, offsets: dict[int, int], first: dict[int, int], last: dict[int, int]
) -> list[tuple[int, int]]:
    """Pairs of offline tensors sharing bytes while both are live (a sweep over offsets)."""
    spans = sorted((offsets[i], offsets[i] + model.tensors[i].nbytes, i) for i in offsets)
    found = []
    for k, (_, end, i) in enumerate(spans):
        for start2, _, j in spans[k + 1 :]:
            if start2 >= end:
                break
            if first[i] <= last[j] and first[j] <= last[i]:
                found.append((min(i, j), max(i, j)))
    return found


def _allowed_overlaps(model: TfModel, offsets: dict[int, int], last: dict[int, int]) -> set[tuple[int, int]]:
    """(input, output) pairs where the operator's kernel in TensorFlow Lite Micro computes correctly in place."""
    allowed = set()
    for k, op in enumerate(model.operators, start=1):
        if op.op_type not in IN_PLACE_OPS + ELEMENTWISE_OPS or len(op.outputs) != 1:
            continue
        out = op.outputs[0]
        for i in op.inputs:
            if i < 0 or i not in offsets or out not in offsets or offsets[i] != offsets[out] or last[i] != k:
                continue
            same = model.tensors[i].nbytes == model.tensors[out].nbytes
            if op.op_type in ELEMENTWISE_OPS:
                same = same and all(model.tensors[j].shape == model.tensors[out].shape for j in op.inputs if j >= 0)
            if same:
                allowed.add((min(i, out), max(i, out)))
    return allowed


# ---- writing the metadata into the flatbuffer ----------------------------------------------------------


class _Prefix:
    """Bytes laid in front of the body; offsets to fix once the prefix's length is known."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.fixups: list[tuple[int, str, int]] = []  # (slot in prefix, "prefix"|"body", target)

    @property
    def pos(self) -> int:
        return 8 + len(self.data)  # absolute, after the root offset and the identifier

    def align(self, n: int, after: int = 0) -> None:
        while (self.pos + after) % n:
            self.data.append(0)

    def put(self, fmt: str, *values: int) -> int:
        at = self.pos
        self.data += struct.pack("<" + fmt, *values)
        return at

    def offset_to(self, kind: str, target: int) -> int:
        at = self.put("I", 0)
        self.fixups.append((at, kind, target))
        return at

    def table(self, slots: list[int]) -> int:
        """A vtable and the table after it; `slots[k]` is field k's byte offset in the table (0: absent)."""
        inline = 4 + 4 * sum(1 for s in slots if s)
        self.align(4, 4 + 2 * len(slots))
        vtable = self.put(f"{2 + len(slots)}H", 4 + 2 * len(slots), inline, *slots)
        self.align(4)
        return self.put("i", self.pos - vtable)


def with_metadata(buf: bytes, name: str, payload: bytes) -> bytes:
    """`buf` with metadata `name` holding `payload` (in a new buffer), replacing any of that name."""
    model = root(buf)
    buffers = model.tables(4, "buffers")
    if any(int(b.scalar(1, "Q", 0, "offset")) > 1 for b in buffers):
        raise ModelError(
            "export: the model keeps its buffers after the flatbuffer (a model over 2 GB); memplan cannot rewrite it"
        )
    metadata = [m for m in model.tables(6, "metadata") if m.string(0, "name") != name]
    kept = {f: _target(model, f) for f in (1, 2, 3, 5, 7)}
    p = _Prefix()
    fields = [0, 1, 2, 3, 4, 5, 6, 7]
    present = [f for f in fields if f in (0, 4, 6) or kept[f] is not None]
    slots = [4 + 4 * present.index(f) if f in present else 0 for f in fields]
    root_table = p.table(slots)
    for f in present:
        if f == 0:
            p.put("I", int(model.scalar(0, "I", 0, "version")))
        elif f in kept:
            p.offset_to("body", kept[f])  # type: ignore[arg-type]
        else:
            p.offset_to("prefix", f)  # the vectors below, fixed once placed
    vectors: dict[int, int] = {}
    for f, old in ((4, buffers), (6, metadata)):
        p.align(4)
        vectors[f] = p.put("I", len(old) + 1)
        for t in old:
            p.offset_to("body", t.pos)
        p.offset_to("new", f)
    made = {4: _buffer_table(p, payload), 6: _metadata_table(p, name, len(buffers))}
    prefix_len = (len(p.data) + 15) // 16 * 16
    out = bytearray(struct.pack("<I", root_table) + buf[4:8] + p.data.ljust(prefix_len, b"\0") + buf[8:])
    for at, kind, target in p.fixups:
        if kind == "body":
            target += prefix_len
        elif kind == "prefix":
            target = vectors[target]
        elif kind == "new":
            target = made[target]
        struct.pack_into("<I", out, at, target - at)
    return bytes(out)


def _target(table: Table, f: int) -> int | None:
    at = table.slot(f)
    return None if at is None else at + struct.unpack_from("<I", table.buf, at)[0]


def _buffer_table(p: _Prefix, payload: bytes) -> int:
    at = p.table([4])
    slot = p.offset_to("here", 0)
    p.align(16, 4)  # the data after its length on 16 bytes, as the schema asks of buffers
    p.fixups[-1] = (slot, "prefix-abs", p.pos)
    p.put("I", len(payload))
    p.data += payload
    return at


def _metadata_table(p: _Prefix, name: str, buffer_index: int) -> int:
    at = p.table([4, 8])
    slot = p.offset_to("here", 0)
    p.put("I", buffer_index)
    p.align(4)
    p.fixups[-1] = (slot, "prefix-abs", p.pos)
    raw = name.encode("utf-8")
    p.put("I", len(raw))
    p.data += raw + b"\0"
    return at
