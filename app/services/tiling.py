"""`--tile auto|off`, `--tile-overhead` and `--tile-slack` (REST: `tile`, `tile_overhead`, `tile_slack`):
a model's graph tiled by `runtime.tiling.tile_auto` before it is planned or run, and the `tiling` field."""

from __future__ import annotations

import math
from typing import Any

from app.errors import AppError
from app.services.inputs import InputError
from planner import Problem
from runtime import Graph, MemoryOptions, memory_problem
from runtime.tiling import DEFAULT_OVERHEAD, DEFAULT_SLACK, TILE_MODES, Tiling, chains, tile_auto, tiled_graph
from runtime.tiling.attention import METHOD as ATTENTION_ROWS
from runtime.tiling.attention import attentions, blocked_graph

__all__ = [
    "DEFAULT_OVERHEAD",
    "DEFAULT_SLACK",
    "TILE_MODES",
    "apply_choice",
    "check_tile",
    "tile_choice",
    "tile_graph",
    "tiled_problem",
]


def check_tile(
    tile: str,
    overhead: Any,
    slack: Any = DEFAULT_SLACK,
    *,
    names: tuple[str, str, str] = ("--tile", "--tile-overhead", "--tile-slack"),
) -> float:
    """`overhead` as a float, once `tile`, it and `slack` are valid; else an InputError naming the field."""
    if tile not in TILE_MODES:
        raise InputError(f"{names[0]} {tile!r}: accepted values are {', '.join(TILE_MODES)}")
    if not _non_negative(overhead):
        raise InputError(
            f"{names[1]} {overhead!r}: takes a number >= 0, the extra multiply-accumulates allowed as a fraction "
            f"of the model's (default {DEFAULT_OVERHEAD})"
        )
    if not _non_negative(slack):
        raise InputError(
            f"{names[2]} {slack!r}: takes a number >= 0, the arena above the smallest tiled one that may be "
            f"traded for fewer bands (faster runs), a fraction of it (default {DEFAULT_SLACK:g}: the smallest arena)"
        )
    return float(overhead)


def _non_negative(value: Any) -> bool:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool) and math.isfinite(number) and number >= 0


def tile_graph(
    graph: Graph, memory: MemoryOptions, *, tile: str, overhead: float, slack: float = DEFAULT_SLACK
) -> Tiling | None:
    """The tiling `tile_auto` chooses for `graph` (its `graph` is the model itself when nothing
    pays, and its `note` says why), or None for ``tile="off"``."""
    check_tile(tile, overhead, slack)
    return tile_auto(graph, memory, overhead=overhead, slack=slack) if tile == "auto" else None


def tiled_problem(problem: Problem, tiling: Tiling | None, memory: MemoryOptions) -> Problem:
    """`problem` made again for the tiled graph, with its name, alignment and capacity."""
    if tiling is None or tiling.chosen is None:
        return problem
    tiled = memory_problem(tiling.graph, memory, name=problem.name)
    if tiled.alignment != problem.alignment:
        tiled = tiled.replace(alignment=problem.alignment)
    return tiled.replace(pools=problem.pools) if problem.pools != tiled.pools else tiled


def tile_choice(tiling: Tiling | None) -> dict[str, Any] | None:
    """What a stored plan needs to make its tiled graph again: head length, rows per band, method."""
    if tiling is None or tiling.chosen is None:
        return None
    c = tiling.chosen
    return {"head": len(c.chain.nodes), "rows": c.rows, "method": c.method}


def apply_choice(graph: Graph, choice: dict[str, Any] | None) -> Graph:
    """`graph` tiled as a stored plan's `tile_choice` says (itself when there is none)."""
    if not choice:
        return graph
    if choice["method"] == ATTENTION_ROWS:  # attention in blocks of query rows: every attention found
        if not attentions(graph):
            raise AppError(409, "the stored tiling (attention in row blocks) does not fit this model; plan it again")
        return blocked_graph(graph, int(choice["rows"]))
    heads = [c for c in chains(graph) if len(c.nodes) == choice["head"]]
    if not heads:
        raise AppError(409, f"the stored tiling (first {choice['head']} nodes) does not fit this model; plan it again")
    return tiled_graph(graph, heads[0], int(choice["rows"]), str(choice["method"]))
