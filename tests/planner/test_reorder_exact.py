"""The exact memory-aware order against brute force, and the irregular graphs it is measured on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import ProblemError, Schedule, Step, load, problem_from_schedule
from planner.generate_graphs import random_wiring
from planner.lifetimes import live_ranges
from planner.reorder import reorder
from planner.reorder_exact import cut_steps
from planner.reorder_steps import StepGraph
from tests.planner.test_reorder import assert_valid_order, dags


def topological_orders(schedule: Schedule) -> list[list[int]]:
    """Every order of the steps in which each step runs after the writers of what it reads."""
    writer = {}
    for t, step in enumerate(schedule.steps):
        for name in step.writes:
            writer.setdefault(name, t)
    needs = [{writer[b] for b in step.reads if b in writer and writer[b] != t} for t, step in enumerate(schedule.steps)]
    orders: list[list[int]] = []

    def extend(prefix: list[int], done: set[int]) -> None:
        if len(prefix) == len(needs):
            orders.append(list(prefix))
            return
        for t in range(len(needs)):
            if t not in done and needs[t] <= done:
                prefix.append(t)
                done.add(t)
                extend(prefix, done)
                done.discard(t)
                prefix.pop()

    extend([], set())
    return orders


def brute_force_load(schedule: Schedule) -> int:
    """The least LOAD over all topological orders (the oracle): `planner.load` of each order's
    problem with aliases, else the bytes of `planner.lifetimes.live_ranges` summed per step."""
    orders = topological_orders(schedule)
    if schedule.aliases or schedule.excluded:
        return min(load(problem_from_schedule(reordered(schedule, order))) for order in orders)
    return min(_peak(reordered(schedule, order)) for order in orders)


def _peak(schedule: Schedule) -> int:
    live = [0] * len(schedule.steps)
    for name, (first, last) in live_ranges(schedule).items():
        for t in range(first, last + 1):
            live[t] += schedule.sizes[name]
    return max(live)


def reordered(schedule: Schedule, order: list[int]) -> Schedule:
    return Schedule(
        steps=[schedule.steps[t] for t in order],
        sizes=schedule.sizes,
        inputs=schedule.inputs,
        outputs=schedule.outputs,
        aliases=schedule.aliases,
        excluded=schedule.excluded,
    )


@settings(max_examples=40, deadline=None)
@given(schedule=dags(max_steps=7))
def test_exact_order_matches_brute_force(schedule):
    result = reorder(schedule, time_limit=30.0, max_iterations=0)
    assert result.method == "exact" and result.proven and result.bound == result.load_after
    assert_valid_order(schedule, result.schedule)
    assert result.load_after == load(problem_from_schedule(result.schedule)) == brute_force_load(schedule)
    assert result.load_after <= result.load_before == load(problem_from_schedule(schedule))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("model", ["ws", "er"])
def test_exact_order_matches_brute_force_on_random_wiring(model, seed):
    # 9 wired ops + the final "out" op: 10 steps, up to thousands of orders.
    schedule = random_wiring(9, model=model, k=4, p=0.5 if model == "ws" else 0.3, seed=seed)
    result = reorder(schedule, time_limit=30.0, max_iterations=0)
    assert result.method == "exact" and result.proven and result.bound == result.load_after
    assert_valid_order(schedule, result.schedule)
    assert result.load_after == load(problem_from_schedule(result.schedule)) == brute_force_load(schedule)


def test_aliases_and_unread_inputs_match_brute_force():
    schedule = Schedule(
        steps=[
            Step("a", reads=("x",), writes=("p",)),
            Step("b", reads=("x",), writes=("q",)),
            Step("view", reads=("p",), writes=("v",)),
            Step("c", reads=("q",), writes=("r",), scratch=("ws",)),
            Step("join", reads=("v", "r"), writes=("out",)),
        ],
        sizes={"x": 10, "unused": 500, "p": 100, "q": 100, "v": 100, "r": 30, "ws": 70, "out": 5},
        inputs=("x", "unused"),
        outputs=("out",),
        aliases={"v": ("p", 0)},
    )
    result = reorder(schedule, time_limit=30.0, max_iterations=0)
    assert result.proven and result.load_after == brute_force_load(schedule)


def test_the_same_arguments_give_the_same_order():
    schedule = random_wiring(40, model="er", p=0.15, seed=3)
    first = reorder(schedule, time_limit=60.0, max_iterations=50, max_states=2_000)
    second = reorder(schedule, time_limit=60.0, max_iterations=50, max_states=2_000)
    assert first.order == second.order and first.load_after == second.load_after
    assert random_wiring(40, model="er", p=0.15, seed=3) == schedule


def test_a_state_budget_falls_back_to_the_best_order_found_and_says_so():
    schedule = random_wiring(60, model="er", p=0.15, seed=1)
    result = reorder(schedule, time_limit=60.0, max_iterations=0, max_states=50)
    assert result.method == "exact" and result.budget_hit and not result.proven
    assert "hit its budget" in result.describe()
    assert_valid_order(schedule, result.schedule)
    assert result.bound <= result.load_after == load(problem_from_schedule(result.schedule)) <= result.load_before


def test_graphs_over_the_exact_limit_are_divided_or_left_to_the_heuristic():
    chain = Schedule(
        steps=[Step(f"s{i}", reads=(f"t{i}",), writes=(f"t{i + 1}",)) for i in range(12)],
        sizes={f"t{i}": 10 + i for i in range(13)},
        inputs=("t0",),
        outputs=("t12",),
    )
    divided = reorder(chain, time_limit=30.0, max_iterations=0, exact_limit=5)
    assert divided.method == "divided" and divided.segments == 12 and divided.proven
    irregular = random_wiring(30, model="er", p=0.3, seed=2)
    assert cut_steps(StepGraph(irregular)) == [len(irregular.steps) - 1]  # only "out" is a cut
    heuristic = reorder(irregular, time_limit=30.0, max_iterations=20, exact_limit=10)
    assert heuristic.method == "heuristic" and heuristic.exact_segments == 0
    assert "reorder method heuristic" in heuristic.describe()
    assert_valid_order(irregular, heuristic.schedule)


def test_cut_steps_are_the_steps_every_order_runs_in_place():
    schedule = random_wiring(7, model="ws", k=2, p=0.0, seed=0)  # a chain after the FIFO sort
    cuts = cut_steps(StepGraph(schedule))
    assert cuts == list(range(len(schedule.steps)))
    orders = topological_orders(random_wiring(8, model="er", p=0.4, seed=5))
    graph = StepGraph(random_wiring(8, model="er", p=0.4, seed=5))
    for t in cut_steps(graph):
        assert all(order[t] == t for order in orders)


@given(n=st.integers(1, 40), seed=st.integers(0, 5), model=st.sampled_from(["ws", "er"]))
@settings(max_examples=25, deadline=None)
def test_random_wiring_is_a_valid_schedule(n, seed, model):
    schedule = random_wiring(n, model=model, k=min(4, n - 1) if n > 1 else 0, p=0.3, seed=seed)
    assert len(schedule.steps) == n + 1 and schedule.outputs == ("out",)
    problem = problem_from_schedule(schedule)  # refuses a read before its write
    assert problem.steps == n + 1


def test_bad_generator_arguments_are_refused_with_what_is_accepted():
    with pytest.raises(ProblemError, match="accepted models are"):
        random_wiring(10, model="ba")
    with pytest.raises(ProblemError, match="n must be >= 1"):
        random_wiring(0)
    with pytest.raises(ProblemError, match="0 <= k < n"):
        random_wiring(5, k=5)
    with pytest.raises(ProblemError, match="exact_limit must be >= 0"):
        reorder(random_wiring(5), exact_limit=-1)
