"""The planning service on the real app's storage and job service: what it stores is checked
against plain reckonings made here (live bytes step by step, the highest end), not against the
planner's own yardsticks."""

from __future__ import annotations

import pytest

from app.errors import AppError
from app.services import planning
from planner import Plan, Problem
from planner.generate import network_like


def _live_peak(problem: Problem) -> int:
    """LOAD by brute force: the most bytes live at any one step."""
    return max(sum(b.size for b in problem.buffers if b.first <= s <= b.last) for s in range(problem.steps))


def _overlaps(problem: Problem, plan: Plan) -> list[tuple[str, str]]:
    """Pairs of buffers live at a common step whose byte ranges meet (pairwise, the slow way)."""
    placed = [(b, plan.offset(b.id)) for b in problem.buffers if b.size]
    return [
        (a.id, b.id)
        for i, (a, oa) in enumerate(placed)
        for b, ob in placed[i + 1 :]
        if a.first <= b.last and b.first <= a.last and oa < ob + b.size and ob < oa + a.size
    ]


@pytest.fixture()
def services(client):
    return client.app.state.storage, client.app.state.jobs


def test_a_bare_problem_is_stored_planned_and_read_back_as_given(services):
    storage, jobs = services
    problem = network_like(60, seed=4)
    made = planning.plan_problem(
        storage,
        jobs,
        problem,
        strategies="first_fit,greedy_by_size",
        capacity=None,
        time_limit=None,
        seed=0,
        background=False,
    )
    document = planning.problem_document(storage, made["problem_id"])
    stored = Problem.from_json(document["problem"])
    assert stored.buffers == problem.buffers and stored.steps == problem.steps
    assert [p["strategy"] for p in document["plans"]] == ["first_fit", "greedy_by_size"]
    for record in storage.plans_of(made["problem_id"]):
        plan = Plan.from_json(record.plan)
        assert _overlaps(problem, plan) == []
        assert record.arena_bytes == max(plan.offset(b.id) + b.size for b in problem.buffers)
        assert record.lower_bound == _live_peak(problem) <= record.arena_bytes
    best = planning.best_of(document["plans"])
    assert best is not None and best["arena_bytes"] == min(p.arena_bytes for p in storage.plans_of(made["problem_id"]))


def test_a_capacity_too_small_is_stored_as_no_valid_plan(services):
    storage, jobs = services
    problem = network_like(30, seed=2)
    made = planning.plan_problem(
        storage,
        jobs,
        problem,
        strategies="greedy_by_size",
        capacity=_live_peak(problem) - 1,
        time_limit=None,
        seed=0,
        background=False,
    )
    (record,) = storage.plans_of(made["problem_id"])
    assert not record.valid


@pytest.mark.parametrize(
    ("body", "content_type", "status", "words"),
    [
        (b"\xff\xfe", "application/json", 415, "not UTF-8"),
        (b"  ", "application/json", 422, "empty"),
    ],
)
def test_a_body_that_is_no_problem_is_refused_naming_what_is_accepted(body, content_type, status, words):
    with pytest.raises(AppError) as caught:
        planning.parse_problem(body, content_type, None)
    assert caught.value.status == status and words in caught.value.detail
    assert "Problem JSON" in caught.value.detail and "CSV" in caught.value.detail


def test_a_csv_body_and_its_json_twin_give_the_same_problem():
    problem = network_like(20, seed=1)
    csv_text = "id,lower,upper,size\n" + "".join(f"{b.id},{b.first},{b.last + 1},{b.size}\n" for b in problem.buffers)
    from_csv = planning.parse_problem(csv_text.encode(), "text/csv", 64)
    sizes = sorted((b.size, b.first, b.last) for b in from_csv.buffers)
    assert sizes == sorted((b.size, b.first, b.last) for b in problem.buffers) and from_csv.alignment == 64
