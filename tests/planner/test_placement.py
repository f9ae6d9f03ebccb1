"""The placement engine's gap rules: first fit, best fit, on top, and alignment."""

from __future__ import annotations

from planner import Buffer, make_problem
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
