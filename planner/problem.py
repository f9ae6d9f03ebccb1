"""The planning problem: buffers with sizes and live ranges, pools to put them in.

A `Problem` is the only thing a strategy sees. It is a frozen value that round-trips
through JSON (schema `memplan.problem/1`, see `planner/schema/problem.schema.json`).
Live ranges are inclusive step indices: a buffer with ``first=2, last=4`` occupies its
bytes during steps 2, 3 and 4.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import ProblemError

PROBLEM_SCHEMA = "memplan.problem/1"
DEFAULT_POOL = "arena"
# Problems are refused above this many buffers, before their buffers are built: a reader
# of untrusted input stays within bounded time and memory. Callers may pass their own
# `max_buffers` (None: no limit).
MAX_BUFFERS = 2_000_000

# Kinds a runtime may give a buffer. The planner treats them all alike; they exist for
# charts and reports. Other runtimes may use their own, so the list is open.
KINDS = (
    "input",
    "output",
    "activation",
    "workspace",
    "constant",
    "gradient",
    "backprop",
    "optimizer",
    "trainable",
    "disposable",
    "extra",
)


@dataclass(frozen=True, slots=True)
class Buffer:
    """One block of bytes that must live, unmoved, from step `first` to step `last`."""

    id: str
    size: int
    first: int
    last: int
    kind: str = "activation"
    alignment: int | None = None
    pool_candidates: tuple[str, ...] | None = None
    alias_of: str | None = None
    alias_offset: int = 0  # where this buffer starts inside the one it aliases
    name: str | None = None

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True, slots=True)
class Pool:
    """A named memory region; `capacity` None means unbounded."""

    name: str
    capacity: int | None = None


@dataclass(frozen=True)
class Problem:
    buffers: tuple[Buffer, ...]
    steps: int
    alignment: int = 1
    pools: tuple[Pool, ...] = (Pool(DEFAULT_POOL),)
    step_names: tuple[str, ...] | None = None
    name: str | None = None
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate(self)
        object.__setattr__(self, "_index", {b.id: i for i, b in enumerate(self.buffers)})

    def buffer(self, buffer_id: str) -> Buffer:
        return self.buffers[self._index[buffer_id]]

    def align_of(self, buffer: Buffer) -> int:
        """The alignment a buffer's offset must satisfy: the larger of its own and the problem's."""
        return max(self.alignment, buffer.alignment or 1)

    def candidates(self, buffer: Buffer) -> tuple[str, ...]:
        """Pools a buffer may go to, in order of preference (all pools when it names none)."""
        return buffer.pool_candidates or tuple(p.name for p in self.pools)

    def with_capacity(self, capacity: int | None, pool: str | None = None) -> Problem:
        """A copy whose pool (the first one by default) has the given capacity."""
        target = pool or self.pools[0].name
        pools = tuple(Pool(p.name, capacity) if p.name == target else p for p in self.pools)
        return self.replace(pools=pools)

    def replace(self, **changes: Any) -> Problem:
        """A copy with some fields changed, validated like a new problem."""
        return dataclasses.replace(self, **changes)

    # ---- JSON -------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": PROBLEM_SCHEMA,
            "steps": self.steps,
            "alignment": self.alignment,
            "pools": [{"name": p.name, "capacity": p.capacity} for p in self.pools],
            "buffers": [_buffer_json(b) for b in self.buffers],
        }
        if self.step_names is not None:
            out["step_names"] = list(self.step_names)
        if self.name is not None:
            out["name"] = self.name
        return out

    def dumps(self, indent: int | None = None) -> str:
        return json.dumps(self.to_json(), indent=indent)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, max_buffers: int | None = MAX_BUFFERS) -> Problem:
        """Build a Problem from its JSON form; errors name the offending field. More than
        `max_buffers` buffers are refused before any is read."""
        if not isinstance(data, Mapping):
            raise ProblemError("a problem must be a JSON object with 'buffers' and 'steps'")
        schema = data.get("schema", PROBLEM_SCHEMA)
        if schema != PROBLEM_SCHEMA:
            raise ProblemError(f"schema: unknown version {schema!r}; accepted: {PROBLEM_SCHEMA!r}")
        unknown = set(data) - {"schema", "steps", "alignment", "pools", "buffers", "step_names", "name"}
        if unknown:
            raise ProblemError(
                f"unknown field(s) {sorted(unknown)}; accepted: buffers, steps, alignment, pools, step_names, name"
            )
        raw_buffers = data.get("buffers")
        if not isinstance(raw_buffers, list):
            raise ProblemError("buffers: must be a list of objects with id, size, first, last")
        check_buffer_count(len(raw_buffers), max_buffers, "buffers")
        buffers = tuple(_buffer_from_json(raw, i) for i, raw in enumerate(raw_buffers))
        steps = data.get("steps")
        if steps is None:
            steps = max((b.last for b in buffers), default=-1) + 1
        pools = data.get("pools") or [{"name": DEFAULT_POOL}]
        if not isinstance(pools, list):
            raise ProblemError("pools: must be a list of {name, capacity}")
        names = data.get("step_names")
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise ProblemError("step_names: must be a list of strings, one per step")
        name = data.get("name")
        if name is not None and not isinstance(name, str):
            raise ProblemError(f"name: must be a string, got {name!r}")
        return cls(
            buffers=buffers,
            steps=_int(steps, "steps"),
            alignment=_int(data.get("alignment", 1), "alignment"),
            pools=tuple(_pool_from_json(p, i) for i, p in enumerate(pools)),
            step_names=tuple(names) if names is not None else None,
            name=name,
        )

    @classmethod
    def loads(cls, text: str, *, max_buffers: int | None = MAX_BUFFERS) -> Problem:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProblemError(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        return cls.from_json(data, max_buffers=max_buffers)


def check_buffer_count(count: int, max_buffers: int | None, where: str) -> None:
    """Refuse more than `max_buffers` buffers (None: any number), naming the limit."""
    if max_buffers is not None and count > max_buffers:
        raise ProblemError(
            f"{where}: more than {max_buffers:,} buffers, the limit (max_buffers; by default "
            f"planner.MAX_BUFFERS = {MAX_BUFFERS:,}); split the problem or raise the limit"
        )


def make_problem(buffers: Iterable[Buffer], **kwargs: Any) -> Problem:
    """A Problem whose step count defaults to one past the last step any buffer uses."""
    buffers = tuple(buffers)
    kwargs.setdefault("steps", max((b.last for b in buffers), default=-1) + 1)
    return Problem(buffers=buffers, **kwargs)


# ---- validation ---------------------------------------------------------------------------


# Sizes, steps and offsets are 64-bit integers inside the planner; leave headroom for sums.
MAX_VALUE = 2**53


def _validate(p: Problem) -> None:
    if p.steps < 0:
        raise ProblemError(f"steps: must be >= 0, got {p.steps}")
    if p.steps > MAX_VALUE:
        raise ProblemError(f"steps: at most {MAX_VALUE:,}, got {p.steps:,}")
    _check_alignment(p.alignment, "alignment")
    if not p.pools:
        raise ProblemError("pools: at least one pool is needed")
    pool_names = [pool.name for pool in p.pools]
    if len(set(pool_names)) != len(pool_names):
        raise ProblemError(f"pools: duplicate pool names in {pool_names}")
    for pool in p.pools:
        if pool.capacity is not None and not 0 <= pool.capacity <= MAX_VALUE:
            raise ProblemError(f"pools[{pool.name}].capacity: must be 0..{MAX_VALUE:,} or null, got {pool.capacity}")
    if p.step_names is not None and len(p.step_names) != p.steps:
        raise ProblemError(f"step_names: {len(p.step_names)} names for {p.steps} steps")
    seen: set[str] = set()
    for b in p.buffers:
        where = f"buffer {b.id!r}"
        if b.id in seen:
            raise ProblemError(f"{where}: duplicate id; every buffer id must be unique")
        seen.add(b.id)
        if b.size < 0:
            raise ProblemError(f"{where}: size must be >= 0 bytes, got {b.size}")
        if b.size > MAX_VALUE:
            raise ProblemError(f"{where}: size must be at most {MAX_VALUE:,} bytes, got {b.size:,}")
        if b.first < 0:
            raise ProblemError(f"{where}: first must be >= 0, got {b.first}")
        if b.last < b.first:
            raise ProblemError(f"{where}: last ({b.last}) is before first ({b.first}); live ranges are inclusive")
        if b.last >= p.steps:
            raise ProblemError(f"{where}: last ({b.last}) must be < steps ({p.steps})")
        if b.alignment is not None:
            _check_alignment(b.alignment, f"{where}.alignment")
        for name in b.pool_candidates or ():
            if name not in pool_names:
                raise ProblemError(f"{where}: unknown pool {name!r}; pools are {pool_names}")
    for b in p.buffers:
        if b.alias_of is not None and b.alias_of not in seen:
            raise ProblemError(f"buffer {b.id!r}: alias_of names unknown buffer {b.alias_of!r}")
        if b.alias_offset < 0 or (b.alias_offset and b.alias_of is None):
            raise ProblemError(f"buffer {b.id!r}: alias_offset must be >= 0 and needs alias_of")
    _check_alias_alignment(p)


def _check_alias_alignment(p: Problem) -> None:
    """A buffer sits `alias_offset` bytes into the one it aliases, whose group is placed at a
    multiple of its alignment: the bytes from the group's root to the buffer must keep the
    buffer's own alignment, or no placement could satisfy it."""
    by_id = {b.id: b for b in p.buffers}
    for b in p.buffers:
        if not b.alias_offset and b.alias_of is None:
            continue
        delta, at, seen = 0, b, {b.id}
        while at.alias_of is not None and at.alias_of not in seen:  # a cycle is reported where groups are made
            delta += at.alias_offset
            seen.add(at.alias_of)
            at = by_id[at.alias_of]
        align = p.align_of(b)
        if delta % align:
            raise ProblemError(
                f"buffer {b.id!r}: sits {delta} bytes into {at.id!r} (alias_offset along alias_of), not a "
                f"multiple of its alignment of {align} bytes, so no offset can align it; alias offsets must "
                "be multiples of the aliasing buffer's alignment"
            )


