"""The result of planning: an offset in a pool for every buffer, and its yardsticks.

A `Plan` is a frozen value that round-trips through JSON (schema `memplan.plan/1`, see
`planner/schema/plan.schema.json`). Every plan carries the lower bound (LOAD) and the
naive sum of sizes so that its quality can be read off it alone, and the alias groups that
were placed as one block (optional in the JSON: readers that predate it ignore it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.bounds import ratio
from planner.errors import ProblemError

PLAN_SCHEMA = "memplan.plan/1"


@dataclass(frozen=True, slots=True)
class Placement:
    pool: str
    offset: int


@dataclass(frozen=True)
class Plan:
    strategy: str
    offsets: Mapping[str, Placement]
    pool_sizes: Mapping[str, int]
    lower_bound: int
    naive: int
    elapsed_s: float = 0.0
    # Strategy-specific facts worth showing (iterations, proven optimality, seed, ...).
    stats: Mapping[str, Any] = field(default_factory=dict)
    # Buffers placed as one block because they alias one another: the root's id -> the
    # ids of the group's buffers (the root first). Groups of one buffer are left out.
    alias_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def arena_bytes(self) -> int:
        """Bytes of all pools together; for the usual single pool, the arena size."""
        return sum(self.pool_sizes.values())

    @property
    def ratio(self) -> float:
        """Arena over LOAD (1.0 is the best any plan can do), as `planner.bounds.ratio` defines it."""
        value = ratio(self.arena_bytes, self.lower_bound)
        assert value is not None  # a plan always has an arena
        return value

    def offset(self, buffer_id: str) -> int:
        return self.offsets[buffer_id].offset

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": PLAN_SCHEMA,
            "strategy": self.strategy,
            "arena_bytes": self.arena_bytes,
            "lower_bound": self.lower_bound,
            "naive_bytes": self.naive,
            "seconds": self.elapsed_s,
            "pool_sizes": dict(self.pool_sizes),
            "stats": dict(self.stats),
            "placements": [{"id": i, "pool": p.pool, "offset": p.offset} for i, p in self.offsets.items()],
        }
        if self.alias_groups:
            out["alias_groups"] = {root: list(ids) for root, ids in self.alias_groups.items()}
        return out

    def dumps(self, indent: int | None = None) -> str:
        return json.dumps(self.to_json(), indent=indent)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        if not isinstance(data, Mapping):
            raise ProblemError("a plan must be a JSON object")
        if data.get("schema", PLAN_SCHEMA) != PLAN_SCHEMA:
            raise ProblemError(f"schema: unknown version {data.get('schema')!r}; accepted: {PLAN_SCHEMA!r}")
        try:
            offsets = {str(p["id"]): Placement(str(p["pool"]), int(p["offset"])) for p in data["placements"]}
            return cls(
                strategy=str(data["strategy"]),
                offsets=offsets,
                pool_sizes={str(k): int(v) for k, v in data["pool_sizes"].items()},
                lower_bound=int(data["lower_bound"]),
                naive=int(data["naive_bytes"]),
                elapsed_s=float(data.get("seconds", 0.0)),
                stats=dict(data.get("stats", {})),
                alias_groups={str(r): tuple(str(i) for i in ids) for r, ids in data.get("alias_groups", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ProblemError(f"plan JSON is missing or has a malformed field: {e}") from None

    @classmethod
    def loads(cls, text: str) -> Plan:
        try:
            return cls.from_json(json.loads(text))
        except json.JSONDecodeError as e:
            raise ProblemError(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
