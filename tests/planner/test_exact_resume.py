"""The exact searches run a slice at a time (`planner.exact.resume`) against the same
searches run in one go, the portfolio's answers against a brute force on more seeds, and
what the driver leaves behind (no thread of a paused search outlives its call)."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from planner import check_plan, load, plan
from planner.csvio import load_csv
from planner.exact import ExactInfeasibleError
from planner.exact.bounded import BudgetSpent
from planner.exact.driver import PORTFOLIO, Budget, decide, minimise
from planner.exact.model import Model
from planner.exact.resume import Resumable
from planner.generate import network_like
from planner.placement import Placer
from planner.problem import Problem
from tests.planner.test_optimal import CAPACITY, TRACES, brute_force, random_problem


def _challenging(letter: str) -> Problem:
    path = TRACES / f"minimalloc_{letter}.{CAPACITY}.csv"
    if not path.exists():
        pytest.skip(f"{path.name} is not available here")
    return load_csv(path)


def _model(problem: Problem) -> Model:
    blocks = Placer(problem).blocks
    sized = blocks.size > 0
    return Model.of(blocks.size[sized], blocks.first[sized], blocks.last[sized], blocks.align[sized])


def _packs(model: Model, offsets: np.ndarray, height: int) -> bool:
    """Independently of the searches: every block under the height, no two meeting ones overlap."""
    o = [int(x) for x in offsets]
    for i in range(len(model)):
        if o[i] < 0 or o[i] % int(model.align[i]) or o[i] + int(model.size[i]) > height:
            return False
        for j in range(i + 1, len(model)):
            meets = model.first[i] <= model.last[j] and model.first[j] <= model.last[i]
            if meets and not (o[i] + model.size[i] <= o[j] or o[j] + model.size[j] <= o[i]):
                return False
    return True


def _search_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "memplan-exact-search"]


def _in_slices(search, first: int) -> tuple[Resumable, int]:
    """Run `search` to its end in slices growing from `first` nodes; and how many pauses."""
    run = Resumable(search)
    try:
        until, pauses = first, 0
        while not run.step(until):
            pauses += 1
            until = int(until * 1.7) + 1
    finally:
        run.close()
    return run, pauses


# Each search of the portfolio with a challenging instance it packs within a few thousand nodes.
@pytest.mark.parametrize("position, letter", [(0, "A"), (1, "K"), (2, "H"), (3, "G")])
def test_a_search_in_slices_packs_as_the_same_search_in_one_go(position, letter):
    kind, order, _ = PORTFOLIO[position]
    model = _model(_challenging(letter))
    whole = kind(model, CAPACITY, order, node_limit=30_000)
    expected = whole.run()
    assert expected is not None
    run, pauses = _in_slices(kind(model, CAPACITY, order), 7)
    assert pauses > 0  # it was paused and went on
    assert np.array_equal(expected, run.offsets) and _packs(model, run.offsets, CAPACITY)
    assert run.search.nodes == whole.nodes
    assert not _search_threads()


@pytest.mark.parametrize("kind, order", [(kind, order) for kind, order, _ in PORTFOLIO])
@pytest.mark.parametrize("seed", range(12))
def test_a_search_in_slices_proves_what_the_same_search_in_one_go_proves(kind, order, seed):
    rng = random.Random(7000 + seed)
    problem = random_problem(rng, 7)
    model = _model(problem)
    best = brute_force(problem)
    for height in (best, best - 1):
        whole = kind(model, height, order)
        expected = whole.run()
        run, _ = _in_slices(kind(model, height, order), 1)
        assert run.done and (run.offsets is None) == (expected is None) == (height < best)
        assert run.search.nodes == whole.nodes
    assert not _search_threads()


def test_closing_a_paused_search_ends_its_thread_and_a_deadline_ends_it_too():
    model = _model(_challenging("E"))
    kind, order, _ = PORTFOLIO[1]
    paused = Resumable(kind(model, CAPACITY, order))
    assert paused.step(20) is False and len(_search_threads()) == 1
    paused.close()
    assert not _search_threads() and not paused.done
    late = Resumable(kind(model, CAPACITY, order, deadline=time.perf_counter()))
    with pytest.raises(BudgetSpent):
        late.step(10**9)
    with pytest.raises(BudgetSpent):  # and again, at once, when asked again
        late.step(10**9)
    late.close()
    assert not _search_threads()


def test_an_error_inside_a_search_reaches_the_caller():
    model = _model(_challenging("A"))
    kind, order, _ = PORTFOLIO[1]
    broken = Resumable(kind(model, CAPACITY, "no such order"))
    with pytest.raises(KeyError):
        broken.step(100)
    broken.close()
    assert not _search_threads()


@pytest.mark.parametrize("seed", range(60))
def test_the_driver_decides_the_brute_force_optimum_and_one_byte_less(seed):
    rng = random.Random(9000 + seed)
    problem = random_problem(rng, rng.randint(2, 7), alignment=rng.choice([1, 1, 4]), aligned_buffers=seed % 4 == 0)
    best = brute_force(problem)
    model = _model(problem)
    found = decide(model, best, Budget(max_nodes=200_000))
    assert found.status in ("optimal", "feasible") and _packs(model, found.offsets, best)
    proof = decide(model, best - 1, Budget(max_nodes=200_000))
    assert proof.status == "infeasible" and proof.offsets is None and proof.lower_bound == best
    greedy = np.zeros(len(model), dtype=np.int64)
    top = 0
    for i in range(len(model)):  # stacked one above the other: valid, rarely optimal
        greedy[i] = -(-top // int(model.align[i])) * int(model.align[i])
        top = int(greedy[i] + model.size[i])
    smallest = minimise(model, greedy, Budget(max_nodes=200_000))
    assert smallest.status == "optimal" and model.height(smallest.offsets) == best == smallest.lower_bound
    assert not _search_threads()


def test_a_challenging_instance_at_its_optimum_and_one_byte_short_and_no_thread_is_left():
    # C packs in 1,039,360 bytes, its LOAD: found by the search, and one byte less refused
    # with that proof.
    problem = _challenging("C")
    optimum = plan(problem, "optimal", time_limit=60.0)
    assert check_plan(problem, optimum).ok and optimum.stats["status"] == "optimal"
    assert optimum.arena_bytes == load(problem) == 1_039_360
    with pytest.raises(ExactInfeasibleError) as info:
        plan(problem.with_capacity(optimum.arena_bytes - 1), "optimal", time_limit=5.0)
    assert info.value.proven and info.value.lower_bound == optimum.arena_bytes
    tight = network_like(300, seed=7)
    result = plan(tight, "optimal", time_limit=0.3)  # the deadline ends paused searches
    assert check_plan(tight, result).ok
    assert not _search_threads()


def test_a_search_as_deep_as_its_blocks_runs_in_its_thread_and_puts_the_limit_back():
    import sys

    before = sys.getrecursionlimit()
    n = 1000  # all live at once: every packing stacks them, one recursion level or more each
    sizes = np.arange(1, n + 1, dtype=np.int64) * 8
    model = Model.of(sizes, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64))
    assert 2 * n > before
    found = decide(model, int(sizes.sum()), Budget(max_nodes=100_000))
    assert found.status == "optimal" and _packs(model, found.offsets, int(sizes.sum()))
    assert sys.getrecursionlimit() == before
    assert not _search_threads()
