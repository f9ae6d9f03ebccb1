"""One stored plan in full: the problem it was made for (parsed once, cached), its Plan JSON with
every buffer, and its exports (MiniMalloc CSV, Netron attachment)."""

from __future__ import annotations

import csv
import io
from typing import Any

from app.errors import AppError
from app.services.cache import LRU
from app.storage import PlanRecord, ProblemRecord, Storage
from planner import Plan, Problem, ProblemError
from planner.csvio import write_csv

# Stored problems never change: keep the last few parsed (parsing a big one is slow: docs/BENCHMARKS.md).
PARSED_CACHE = 8
_parsed: LRU[str, tuple[Problem, ProblemRecord]] = LRU(PARSED_CACHE)


def problem_of(storage: Storage, record: PlanRecord) -> tuple[Problem, ProblemRecord]:
    """The problem a plan was made for, and its stored record (options, tensor facts)."""
    found = _parsed.get(record.problem_id)
    if found is not None:
        return found
    stored = storage.get_problem(record.problem_id)
    if stored is None:  # only if the database was edited by hand
        raise AppError(404, f"the problem of plan {record.id!r} is gone")
    assert stored.problem is not None  # read with its content
    return _parsed.put(record.problem_id, (Problem.from_json(stored.problem), stored))


def remember(storage: Storage, problem_id: str, problem: Problem) -> None:
    """Cache a problem just stored, already parsed: its plan page is usually opened next."""
    stored = storage.get_problem(problem_id)
    if stored is not None:
        _parsed.put(problem_id, (problem, stored))


def needs_plan(record: PlanRecord) -> None:
    """Exports need a plan: 409 for a strategy that produced none."""
    if not record.plan:
        raise AppError(
            409, f"strategy {record.strategy} produced no plan: {'; '.join(record.violations)}", title="No plan"
        )


def load_plan(record: PlanRecord) -> Plan:
    return Plan.from_json(record.plan)


def plan_document(record: PlanRecord, problem: Problem, model_id: str | None) -> dict[str, Any]:
    """GET /api/v1/plans/{id}: the planner's Plan JSON plus every buffer with its offset."""
    doc: dict[str, Any] = dict(record.plan) if record.plan else {"strategy": record.strategy}
    placements = {p["id"]: p for p in doc.pop("placements", [])}
    doc.update(
        {
            "id": record.id,
            "problem_id": record.problem_id,
            "model_id": model_id,
            "valid": record.valid,
            "violations": record.violations,
            "alignment": problem.alignment,
            "steps": problem.steps,
            "buffers": [
                {
                    "id": b.id,
                    "name": b.name or b.id,
                    "size": b.size,
                    "first": b.first,
                    "last": b.last,
                    "kind": b.kind,
                    "pool": placements[b.id]["pool"] if b.id in placements else None,
                    "offset": placements[b.id]["offset"] if b.id in placements else None,
                }
                for b in problem.buffers
            ],
            "links": {
                "page": f"/plans/{record.id}",
                "csv": f"/api/v1/plans/{record.id}/export.csv",
                "html": f"/api/v1/plans/{record.id}/export.html",
                "netron": f"/api/v1/plans/{record.id}/netron.json",
            },
        }
    )
    doc["placements"] = list(placements.values())
    return doc


TENSOR_COLUMNS = ("name", "kind", "shape", "dtype", "bytes", "first", "last", "offset", "pool", "producer", "consumers")


def tensors_csv(record: PlanRecord, problem: Problem, tensors: dict[str, dict[str, Any]]) -> str:
    """Every tensor of the plan, one row each: what the plan page's table shows, for a spreadsheet."""
    placed = {p["id"]: p for p in record.plan.get("placements", [])}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TENSOR_COLUMNS)
    for b in problem.buffers:
        facts = tensors.get(b.id, {})
        where = placed.get(b.id, {})
        shape = "x".join(str(d) for d in facts.get("shape") or ())
        consumers = " ".join(facts.get("consumers") or ())
        row = (b.name or b.id, b.kind, shape, facts.get("dtype", ""), b.size, b.first, b.last)
        writer.writerow((*row, where.get("offset", ""), where.get("pool", ""), facts.get("producer") or "", consumers))
    return out.getvalue()


def csv_export(record: PlanRecord, problem: Problem) -> str:
    """MiniMalloc CSV of the plan; 409 for a plan MiniMalloc's format cannot hold (several pools)."""
    try:
        return write_csv(problem, load_plan(record))
    except ProblemError as e:
        raise AppError(409, f"{e}: GET /api/v1/plans/{record.id}", title="Not exportable as MiniMalloc CSV") from None


def netron_attachment(record: PlanRecord, problem: Problem, model_name: str | None) -> dict[str, Any]:
    """Per-tensor metadata a model viewer can show next to each tensor (memplan.netron/1).

    Each tensor gets a list of ``{name, value}`` entries, the shape model viewers use for
    metadata: offset, size, pool, first/last step and the ops that bound its lifetime.
    """
    plan = load_plan(record)
    names = problem.step_names
    tensors = {}
    for b in problem.buffers:
        where = plan.offsets.get(b.id)
        lifetime = f"steps {b.first}..{b.last}"
        if names:
            lifetime += f" ({names[b.first]} .. {names[b.last]})"
        tensors[b.name or b.id] = [
            {"name": "memplan.offset", "value": where.offset if where else None},
            {"name": "memplan.size", "value": b.size},
            {"name": "memplan.pool", "value": where.pool if where else None},
            {"name": "memplan.lifetime", "value": lifetime},
            {"name": "memplan.kind", "value": b.kind},
        ]
    return {
        "schema": "memplan.netron/1",
        "model": model_name,
        "strategy": record.strategy,
        "arena_bytes": plan.arena_bytes,
        "lower_bound": plan.lower_bound,
        "tensors": tensors,
    }
