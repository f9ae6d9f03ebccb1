"""The placement engine's gap rules: first fit, best fit, on top, and alignment."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner import Buffer, Pool, generate, make_problem
from planner.placement import Placer


def test_first_fit_takes_the_lowest_gap_best_fit_the_tightest():
    # Placed and live at step 0: [0,2) [8,10) [14,20); free gaps: [2,8) of 6 and [10,14) of 4.
    problem = make_problem([Buffer("a", 2, 0, 0), Buffer("b", 2, 0, 0), Buffer("c", 6, 0, 0), Buffer("new", 4, 0, 0)])
    placer = Placer(problem)
    for block, offset in ((0, 0), (1, 8), (2, 14)):
        placer.place_at(block, 0, offset)
    assert placer.choose(3, 0, "first") == 2
    assert placer.choose(3, 0, "best") == 10
    assert placer.choose(3, 0, "top") == 20


def test_gap_search_respects_alignment():
    problem = make_problem([Buffer("a", 3, 0, 0), Buffer("b", 100, 0, 0), Buffer("new", 4, 0, 0, alignment=8)])
    placer = Placer(problem)
    placer.place_at(0, 0, 0)
    placer.place_at(1, 0, 12)
    # The gap [3, 12) holds 4 bytes only from an aligned start of 8.
    assert placer.choose(2, 0, "first") == 8


def _every_order_whole(problem, orders, rule):
    """The reference for `place_best_of`: every order placed whole, the smallest arena kept."""
    results = []
    for rank, (name, order) in enumerate(orders.items()):
        placer = Placer(problem)
        placer.place_all(order, rule)
        results.append((not placer.feasible, placer.arena_bytes, rank, name, placer.snapshot()))
    return min(results, key=lambda r: r[:3])


@pytest.mark.parametrize("make", ["training_like", "network_like", "two_pools", "too_small"])
@pytest.mark.parametrize("rule", ["best", "first"])
def test_best_of_orders_keeps_what_placing_every_order_whole_keeps(make, rule):
    for seed in range(3):
        if make == "two_pools":  # a small fast pool: blocks spill over, and some orders overflow it
            problem = generate.network_like(600, seed=seed)
            problem = problem.replace(pools=(Pool("fast", planner.load(problem) // 2), Pool("slow")))
        elif make == "too_small":  # every order overflows: none is given up, the smallest kept
            problem = generate.network_like(600, seed=seed)
            problem = problem.replace(pools=(Pool("arena", planner.load(problem) // 2),))
        else:
            problem = getattr(generate, make)(1500, seed=seed)
        placer = Placer(problem)
        b = placer.blocks
        length = b.last - b.first
        index = np.arange(len(b))  # each order ends in the block index, as the strategies' do
        orders = {
            "spatial": np.lexsort((index, -length, -b.size)),
            "temporal": np.lexsort((index, -b.size, -length)),
            "first": np.lexsort((index, b.first)),
        }
        infeasible, arena, _, name, (pool, offset, top) = _every_order_whole(problem, orders, rule)
        assert placer.place_best_of(orders, rule) == name
        assert (not placer.feasible, placer.arena_bytes, placer.top) == (infeasible, arena, top)
        assert np.array_equal(placer.pool, pool) and np.array_equal(placer.offset, offset)
