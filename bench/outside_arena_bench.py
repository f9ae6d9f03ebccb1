"""Bytes an integer model's run holds beside the arena: each shared int8 `.tflite` model and the QDQ
MobileNetV2, untiled and tiled (`--tile auto`), in two accountings.

- with scratch: ``MemoryOptions()`` untiled, ``MemoryOptions(io="external")`` tiled (as
  bench/tile_bench.py's rows): kernels' scratch planned in the arena, so what a run holds beside it is
  what kernels allocate on their own;
- activations: ``MemoryOptions(io="external", workspace=False)``: kernels' scratch beside the arena by
  definition (one shared buffer per thread, counted), the rest as above.

Each figure is `RunStats.outside_arena_bytes` of a `runtime.Session` run traced by tracemalloc (after
an untraced run), the thread's shared scratch included; the session's arena (`best` untiled; the
smaller of `best` and `eject` tiled) and the bound the float models' test holds (max(1% of the arena,
64 KiB), tests/runtime/test_outside_arena.py) are printed beside it. Inputs are seeded random
(`runtime.oracle.random_inputs`). The models: ``../shared/models/tflite/*.tflite`` beside the
repository, and bench/.models/quant/mobilenetv2_qdq.onnx (made by `bench/quant_bench.py`); absent ones
are skipped. Tiling is tried on the models of more than 100 kB of arena only (the small ones tile to
nothing).

Run from the repository root: ``python bench/outside_arena_bench.py [--models a,b] [--no-tiled]``.
Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner  # noqa: E402
from runtime import Graph, MemoryOptions, Session, load_model, memory_problem  # noqa: E402
from runtime.oracle import random_inputs  # noqa: E402
from runtime.tiling import tile_auto  # noqa: E402

SHARED = ROOT.parent / "shared" / "models" / "tflite"
QDQ = ROOT / "bench" / ".models" / "quant" / "mobilenetv2_qdq.onnx"
ACCOUNTS = {
    "with scratch": (MemoryOptions(), MemoryOptions(io="external")),
    "activations": (MemoryOptions(io="external", workspace=False),) * 2,
}
TILE_FROM = 100_000  # arena bytes under which tiling is not tried


def models() -> dict[str, Path]:
    found = {p.stem: p for p in sorted(SHARED.glob("*.tflite"))}
    if QDQ.exists():
        found["mobilenetv2_qdq"] = QDQ
    return found


def traced(graph: Graph, plan: planner.Plan, options: MemoryOptions) -> tuple[int, int]:
    """(arena bytes, bytes beside the arena) of a traced run after an untraced one."""
    session = Session(graph, plan, options).prepare()
    feeds = random_inputs(graph, seed=0)
    session.run(feeds)
    session.run(feeds, measure="memory")
    assert session.stats.outside_arena_bytes is not None
    return session.stats.arena_bytes, session.stats.outside_arena_bytes


def measure(path: Path, tiled: bool) -> list[tuple[str, str, int, int]]:
    """(account, untiled or tiled, arena, beside) rows of one model."""
    rows = []
    graph = load_model(path)
    for account, (untiled_options, tiled_options) in ACCOUNTS.items():
        plan = planner.plan(memory_problem(graph, untiled_options), "best", time_limit=5.0)
        rows.append((account, "untiled", *traced(graph, plan, untiled_options)))
        if not tiled or plan.arena_bytes < TILE_FROM:
            continue
        tiling = tile_auto(graph, tiled_options)
        if tiling.chosen is None:
            continue
        problem = memory_problem(tiling.graph, tiled_options)
        found = (planner.plan(problem, "best", time_limit=5.0), planner.plan(problem, "eject"))
        best = min(found, key=lambda p: p.arena_bytes)
        rows.append(
            (account, f"tiled ({len(tiling.chosen.chain.nodes)} nodes)", *traced(tiling.graph, best, tiled_options))
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="", help="comma-separated model names (default: all found)")
    parser.add_argument("--no-tiled", action="store_true", help="untiled runs only")
    args = parser.parse_args()
    found = models()
    wanted = [m for m in args.models.split(",") if m] or list(found)
    unknown = [m for m in wanted if m not in found]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; found: {sorted(found)}")
    print(f"{'model':36} {'account':13} {'run':20} {'arena':>10} {'beside':>11} {'bound':>9}")
    for name in wanted:
        for account, run, arena, beside in measure(found[name], not args.no_tiled):
            bound = max(arena // 100, 64 * 1024)
            print(f"{name:36} {account:13} {run:20} {arena:>10,} {beside:>11,} {bound:>9,}", flush=True)


if __name__ == "__main__":
    main()
