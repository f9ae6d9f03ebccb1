"""Plan a problem with several strategies, store every outcome, and describe the results.

Fast strategies answer inline; strategies the registry marks slow (or every strategy when
the caller asks for `background`) run as one job whose progress is one step per strategy.
"""

from __future__ import annotations

from typing import Any

from app.jobs import Job, JobManager
from app.settings import active_limits
from app.storage import PlanRecord, Storage, new_id
from planner import Plan, Problem, get
from planner.compare import Outcome, run_strategies
from planner.csvio import write_csv


def record_of(outcome: Outcome) -> PlanRecord:
    plan = outcome.plan
    problems = [outcome.error] if outcome.error else ([outcome.violations] if outcome.violations else [])
    return PlanRecord(
        id=new_id(),
        problem_id="",
        strategy=outcome.strategy,
        arena_bytes=plan.arena_bytes if plan else 0,
        lower_bound=outcome.lower_bound,
        naive_bytes=outcome.naive_bytes,
        seconds=outcome.seconds,
        valid=outcome.valid,
        violations=problems,
        plan=plan.to_json() if plan else {},
    )


def summary(record: PlanRecord, problem: Problem | None = None) -> dict[str, Any]:
    """A plan as the API lists it: size, yardsticks, validity, and pool fits."""
    has_plan = bool(record.plan)
    out: dict[str, Any] = {
        "id": record.id,
        "strategy": record.strategy,
        "arena_bytes": record.arena_bytes if has_plan else None,
        "lower_bound": record.lower_bound,
        "naive_bytes": record.naive_bytes,
        "seconds": round(record.seconds, 6),
        "valid": record.valid,
        "ratio": round(record.arena_bytes / record.lower_bound, 6)
        if has_plan and record.lower_bound
        else (1.0 if has_plan else None),
        "error": "; ".join(record.violations) or None,
        "pools": [],
        "links": {"self": f"/api/v1/plans/{record.id}", "page": f"/plans/{record.id}"},
    }
    if has_plan and problem is not None:
        sizes = record.plan.get("pool_sizes", {})
        out["pools"] = [
            {
                "name": p.name,
                "bytes": sizes.get(p.name, 0),
                "capacity": p.capacity,
                "fits": p.capacity is None or sizes.get(p.name, 0) <= p.capacity,
            }
            for p in problem.pools
        ]
    elif not has_plan and problem is not None:
        out["pools"] = [{"name": p.name, "bytes": None, "capacity": p.capacity, "fits": False} for p in problem.pools]
    return out


def _store(storage: Storage, problem_id: str, outcomes: list[Outcome]) -> list[PlanRecord]:
    records = [record_of(o) for o in outcomes]
    records = [PlanRecord(**{**r.__dict__, "problem_id": problem_id}) for r in records]
    storage.add_plans(problem_id, records)
    return records


def plan_and_store(
    storage: Storage,
    jobs: JobManager,
    problem: Problem,
    names: list[str],
    *,
    strategy_options: dict[str, Any],
    request_options: dict[str, Any],
    background: bool = False,
    model_id: str | None = None,
    tensors: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Store the problem, plan it with each strategy, and return what `PlansOut` describes."""
    strategy_options = active_limits().cap_time(strategy_options)  # no request outlasts plan_seconds
    problem_id = storage.add_problem(problem.to_json(), request_options, model_id, tensors)
    from app.api.plans import remember  # here: app.api.plans imports this module

    remember(storage, problem_id, problem)  # the plan page need not parse 20,000 buffers again
    inline = [] if background else [n for n in names if not get(n).slow]
    later = [n for n in names if n not in inline]
    records = _store(storage, problem_id, run_strategies(problem, inline, **strategy_options)) if inline else []
    job = None
    if later:
        job = jobs.submit(
            "plan",
            f"planning {problem.name or 'problem'} with {', '.join(later)}",
            lambda job: _plan_job(job, storage, problem, problem_id, later, strategy_options),
            links={"problem": f"/api/v1/problems/{problem_id}"},
        )
    plans = [summary(r, problem) for r in records]
    return {
        "problem_id": problem_id,
        "plans": plans,
        "job": job.to_json() if job else None,
        "links": _links(problem_id, plans, job),
    }


def _links(problem_id: str, plans: list[dict[str, Any]], job: Job | None) -> dict[str, str]:
    links = {"problem": f"/api/v1/problems/{problem_id}"}
    best = best_of(plans)
    if best is not None:
        links["page"] = f"/plans/{best['id']}"
    if job is not None:
        links["job"] = f"/api/v1/jobs/{job.id}"
        links["job_page"] = f"/jobs/{job.id}"
    return links


def best_of(plans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The valid plan with the smallest arena; ties go to the one listed first."""
    valid = [p for p in plans if p["valid"] and p["arena_bytes"] is not None]
    return min(valid, key=lambda p: p["arena_bytes"]) if valid else None


def _plan_job(
    job: Job, storage: Storage, problem: Problem, problem_id: str, names: list[str], options: dict[str, Any]
) -> dict[str, Any]:
    done: list[dict[str, Any]] = []

    def on_done(outcome: Outcome) -> None:
        record = _store(storage, problem_id, [outcome])[0]
        done.append(summary(record, problem))
        job.report(len(done) / len(names), f"{outcome.strategy} done ({len(done)} of {len(names)})", plan=done[-1])

    job.report(0.0, f"planning with {names[0]}")
    run_strategies(problem, names, on_done=on_done, **options)
    all_plans = [summary(r, problem) for r in storage.plans_of(problem_id)]
    best = best_of(all_plans)
    return {"problem_id": problem_id, "plans": done, "page": f"/plans/{best['id']}" if best else None}


# ---- one plan in full -------------------------------------------------------------------


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


def csv_export(record: PlanRecord, problem: Problem) -> str:
    return write_csv(problem, load_plan(record))


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
