"""Notes and diffs of stored plans, through the services on the real app's storage: a diff's
figures are reckoned here from the two stored problems and plans, and a note's refusals name the
field."""

from __future__ import annotations

import dataclasses

import pytest

from app.errors import AppError
from app.schemas import NoteRequest
from app.services import diffs, notes, planning
from planner import Problem
from planner.generate import network_like


def _plan(client, problem: Problem, strategies: str) -> list:
    storage, jobs = client.app.state.storage, client.app.state.jobs
    made = planning.plan_problem(
        storage, jobs, problem, strategies=strategies, capacity=None, time_limit=None, seed=0, background=False
    )
    return storage.plans_of(made["problem_id"])


def test_a_diff_of_two_plans_of_one_problem(client):
    problem = network_like(40, seed=5)
    naive, greedy = _plan(client, problem, "naive,greedy_by_size")
    diff = diffs.plan_diff(client.app.state.storage, naive, greedy)
    assert diff["same_problem"] and diff["delta_bytes"] == greedy.arena_bytes - naive.arena_bytes
    assert diff["delta_percent"] == pytest.approx(100 * diff["delta_bytes"] / naive.arena_bytes, abs=1e-4)
    assert diff["changed"] == [] and diff["only_in_a"] == [] and diff["only_in_b"] == []


def test_a_diff_of_two_problems_lists_what_changed_size_largest_change_first(client):
    first = network_like(30, seed=1)
    second = first.replace(
        buffers=tuple(dataclasses.replace(b, size=b.size * (1 + k % 3)) for k, b in enumerate(first.buffers))
    )
    (a,) = _plan(client, first, "greedy_by_size")
    (b,) = _plan(client, second, "greedy_by_size")
    diff = diffs.plan_diff(client.app.state.storage, a, b)
    expected = sorted(
        ((x.id, y.size - x.size) for x, y in zip(first.buffers, second.buffers, strict=True) if x.size != y.size),
        key=lambda row: (-abs(row[1]), row[0]),
    )
    assert not diff["same_problem"] and diff["changed_count"] == len(expected)
    assert [(row["name"], row["delta"]) for row in diff["changed"]] == expected[: len(diff["changed"])]


def test_notes_are_kept_listed_and_removed_and_a_bad_one_names_its_field(client):
    storage = client.app.state.storage
    problem = network_like(20, seed=3)
    (record,) = _plan(client, problem, "greedy_by_size")
    buffer = problem.buffers[0]
    made = notes.add(storage, record, NoteRequest(text="  look here  ", tensor=buffer.id, step=buffer.first))
    assert [(n["id"], n["text"]) for n in notes.listing(storage, record)] == [(made["id"], "look here")]
    for body, field in (
        (NoteRequest(text="   "), "text"),
        (NoteRequest(text="x", tensor=buffer.id), "tensor and step"),
        (NoteRequest(text="x", author="a" * 10_000), "author"),
    ):
        with pytest.raises(AppError) as caught:
            notes.add(storage, record, body)
        assert caught.value.status == 422 and caught.value.detail.startswith(field), caught.value.detail
    notes.remove(storage, record, made["id"])
    assert notes.listing(storage, record) == []
    with pytest.raises(AppError) as caught:
        notes.remove(storage, record, made["id"])
    assert caught.value.status == 404
