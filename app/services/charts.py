"""Chart data for the plan page, the run page and the offline report.

Everything a page draws reaches it once, as one JSON object (through ``|tojson``); the
browser paints it (see static/charts.js). Buffers travel as columns (one array per field)
so that 20,000 tensors cost a few hundred kilobytes, not a megabyte of keys.
"""

from __future__ import annotations

from typing import Any

from app.services import chart_windows
from app.storage import Storage
from planner import Problem, live_bytes, load, naive
from planner.bounds import peak_step

PEAK_ROWS = 200  # the peak table lists at most this many tensors, largest first


def plan_view(
    problem: Problem,
    plans: list[dict[str, Any]],
    offsets: dict[str, list[int | None]],
    tensors: dict[str, dict[str, Any]],
    *,
    selected: str,
    compare: str | None,
) -> dict[str, Any]:
    """The plan page's data: problem columns, per-plan offsets, live bytes and the peak.

    `plans` are the summaries of every plan of the problem; `offsets` maps a plan id to
    the offset of each buffer in problem order (None where the plan has none). The facts
    columns (shape, dtype, producer, consumers) are None instead of a list when no buffer
    has that fact, as in problems posted without a model: 20,000 nulls are 120 kB of page.
    """
    curve = live_bytes(problem)
    kinds = sorted({b.kind for b in problem.buffers})
    kind_index = {k: i for i, k in enumerate(kinds)}
    buffers = problem.buffers
    ids = [b.id for b in buffers]
    facts = [tensors.get(i, {}) for i in ids] if tensors else []
    return {
        "name": problem.name,
        "steps": problem.steps,
        "step_names": list(problem.step_names) if problem.step_names else None,
        "alignment": problem.alignment,
        "load": load(problem),
        "naive": naive(problem),  # alias groups once, as every plan's naive_bytes
        "peak_step": peak_step(problem),
        "live": curve.tolist(),
        "kinds": kinds,
        "buffers": {
            "id": ids,
            "size": [b.size for b in buffers],
            "first": [b.first for b in buffers],
            "last": [b.last for b in buffers],
            "kind": [kind_index[b.kind] for b in buffers],
            # In-place aliases share their target's bytes: drawn outlined and named, never as a collision.
            "alias_of": [b.alias_of for b in buffers] if any(b.alias_of for b in buffers) else None,
            **{key: _column(facts, key) for key in FACTS},
        },
        "plans": plans,
        "offsets": offsets,
        "selected": selected,
        "compare": compare,
    }


def big_plan_view(
    problem_id: str,
    problem: Problem,
    plans: list[dict[str, Any]],
    records: dict[str, dict[str, Any]],
    *,
    selected: str,
    compare: str | None,
    storage: Storage | None = None,
) -> dict[str, Any]:
    """`plan_view` for a problem of more than `chart_windows.AGGREGATE_ABOVE` tensors: the offset
    charts start from an aggregate and fetch windows (see app/services/chart_windows.py).

    `records` maps each plan id with a plan to its Plan JSON. LOAD and the naive sum are the
    ones the plans carry (the planner's, computed when they were made). With `storage`, the plans'
    chart columns are read from the data folder when this process has none at hand.
    """
    first = next((p for p in plans if p["id"] == selected), plans[0])
    shown = [selected] + ([compare] if compare else [])
    return {
        "name": problem.name,
        "steps": problem.steps,
        "step_names": list(problem.step_names) if problem.step_names else None,
        "alignment": problem.alignment,
        "load": first["lower_bound"],
        "naive": first["naive_bytes"],
        **chart_windows.page_view(problem_id, problem, records, shown, storage),
        "plans": plans,
        "selected": selected,
        "compare": compare,
    }


FACTS = ("shape", "dtype", "producer", "consumers")  # per-tensor facts a model gives, none for a bare problem


def _column(facts: list[dict[str, Any]], key: str) -> list[Any] | None:
    """One fact of every buffer in problem order, or None if no buffer has it (`facts` empty: no facts)."""
    column = [f.get(key) for f in facts]
    return column if any(v is not None for v in column) else None


def peak_table(problem: Problem, tensors: dict[str, dict[str, Any]], step: int | None = None) -> list[dict[str, Any]]:
    """The tensors live at the peak step, largest first (ties by id), with producer and lifetime.

    `step` is the peak step when the caller knows it already (it saves a pass over the buffers).
    """
    if not problem.steps:
        return []
    step = peak_step(problem) if step is None else step
    live = [b for b in problem.buffers if b.first <= step <= b.last]
    live.sort(key=lambda b: (-b.size, b.id))
    names = problem.step_names
    rows = []
    for b in live[:PEAK_ROWS]:
        facts = tensors.get(b.id, {})
        rows.append(
            {
                "id": b.id,
                "size": b.size,
                "kind": b.kind,
                "shape": facts.get("shape"),
                "dtype": facts.get("dtype"),
                "producer": facts.get("producer"),
                "first": b.first,
                "last": b.last,
                "first_op": names[b.first] if names else None,
                "last_op": names[b.last] if names else None,
            }
        )
    return rows


def offsets_of(problem: Problem, plan_json: dict[str, Any]) -> list[int | None]:
    """Each buffer's height in the offset chart: pools are stacked in problem order."""
    sizes = plan_json.get("pool_sizes", {})
    base, below = {}, 0
    for pool in problem.pools:
        base[pool.name] = below
        below += sizes.get(pool.name, 0)
    placed = {p["id"]: base.get(p["pool"], 0) + p["offset"] for p in plan_json.get("placements", [])}
    return [placed.get(b.id) for b in problem.buffers]
