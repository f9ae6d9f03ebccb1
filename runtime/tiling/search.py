"""The planner's choice of a tiling: split point, rows per band and method, measured by placing.

1. List every tileable head of the schedule (`runtime.tiling.stage.chains`); none: untiled,
   and the result says so.
2. For each head, each band height of its output (1, 2, 4, ... rows up to half the map) and
   each method, build the tiled graph and its memory problem, and score it by LOAD (the peak
   of live bytes: a fast lower bound of its arena) and its extra multiply-accumulates as a
   fraction of the model's.
3. Place the candidates no other beats on both (the Pareto front), then, lowest LOAD first,
   every candidate within `overhead` whose LOAD is not above the smallest arena placed so far
   plus `slack` (at most `PLACED` of them): the lowest LOAD often places worst, its many
   short-lived band buffers leaving holes, while a higher one fits its floor.
   Placed means the smallest arena of `SEARCH_STRATEGIES` (a few greedy orders, one pass of
   the placement engine each); the untiled arena, and 'never larger', are the first one's.
4. Place again, with `REPAIR` (`planner.strategies.eject`: the greedy plan repaired towards
   lower arena targets), the `REPAIRED` candidates within `overhead` of lowest LOAD whose
   greedy arenas sit above their LOAD, and whose LOAD is `REPAIR_GAIN` below the smallest
   arena placed, aiming below that arena: the rows a band carries to later bands live for
   many steps between one-step tiles, and greedy orders leave them above the tiles' holes.
   Each repair is bounded by the placements it tries (`REPAIR_WORK`), not by seconds, so the
   choice is the same on a busy machine; `REPAIR_SECONDS` only caps it, and the note says so.
5. Among the placed candidates within `overhead` and within `slack` of the smallest arena,
   take the fewest bands (each band is a round of small kernel calls), then the smaller
   arena; if none is smaller than the untiled graph's placed arena, keep the model untiled.

Placing is what decides, not the bound alone: a tiling can raise the peak instead of lowering
it (patch-based inference reported so in tinyengine#104), and then it is not taken.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import planner
from planner import Problem
from planner.bounds import live_bytes, load
from runtime.graph import Graph
from runtime.options import MemoryOptions
from runtime.problem import memory_problem
from runtime.tiling.attention import METHOD as ATTENTION_ROWS
from runtime.tiling.attention import attentions, tile_attention
from runtime.tiling.macs import graph_macs, node_macs
from runtime.tiling.stage import METHODS, Chain, band_count, chains, tiled_graph

DEFAULT_OVERHEAD = 0.2  # extra MACs allowed, a fraction of the model's
# Arena above the smallest traded for fewer bands (faster runs), a fraction of it. None by default:
# `--tile auto` answers the smallest arena; a caller who wants speed asks for a slack (`--tile-slack`).
DEFAULT_SLACK = 0.0
PLACED = 12  # candidates placed beyond the Pareto front, lowest LOAD first
# One pass of the placement engine each, and none wins on every tiled stage (figures:
# docs/BENCHMARKS.md, "Figures behind the code").
SEARCH_STRATEGIES = ("greedy_by_size", "wic", "greedy_by_conflicts")
# The greedy orders leave rows carried between bands above the one-step tiles' holes; the
# repair closes part of that gap to LOAD.
REPAIR = "eject"
REPAIRED = 2  # candidates placed again by REPAIR, lowest LOAD first
# Placements the repair tries for each (its `work`): a bound of work, not time, so that a busy
# machine chooses as a quiet one does (how it was chosen: docs/BENCHMARKS.md, "Figures behind the code").
REPAIR_WORK = 100_000
REPAIR_SECONDS = 30.0  # each: only a cap against a pathological problem; the note says when it cut one
REPAIR_ABOVE = 0.01  # a greedy arena this far above LOAD (a fraction of it) is worth repairing
REPAIR_GAIN = 0.03  # when its LOAD is this far below the smallest arena placed (a fraction of it)
TILE_MODES = ("auto", "off")


@dataclass(frozen=True)
class Candidate:
    chain: Chain
    rows: int
    method: str
    tiles: int
    extra_macs: float
    load: int
    arena_bytes: int | None = None  # placed, for the candidates on the front
    arena_first: int | None = None  # placed by the first of the strategies: 'never larger' is judged on it


@dataclass
class Tiling:
    """What `tile_auto` chose: the graph to plan and run, and the figures behind the choice."""

    graph: Graph
    arena_bytes_untiled: int
    chosen: Candidate | None = None
    curve: list[dict[str, float | int]] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any] | None:
        """The plan JSON's `tiling` field; None when the model stays untiled."""
        if self.chosen is None:
            return None
        c = self.chosen
        stage = {"nodes": [n.name for n in c.chain.nodes], "method": c.method, "tiles": c.tiles}
        return {
            "stages": [stage],
            "extra_macs": round(c.extra_macs, 6),
            "arena_bytes_untiled": self.arena_bytes_untiled,
            "curve": self.curve,
        }


