"""The compiled gap search against `pick`, numpy's reading and a brute-force oracle."""

from __future__ import annotations

import os
import subprocess
import sys
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.gapsearch
import planner.timeline
from planner.gapsearch import gap_search, search, search_unions
from planner.timeline import pick
from tests.planner.test_engine_structures import reference_pick

# A union as (gap before, length) pairs: sorted, disjoint; gap 0 makes ranges touch (or
# start at 0), which the engine's unions never do but the search must still read right.
UNION = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 30)), min_size=1, max_size=12)
LOOSE = st.lists(st.tuples(st.integers(0, 400), st.integers(1, 40)), max_size=10)


def flat_of(pairs: list[tuple[int, int]]) -> list[int]:
    flat, reach = [], 0
    for gap, length in pairs:
        flat += [reach + gap, reach + gap + length]
        reach += gap + length
    return flat


def routes(unions: list[list[int]], loose: list[int], size: int, align: int, best: bool) -> dict[str, int]:
    """The answer of every route: the search in Python, compiled (when numba is there),
    through the engine's entry point, and `pick` and numpy on all ranges together."""
    buffers = [array("q", u) for u in unions]  # read in place by their addresses
    addresses = np.array([b.buffer_info()[0] for b in buffers], dtype=np.int64)
    lengths = np.array([len(u) for u in unions], dtype=np.int64)
    looser = np.array(loose, dtype=np.int64)
    got = {"python": int(gap_search(addresses, lengths, looser, size, align, best))}
    if search is not None:
        got["compiled"] = int(search(addresses, lengths, looser, size, align, best))
        got["entry"] = search_unions([array("q", u) for u in unions[:1]] + unions[1:], list(loose), size, align, best)
    everything = [x for u in unions for x in u] + loose
    got["pick"] = pick(list(everything), size, align, best)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner.timeline, "MANY", 0)  # every query read by numpy
        got["numpy"] = pick(list(everything), size, align, best)
    return got


@settings(max_examples=600, deadline=None)
@given(
    unions=st.lists(UNION, min_size=1, max_size=6),
    loose=LOOSE,
    size=st.integers(1, 60),
    align=st.sampled_from([1, 4, 16]),
    best=st.booleans(),
)
def test_search_gives_the_rules_gap(unions, loose, size, align, best):
    size = -(-size // align) * align  # a block's size is a multiple of its alignment
    flats = [flat_of(u) for u in unions]
    ranges = [(f[k], f[k + 1]) for f in flats for k in range(0, len(f), 2)]
    ranges += [(s, s + n) for s, n in loose]
    loose_flat = [x for s, n in loose for x in (s, s + n)]
    expected = reference_pick(ranges, size, align, best)
    got = routes(flats, loose_flat, size, align, best)
    assert got == dict.fromkeys(got, expected)


@pytest.mark.parametrize("best", [False, True])
def test_big_queries_cut_the_longest_unions_first_with_the_same_answer(best):
    # Past LONGEST_FIRST range ends the cuts go longest union first: the order changes the
    # cost only. Unions of 20,000 to 60,000 ends, gaps of random widths, many of them wide.
    rng = np.random.default_rng(7)
    unions = []
    for count in (10_000, 30_000, 20_000, 15_000):
        widths = rng.integers(1, 300, size=2 * count)
        unions.append(np.cumsum(widths).tolist())
    assert sum(map(len, unions)) > planner.gapsearch.LONGEST_FIRST
    loose = [x for s in rng.integers(0, 3_000_000, size=40).tolist() for x in (s, s + 50)]
    for size in (120, 260, 400):
        ranges = [(u[k], u[k + 1]) for u in unions for k in range(0, len(u), 2)]
        ranges += [(loose[k], loose[k + 1]) for k in range(0, len(loose), 2)]
        expected = reference_pick(ranges, size, 1, best)
        got = routes(unions, loose, size, 1, best)
        assert got == dict.fromkeys(got, expected), size


@pytest.mark.parametrize("best", [False, True])
def test_ties_go_to_the_lowest_and_the_shortest_fit_wins(best):
    # Free runs [10, 20), [30, 40), [50, 55), [60, 70): best takes the 5-byte one, first fit the lowest.
    unions = [[0, 10, 20, 30, 40, 50], [55, 60, 70, 80]]
    assert set(routes(unions, [], 5, 1, best).values()) == {50 if best else 10}
    # Two runs of the same length: the lowest.
    unions = [[0, 10, 20, 30], [40, 50]]
    assert set(routes(unions, [], 10, 1, best).values()) == {10}


def test_alignment_can_push_a_block_out_of_a_run():
    # [10, 30) is 20 bytes, but aligned to 16 the block starts at 16 and needs up to 32.
    unions = [[0, 10, 30, 40]]
    assert set(routes(unions, [], 16, 16, False).values()) == {48}
    assert set(routes(unions, [], 16, 16, True).values()) == {48}
    assert set(routes(unions, [], 8, 8, True).values()) == {16}


def test_nothing_fits_goes_above_the_highest_end_of_any_range():
    unions = [[0, 10], [5, 20]]
    assert set(routes(unions, [15, 37], 4, 8, True).values()) == {40}
    # A loose range below a union's start: the run below it is cut.
    assert set(routes([[50, 60]], [0, 45], 10, 1, False).values()) == {60}
    assert set(routes([[50, 60]], [0, 40], 10, 1, False).values()) == {40}


def test_a_block_filling_a_run_exactly():
    unions = [[0, 10, 20, 30], [35, 50]]
    assert set(routes(unions, [30, 32], 3, 1, True).values()) == {32}
    assert set(routes(unions, [30, 32], 10, 1, True).values()) == {10}


@pytest.mark.parametrize("switch", ["0", "off", "1"])
def test_the_route_follows_the_switch(switch):
    # numba is optional: without it, or with MEMPLAN_JIT=0, the engine reads big queries in numpy.
    try:
        import numba  # noqa: F401
    except ImportError:
        pytest.skip("numba is not installed")
    env = dict(os.environ, MEMPLAN_JIT=switch)
    code = "import planner.gapsearch as g; print(g.search is None)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(switch != "1")


@settings(max_examples=60, deadline=None)
@given(blocked=st.integers(0, 150), size=st.sampled_from([4, 8, 10]), best=st.booleans())
def test_many_candidates_the_first_ones_blocked(blocked, size, best):
    # 150 gaps of 10 bytes in one union; another union covers the lowest `blocked` of them,
    # so first fit finds its gap past several rounds of candidates (or above everything).
    first = [x for k in range(150) for x in (20 * k, 20 * k + 10)]
    second = [10, 20 * blocked] if blocked else [5000, 5001]
    expected = 20 * blocked + 10 if blocked < 150 else 3000  # 3000: above the second union
    assert set(routes([first, second], [], size, 1, best).values()) == {expected}
    expected = 3010 if blocked >= 149 else expected  # above the loose range
    assert set(routes([second, first], [2990, 3010], size, 1, best).values()) == {expected}
