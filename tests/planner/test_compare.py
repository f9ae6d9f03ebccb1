"""Several strategies side by side (planner.compare): each result checked, failures kept with
their reason, the best one chosen, and names resolved as the CLI and the API accept them."""

from __future__ import annotations

import pytest

from planner import Buffer, Pool, UnknownStrategyError, check_plan, make_problem, names
from planner.compare import best, resolve_names, run_strategies

# Three buffers of 64 bytes, a and c never live together: LOAD 128, naive 192.
PROBLEM = make_problem([Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2), Buffer("c", 64, 2, 3)])


def test_every_result_is_checked_and_carries_the_yardsticks():
    seen = []
    results = run_strategies(PROBLEM, ["naive", "greedy_by_size"], on_done=seen.append)
    assert [r.strategy for r in results] == ["naive", "greedy_by_size"] and seen == results
    for r in results:
        assert r.valid and r.plan is not None and check_plan(PROBLEM, r.plan).ok
        assert (r.lower_bound, r.naive_bytes) == (128, 192)
    assert [r.arena_bytes for r in results] == [192, 128]
    assert [r.ratio for r in results] == [1.5, 1.0]
    assert best(results) is results[1]


def test_a_strategy_that_does_not_fit_keeps_its_reason_and_no_plan():
    tight = PROBLEM.replace(pools=(Pool("arena", 150),))
    naive_result, greedy_result = run_strategies(tight, ["naive", "greedy_by_size"])
    assert naive_result.plan is None and not naive_result.valid and naive_result.ratio is None
    assert "too small" in (naive_result.error or "")
    assert naive_result.to_json()["arena_bytes"] is None and "error" in naive_result.to_json()
    assert best([naive_result, greedy_result]) is greedy_result
    assert best([naive_result]) is None


def test_names_resolve_like_the_cli_and_the_api():
    assert resolve_names("all") == names()
    assert resolve_names("naive, bump") == ["naive", "bump"]
    assert resolve_names(["wic"]) == ["wic"]
    with pytest.raises(UnknownStrategyError, match="unknown strategy 'fastest'"):
        resolve_names("naive,fastest")
