"""The independent checker: is a plan valid for a problem?

It shares no code with the strategies or the placement engine, so a bug there cannot hide
itself here. Every strategy test and the runtime (before it executes) call it.

A plan is valid when
1. every buffer of the problem has exactly one placement, in a pool it may use;
2. every offset is >= 0 and a multiple of the buffer's alignment (its own or the problem's);
3. every buffer ends within its pool's capacity;
4. each pool's size equals the highest end of the buffers in it;
5. no two buffers live at a common step overlap in bytes, unless one aliases the other
   (then it sits exactly `alias_offset` bytes into the buffer it aliases).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.plan import Plan
from planner.problem import Problem

MAX_REPORTED = 20


@dataclass
class CheckResult:
    violations: list[str] = field(default_factory=list)
    total: int = 0  # violations found, of which at most MAX_REPORTED are kept

    @property
    def ok(self) -> bool:
        return self.total == 0

    def add(self, message: str) -> None:
        self.total += 1
        if len(self.violations) < MAX_REPORTED:
            self.violations.append(message)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.ok:
            return "valid"
        more = f" (+{self.total - len(self.violations)} more)" if self.total > len(self.violations) else ""
        return "; ".join(self.violations) + more


def check_plan(problem: Problem, plan: Plan) -> CheckResult:
    result = CheckResult()
    pools = {p.name: p for p in problem.pools}
    ids = {b.id for b in problem.buffers}
    for extra in sorted(set(plan.offsets) - ids):
        result.add(f"plan places {extra!r}, which is not a buffer of the problem")
    placed = [b for b in problem.buffers if b.id in plan.offsets]
    for b in problem.buffers:
        if b.id not in plan.offsets:
            result.add(f"buffer {b.id!r} has no placement")

    highest: dict[str, int] = {name: 0 for name in pools}
    for b in placed:
        where = plan.offsets[b.id]
        if where.pool not in pools:
            result.add(f"buffer {b.id!r} is in unknown pool {where.pool!r}")
            continue
        allowed = b.pool_candidates or tuple(pools)
        if where.pool not in allowed:
            result.add(f"buffer {b.id!r} is in pool {where.pool!r}, not one of its candidates {list(allowed)}")
        align = max(problem.alignment, b.alignment or 1)
        if where.offset < 0 or where.offset % align:
            result.add(f"buffer {b.id!r} at offset {where.offset} breaks its alignment of {align} bytes")
        end = where.offset + b.size
        capacity = pools[where.pool].capacity
        if capacity is not None and end > capacity:
            result.add(f"buffer {b.id!r} ends at {end}, past pool {where.pool!r}'s capacity of {capacity}")
        highest[where.pool] = max(highest[where.pool], end)

    for name in pools:
        claimed = plan.pool_sizes.get(name, 0)
        if claimed != highest[name]:
            result.add(f"pool {name!r} is said to be {claimed} bytes but its highest buffer ends at {highest[name]}")

    _check_aliases(problem, plan, result)
    _check_overlaps(problem, plan, placed, result)
    return result


def _alias_group(problem: Problem) -> dict[str, str]:
    """Each buffer's alias root (itself when it aliases nothing); cycles are left to stop."""
    root: dict[str, str] = {}
    for b in problem.buffers:
        seen = {b.id}
        r = b
        while r.alias_of is not None and r.alias_of not in seen:
            seen.add(r.alias_of)
            r = problem.buffer(r.alias_of)
        root[b.id] = r.id
    return root


def _check_aliases(problem: Problem, plan: Plan, result: CheckResult) -> None:
    for b in problem.buffers:
        if b.alias_of is None or b.id not in plan.offsets or b.alias_of not in plan.offsets:
            continue
        mine, theirs = plan.offsets[b.id], plan.offsets[b.alias_of]
        if mine.pool != theirs.pool or mine.offset != theirs.offset + b.alias_offset:
            result.add(
                f"buffer {b.id!r} aliases {b.alias_of!r} at +{b.alias_offset} bytes but sits at "
                f"{mine.pool}:{mine.offset}, not {theirs.pool}:{theirs.offset + b.alias_offset}"
            )


def _check_overlaps(problem: Problem, plan: Plan, placed: list, result: CheckResult) -> None:
    """Sweep buffers by first step: those starting before one ends are its time-overlaps."""
    placed = [b for b in placed if b.size > 0]
    if not placed:
        return
    root = _alias_group(problem)
    placed.sort(key=lambda b: (b.first, b.id))
    first = np.array([b.first for b in placed], dtype=np.int64)
    last = np.array([b.last for b in placed], dtype=np.int64)
    start = np.array([plan.offsets[b.id].offset for b in placed], dtype=np.int64)
    end = start + np.array([b.size for b in placed], dtype=np.int64)
    pool_ids = {name: k for k, name in enumerate(sorted({plan.offsets[b.id].pool for b in placed}))}
    pool = np.array([pool_ids[plan.offsets[b.id].pool] for b in placed], dtype=np.int64)
    group_ids = {r: k for k, r in enumerate(sorted(set(root.values())))}
    group = np.array([group_ids[root[b.id]] for b in placed], dtype=np.int64)
    # Later buffers j > i with first[j] <= last[i] are live together with i at step first[j].
    stop = np.searchsorted(first, last, side="right")
    for i in range(len(placed)):
        j = np.arange(i + 1, stop[i])
        if j.size == 0:
            continue
        clash = j[(pool[j] == pool[i]) & (group[j] != group[i]) & (start[j] < end[i]) & (start[i] < end[j])]
        for k in clash[:MAX_REPORTED]:
            a, b = placed[i], placed[int(k)]
            lo, hi = max(start[i], start[k]), min(end[i], end[k])
            result.add(
                f"buffers {a.id!r} and {b.id!r} are both live at step {max(a.first, b.first)} "
                f"and overlap in bytes [{lo}, {hi}) of pool {plan.offsets[a.id].pool!r}"
            )
        result.total += max(0, clash.size - MAX_REPORTED)
