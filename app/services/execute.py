"""`memplan run`: execute a model inside its planned arena, measure it, and judge its outputs.

Time and memory come from separate runs (`runtime.measure_runs`): one run traced by tracemalloc
gives `outside_arena_bytes` (and warms up), then `repeat` untraced runs give `seconds`, their
median. The arena is planned and its size checked before any input is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from app.services.inputs import InputError, fused_nodes
from app.services.tiling import check_tile, tile_graph
from runtime import MemoryOptions


def run_model(
    path: Path,
    *,
    dims: dict[str, int],
    shapes: dict[str, list[int]] | None = None,
    strategy: str,
    inputs: Path | None,
    save_outputs: Path | None,
    seed: int,
    repeat: int,
    memory: MemoryOptions,
    canary: bool,
    verify: bool,
    reorder: bool = False,
    tile: str = "off",
    tile_overhead: float = 0.2,
    tile_slack: float = 0.0,
) -> dict[str, Any]:
    import planner
    import runtime
    from runtime.oracle import random_inputs
    from runtime.oracle import verify as judge
    from runtime.states import fresh_capture

    if not path.exists():
        raise InputError(f"{path}: no such file")
    planner.get(strategy)  # an unknown name fails here, listing the accepted ones
    check_tile(tile, tile_overhead, tile_slack)
    graph = runtime.load_model(path, dims=dims, shapes=shapes, fuse=memory.fuse)
    found = None
    if reorder:
        graph, found = runtime.reorder_graph(graph, memory)
    tiling = tile_graph(graph, memory, tile=tile, overhead=tile_overhead, slack=tile_slack)
    graph = tiling.graph if tiling is not None else graph  # tiled stages are ordinary nodes to the Session
    session = runtime.Session(graph, strategy, memory, canary=canary).prepare()  # refuses too big an arena
    feeds = _read_npz(inputs) if inputs is not None else random_inputs(graph, seed)
    # What the aliases save: the same strategy on the problem without in-place and concat-in-place aliases.
    plain = runtime.memory_problem(graph, memory.replace(inplace=False, concat_inplace=False))
    measured = runtime.measure_runs(session, feeds, repeat)
    outputs: dict[str, Any] = measured.outputs
    assert session.plan is not None  # made by prepare()
    report: dict[str, Any] = {
        "model": path.name,
        "strategy": strategy,
        "arena_bytes": session.plan.arena_bytes,
        "lower_bound": session.plan.lower_bound,
        "outside_arena_bytes": measured.outside_arena_bytes,
        "seconds": measured.median_seconds,
        "timed_runs": len(measured.seconds),
        "outputs": {name: [int(d) for d in value.shape] for name, value in outputs.items()},
        "inputs": str(inputs) if inputs else f"random, seed {seed}",
        "input_shapes": {name: list(graph.tensors[name].shape) for name in graph.inputs},
        "order": "memory-aware" if reorder else "model",
        "inplace": memory.inplace,
        "concat_inplace": memory.concat_inplace,
        "fuse": memory.fuse,
        "prepared_weights": memory.prepared_weights,
        # the bytes held beside the arena: initializers and the kernels' transformed copies of them
        "parameter_bytes": session.constant_bytes,
        # of which the states (.tflite variable tensors), the session's own and carried from run to run
        "state_bytes": session.states.nbytes,
        "fused_nodes": fused_nodes(graph),
        "arena_bytes_without_aliases": planner.plan(plain, strategy).arena_bytes,
    }
    if found is not None:
        report["reorder"] = found.summary()  # the method (exact, divided, heuristic) and whether proven
    report["tiling"] = tiling.to_json() if tiling is not None else None
    if tiling is not None:
        report["tiling_note"] = tiling.note
    if verify:
        report["verification"] = judge(path, feeds, outputs, capture=fresh_capture(session, feeds))
    if save_outputs is not None:
        np.savez(save_outputs, **outputs)
    return report


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        raise InputError(f"--inputs {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (ValueError, OSError) as e:
        raise InputError(f"--inputs {path}: not a readable .npz of arrays ({e})") from None
