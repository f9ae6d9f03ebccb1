"""The plan page's choice of the plan to compare with (`reports.resolve_compare`), on plans the
planning service stored: by default the smallest other plan (ties by strategy name), reckoned
here from the stored records; by id or strategy name when asked; otherwise a 422 naming what is
accepted."""

from __future__ import annotations

import pytest

from app.errors import AppError
from app.services import planning, reports
from planner.generate import network_like


@pytest.fixture()
def plans(client):
    storage, jobs = client.app.state.storage, client.app.state.jobs
    made = planning.plan_problem(
        storage,
        jobs,
        network_like(50, seed=8),
        strategies="naive,first_fit,greedy_by_size,wic",
        capacity=None,
        time_limit=None,
        seed=0,
        background=False,
    )
    return storage.plans_of(made["problem_id"])


def test_the_default_is_the_smallest_other_plan(plans):
    for selected in plans:
        others = [p for p in plans if p.id != selected.id]
        expected = min(others, key=lambda p: (p.arena_bytes, p.strategy))
        assert reports.resolve_compare(plans, selected, None) == expected


def test_a_plan_is_found_by_id_or_strategy_and_an_unknown_one_is_refused(plans):
    naive = next(p for p in plans if p.strategy == "naive")
    wic = next(p for p in plans if p.strategy == "wic")
    assert reports.resolve_compare(plans, naive, "wic") == wic
    assert reports.resolve_compare(plans, naive, wic.id) == wic
    with pytest.raises(AppError) as caught:
        reports.resolve_compare(plans, naive, "hill_climb")
    assert caught.value.status == 422 and "'hill_climb'" in caught.value.detail
    assert all(p.strategy in caught.value.detail for p in plans)
