"""What a big plan's page reads of its problem besides the chart columns, stored beside them.

A plan page of more than `chart_windows.AGGREGATE_ABOVE` tensors draws from the columns under the
data folder (`column_store`); what else it shows of the problem is its name, counts, step names,
alignment and pools. `save` writes that head (a few KB, plus the step names) when the plan's
columns are written, at planning time; `stored` reads it in any app process, so that opening the
page never reads nor parses the stored problem (seconds at 10^6 buffers). The full problem is read
only where every tensor is needed: the CSV and HTML exports, the Netron attachment, diffs, notes.

A `ProblemHead` stands in for the `planner.Problem` in the page's functions (`charts.big_plan_view`,
`chart_windows.page_view`, `chart_windows.peak_table`, `planning.summary`): they read only the
attributes it has, and the columns are at hand (it is used only when they are stored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.services import column_store
from app.services.cache import LRU
from app.storage import Storage
from planner import Pool, Problem

SCHEMA = "memplan.problem-head/1"


@dataclass(frozen=True)
class ProblemHead:
    name: str | None
    count: int  # buffers
    steps: int
    alignment: int
    step_names: tuple[str, ...] | None
    pools: tuple[Pool, ...]


_heads: LRU[str, ProblemHead] = LRU(8)


def save(storage: Storage, problem_id: str, problem: Problem) -> None:
    head = {
        "schema": SCHEMA,
        "name": problem.name,
        "buffers": len(problem.buffers),
        "steps": problem.steps,
        "alignment": problem.alignment,
        "step_names": list(problem.step_names) if problem.step_names else None,
        "pools": [{"name": p.name, "capacity": p.capacity} for p in problem.pools],
    }
    column_store.save_head(storage, problem_id, head)
    _heads.put(problem_id, _parse(head))


def stored(storage: Storage, problem_id: str) -> ProblemHead | None:
    """The head of a problem whose chart columns are stored, or None (a small problem, or one planned
    before heads were written: the page reads the problem)."""
    found = _heads.get(problem_id)
    if found is not None:
        return found
    head = column_store.load_head(storage, problem_id)
    if head is None or head.get("schema") != SCHEMA:
        return None
    return _heads.put(problem_id, _parse(head))


def _parse(head: dict[str, Any]) -> ProblemHead:
    names = head.get("step_names")
    return ProblemHead(
        name=head.get("name"),
        count=int(head["buffers"]),
        steps=int(head["steps"]),
        alignment=int(head["alignment"]),
        step_names=tuple(names) if names else None,
        pools=tuple(Pool(p["name"], p.get("capacity")) for p in head.get("pools", [])),
    )