def _check_alignment(value: int, where: str) -> None:
    if not 1 <= value <= 2**30:
        raise ProblemError(f"{where}: must be a positive number of bytes up to 2**30, got {value}")


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ProblemError(f"{where}: must be an integer, got {value!r}")
    return value


_BUFFER_FIELDS = {
    "id",
    "size",
    "first",
    "last",
    "kind",
    "alignment",
    "pool_candidates",
    "alias_of",
    "alias_offset",
    "name",
}


def _buffer_from_json(raw: Any, i: int) -> Buffer:
    where = f"buffers[{i}]"
    if not isinstance(raw, Mapping):
        raise ProblemError(f"{where}: must be an object with id, size, first, last")
    for key in ("id", "size", "first", "last"):
        if key not in raw:
            raise ProblemError(f"{where}: missing field {key!r}")
    unknown = set(raw) - _BUFFER_FIELDS
    if unknown:
        raise ProblemError(f"{where}: unknown field(s) {sorted(unknown)}; accepted: {sorted(_BUFFER_FIELDS)}")
    for key in ("kind", "alias_of", "name"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ProblemError(f"{where}.{key}: must be a string, got {raw[key]!r}")
    if not isinstance(raw["id"], str | int) or isinstance(raw["id"], bool):
        raise ProblemError(f"{where}.id: must be a string or an integer, got {raw['id']!r}")
    pools = raw.get("pool_candidates")
    if pools is not None and not (isinstance(pools, list) and all(isinstance(x, str) for x in pools)):
        raise ProblemError(f"{where}.pool_candidates: must be a list of pool names")
    alignment = raw.get("alignment")
    return Buffer(
        id=str(raw["id"]),
        size=_int(raw["size"], f"{where}.size"),
        first=_int(raw["first"], f"{where}.first"),
        last=_int(raw["last"], f"{where}.last"),
        kind=str(raw.get("kind", "activation")),
        alignment=None if alignment is None else _int(alignment, f"{where}.alignment"),
        pool_candidates=tuple(pools) if pools else None,
        alias_of=None if raw.get("alias_of") is None else str(raw["alias_of"]),
        alias_offset=_int(raw.get("alias_offset", 0), f"{where}.alias_offset"),
        name=None if raw.get("name") is None else str(raw["name"]),
    )


def _buffer_json(b: Buffer) -> dict[str, Any]:
    out: dict[str, Any] = {"id": b.id, "size": b.size, "first": b.first, "last": b.last, "kind": b.kind}
    if b.alignment is not None:
        out["alignment"] = b.alignment
    if b.pool_candidates is not None:
        out["pool_candidates"] = list(b.pool_candidates)
    if b.alias_of is not None:
        out["alias_of"] = b.alias_of
        out["alias_offset"] = b.alias_offset
    if b.name is not None:
        out["name"] = b.name
    return out


def _pool_from_json(raw: Any, i: int) -> Pool:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        raise ProblemError(f"pools[{i}]: must be an object with a name (a string) and an optional capacity")
    capacity = raw.get("capacity")
    return Pool(str(raw["name"]), None if capacity is None else _int(capacity, f"pools[{i}].capacity"))