def candidate_rows(graph: Graph, chain: Chain, method: str) -> list[int]:
    """Rows per band to try: powers of two up to half the map that is cut (the stage's input
    for stripes, its output for patches); a band of one input row computes almost nothing."""
    height = chain.height(graph, chain.source if method == "stripes" else chain.output)
    rows, found = (2 if method == "stripes" and height > 2 else 1), []
    while rows <= max(1, height // 2):
        found.append(rows)
        rows *= 2
    return found


def _search(
    graph: Graph, heads: list[Chain], options: MemoryOptions, total: int, deadline: float, cut: list[str]
) -> list[Candidate]:
    """Every head whose output is a narrow point of the network, screened with its finest
    stripes (of heads that leave the same peak after them and end on as large a map, the
    shortest: the elementwise ops after a DenseNet transition's Concat add nodes, not a lower
    arena); then every band height and method for the three best heads. Stopped by `deadline`,
    it says so in `cut`."""
    rest = _rest_peaks(graph, options)
    screened: list[Candidate] = []
    best = None
    seen: set[tuple[int, int]] = set()
    for chain in _narrow(graph, heads):
        if time.perf_counter() > deadline:
            cut.append("search")
            break
        after = (rest[len(chain.nodes)], graph.tensors[chain.output].nbytes)
        if (best is not None and after[0] >= best) or after in seen:
            continue  # what runs after this head alone needs more than the best so far
        seen.add(after)
        c = score(graph, chain, candidate_rows(graph, chain, "stripes")[0], "stripes", options, total)
        screened.append(c)
        best = c.load if best is None else min(best, c.load)
    found = list(screened)
    for head in sorted(screened, key=lambda c: (c.load, len(c.chain.nodes)))[:3]:
        for method in METHODS:
            for rows in candidate_rows(graph, head.chain, method):
                if time.perf_counter() > deadline:
                    cut.append("search")
                    return found
                if (method, rows) != (head.method, head.rows):
                    found.append(score(graph, head.chain, rows, method, options, total))
    return found


def _narrow(graph: Graph, heads: list[Chain]) -> list[Chain]:
    """Heads whose output is no larger than the outputs of the heads just before and after."""
    sizes = [graph.tensors[c.output].nbytes for c in heads]
    return [c for i, c in enumerate(heads) if sizes[i] <= min(sizes[max(i - 1, 0)], sizes[min(i + 1, len(sizes) - 1)])]


def _rest_peaks(graph: Graph, options: MemoryOptions) -> list[int]:
    """For each head length k, the peak of live bytes over the untiled steps after it: tiling
    the head leaves those steps as they are, so no tiling of it can go below."""
    live = live_bytes(memory_problem(graph, options))
    peaks = [0] * (len(graph.nodes) + 1)
    for k in range(len(graph.nodes) - 1, -1, -1):
        peaks[k] = max(peaks[k + 1], int(live[k]))
    return peaks


def score(graph: Graph, chain: Chain, rows: int, method: str, options: MemoryOptions, total: int) -> Candidate:
    """A candidate's extra MACs and LOAD, from its tiled graph and memory problem."""
    tiled = tiled_graph(graph, chain, rows, method)
    extra = sum(node_macs(tiled, n) for n in tiled.nodes) - total
    tiles = band_count(graph, chain, rows, method)
    peak = load(memory_problem(tiled, options))
    return Candidate(chain, rows, method, tiles, extra / total if total else 0.0, peak)


def tile_auto(
    graph: Graph,
    options: MemoryOptions | None = None,
    *,
    strategy: str | tuple[str, ...] = SEARCH_STRATEGIES,
    overhead: float = DEFAULT_OVERHEAD,
    slack: float = DEFAULT_SLACK,
    time_limit: float = 60.0,
    repair: str | None = REPAIR,
) -> Tiling:
    """The tiling of `graph` with the smallest placed arena within `overhead` extra MACs (see
    the module docstring), or `graph` itself with a note saying why it stays untiled. `repair`:
    the strategy of step 4 (None: none)."""
    options = options or MemoryOptions()
    started = time.perf_counter()
    strategies = (strategy,) if isinstance(strategy, str) else strategy
    untiled = planner.plan(memory_problem(graph, options), strategies[0]).arena_bytes
    blocked = tile_attention(graph, options, strategy=strategies[0], untiled=untiled, time_limit=time_limit)
    if blocked is not None:  # attention in blocks of query rows lowered the placed arena
        b = blocked
        chosen = Candidate(b.chain, b.rows, ATTENTION_ROWS, b.tiles, 0.0, b.load, b.arena_bytes)
        curve: list[dict[str, float | int]] = [{"extra_macs": 0.0, "arena_bytes": a} for a in (untiled, b.arena_bytes)]
        return Tiling(b.graph, untiled, chosen, curve, b.note, time.perf_counter() - started)
    heads = chains(graph)
    if not heads:
        tried = f"attention in blocks of query rows does not lower {untiled:,} bytes; " if attentions(graph) else ""
        return Tiling(graph, untiled, note=tried + "nothing tileable: the model does not start with a chain of "
                      "convolutions, pooling or elementwise ops on one NCHW or NHWC map; planned untiled")  # fmt: skip
    total = graph_macs(graph)
    cut: list[str] = []  # the steps the time limit stopped
    scored = _search(graph, heads, options, total, started + time_limit, cut)
    placed = _place(graph, scored, options, strategies, overhead, slack, started + time_limit, cut)
    capped: list[str] = []
    if repair is not None:
        placed = _repair(placed, options, overhead, repair, started + time_limit, capped)
    curve = [{"extra_macs": 0.0, "arena_bytes": untiled}] + [
        {"extra_macs": round(c.extra_macs, 6), "arena_bytes": c.arena_bytes or 0} for c, _ in _curve(placed)
    ]
    within = [(c, g) for c, g in placed if c.extra_macs <= overhead and (c.arena_first or 0) < untiled]
    seconds = time.perf_counter() - started
    limited = (
        f"; the {' and the '.join(sorted(set(cut)))} stopped at the time limit ({time_limit:g} s): "
        "a faster machine may choose otherwise"
        if cut
        else ""
    )
    if not within:
        note = f"no tiling within {overhead:.0%} extra MACs lowers the arena below {untiled:,} bytes; planned untiled"
        return Tiling(graph, untiled, curve=curve, note=note + limited, seconds=seconds)
    smallest = min(c.arena_bytes or 0 for c, _ in within)
    near = [p for p in within if (p[0].arena_bytes or 0) <= smallest * (1 + slack)]
    best, tiled = min(near, key=lambda p: (p[0].tiles, p[0].arena_bytes or 0, p[0].extra_macs, _key(p[0])))
    note = (
        f"tiled the first {len(best.chain.nodes)} nodes in {best.tiles} {best.method}: arena {best.arena_bytes:,} "
        f"bytes, untiled {untiled:,}; extra MACs {best.extra_macs:.1%}"
    )
    if best.arena_bytes != smallest:
        note += f"; fewest bands within {slack:.0%} of the smallest tiled arena ({smallest:,})"
    if capped:
        note += f"; {repair}'s repair stopped at its time cap on {', '.join(capped)}: its arena may differ on a faster machine"
    return Tiling(tiled, untiled, best, curve, note + limited, seconds)


def arena_of(problem: Problem, strategies: tuple[str, ...]) -> int:
    """The smallest arena the strategies place `problem` in."""
    return min(planner.plan(problem, s).arena_bytes for s in strategies)


def _key(c: Candidate) -> tuple[int, int, str]:
    return (len(c.chain.nodes), c.rows, c.method)


def _place(
    graph: Graph,
    scored: list[Candidate],
    options: MemoryOptions,
    strategies: tuple[str, ...],
    overhead: float,
    slack: float,
    deadline: float,
    cut: list[str],
) -> list[tuple[Candidate, Graph]]:
    """The Pareto front placed, then the candidates within `overhead`, lowest LOAD first, that
    could still come within `slack` of the smallest arena placed (see the module docstring).
    Stopped by `deadline`, it says so in `cut`."""
    placed: list[tuple[Candidate, Graph]] = []
    done: set[tuple[int, int, str]] = set()

    def put(cand: Candidate) -> None:
        tiled = tiled_graph(graph, cand.chain, cand.rows, cand.method)
        problem = memory_problem(tiled, options)
        arenas = [planner.plan(problem, s).arena_bytes for s in strategies]
        placed.append((_with_arena(cand, min(arenas), arenas[0]), tiled))
        done.add(_key(cand))

    for cand in _front(scored):
        put(cand)
    extra = 0
    for cand in sorted(scored, key=lambda c: (c.load, c.tiles, c.extra_macs, _key(c))):
        if extra >= PLACED:
            break
        if time.perf_counter() > deadline:
            cut.append("placement")
            break
        ok = [c.arena_bytes or 0 for c, _ in placed if c.extra_macs <= overhead]
        if ok and cand.load > min(ok) * (1 + slack):
            break  # no placed arena goes below LOAD, so neither can this nor any after it
        if cand.extra_macs <= overhead and _key(cand) not in done:
            put(cand)
            extra += 1
    return placed


def _repair(
    placed: list[tuple[Candidate, Graph]],
    options: MemoryOptions,
    overhead: float,
    strategy: str,
    deadline: float,
    capped: list[str],
) -> list[tuple[Candidate, Graph]]:
    """Step 4 of the module docstring: the arenas of a few candidates placed again by `strategy`,
    each within `REPAIR_WORK` placements; a candidate whose repair the time cap cut is named in
    `capped`."""
    found = list(placed)
    tried = 0
    for i in sorted(range(len(found)), key=lambda i: (found[i][0].load, _key(found[i][0]))):
        cand, tiled = found[i]
        left = deadline - time.perf_counter()
        if tried >= REPAIRED or left <= 0:
            break
        smallest = min((c.arena_bytes or 0) for c, _ in found if c.extra_macs <= overhead)
        if cand.extra_macs > overhead or (cand.arena_bytes or 0) <= cand.load * (1 + REPAIR_ABOVE):
            continue
        if cand.load > smallest * (1 - REPAIR_GAIN):
            continue  # no placement of it can go far enough below the smallest arena placed
        tried += 1
        problem = memory_problem(tiled, options)
        cap = min(REPAIR_SECONDS, left)
        repaired = planner.plan(problem, strategy, time_limit=cap, work=REPAIR_WORK, aim=smallest - 1)
        if repaired.stats.get("capped"):
            capped.append(f"{len(cand.chain.nodes)} nodes in {cand.tiles} {cand.method}")
        arena = repaired.arena_bytes
        if arena < (cand.arena_bytes or 0):
            found[i] = (_with_arena(cand, arena, cand.arena_first or arena), tiled)
    return found


def _curve(placed: list[tuple[Candidate, Graph]]) -> list[tuple[Candidate, Graph]]:
    """The placed points no other beats on both extra MACs and arena, fewest extra MACs first."""
    ordered = sorted(placed, key=lambda p: (p[0].extra_macs, p[0].arena_bytes or 0, _key(p[0])))
    front: list[tuple[Candidate, Graph]] = []
    for p in ordered:
        if not front or (p[0].arena_bytes or 0) < (front[-1][0].arena_bytes or 0):
            front.append(p)
    return front


def _with_arena(c: Candidate, arena: int, first: int) -> Candidate:
    return Candidate(c.chain, c.rows, c.method, c.tiles, c.extra_macs, c.load, arena, first)


def _front(candidates: list[Candidate]) -> list[Candidate]:
    """Candidates no other has both fewer-or-equal extra MACs and a lower-or-equal LOAD (strictly in one)."""
    ordered = sorted(candidates, key=lambda c: (c.extra_macs, c.load, len(c.chain.nodes), c.rows, c.method))
    front, best = [], None
    for c in ordered:
        if best is None or c.load < best:
            front.append(c)
            best = c.load
    return front
