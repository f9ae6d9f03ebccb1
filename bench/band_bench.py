"""A tiled stage's two routes side by side: where a float tiled model's run time goes, step by step.

For each float model (`bench/.models`, as `bench/tile_bench.py` reads them) and accounting
(`--accounts`: activations, ``MemoryOptions(io="external", workspace=False)``, by default; with
scratch, kernels' scratch planned in the arena, which the compiled calls then use), `tile_auto` picks the tiled graph
(default budget and slack) and `best` plans it; three sessions then run in one process, one run each
in turn, one BLAS thread: the untiled model, the tiled model on the step loop (one Python-level
call per band step: `runtime.tiling.band_program.COMPILED` off while it prepares) and the tiled
model with its stage in compiled calls (`runtime.tiling.band_program`). All three are checked
against onnxruntime (`runtime.oracle.verify`); the two tiled sessions share one plan, so one arena.

Per row: median ms of each route and the ratios to untiled; then, from the step loop's per-step
times (each step's fastest of the runs, which load inflates least), what the stage's steps cost by
kind beside what the untiled run's steps for the same nodes cost, and the compiled stage's call.

Run from the repository root: ``python bench/band_bench.py [--models mobilenetv2,resnet18] [--repeat 15]``.
Writes section "tiled-stage-route" of docs/BENCHMARKS.md and prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # one BLAS thread, read at load
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner  # noqa: E402
from runtime import MemoryOptions, Session, load_model, memory_problem  # noqa: E402
from runtime.oracle import verify  # noqa: E402
from runtime.tiling import band_program, tile_auto  # noqa: E402

FOLDER = ROOT / "bench" / ".models"
ACCOUNTS = {  # as bench/tile_bench.py's rows
    "activations": MemoryOptions(io="external", workspace=False),
    "with scratch": MemoryOptions(io="external"),
}


def _kind(name: str, op: str) -> str:
    """The kind of a tiled graph's step, by the names `runtime.tiling.stage` gives them."""
    if name.startswith("place:"):
        return "TileRows (output placed)"
    if name.startswith("rows:"):
        return "TileRows (rows carried)" if name.endswith("~") else "TileRows (window gathered)"
    return f"{op} band" if "@" in name else "after the stage"


def measure(name: str, repeat: int, account: str = "activations") -> dict:
    path = FOLDER / f"{name}.onnx"
    with np.load(FOLDER / f"{name}.npz") as archive:
        feeds = {k: archive[k] for k in archive.files}
    graph, options = load_model(path), ACCOUNTS[account]
    tiling = tile_auto(graph, options)
    if tiling.chosen is None:
        return {"model": name, "account": account, "note": tiling.note}
    plan = planner.plan(memory_problem(tiling.graph, options), "best", time_limit=5.0)
    plain = Session(graph, "best", options).prepare()
    band_program.COMPILED = False
    try:
        loop = Session(tiling.graph, plan, options).prepare()
    finally:
        band_program.COMPILED = True
    fast = Session(tiling.graph, plan, options).prepare()
    sessions = [plain, loop, fast]
    outputs = [s.run(feeds) for s in sessions]
    seconds: list[list[float]] = [[] for _ in sessions]
    fastest = [np.full(len(s.graph.nodes), np.inf) for s in sessions]
    for _ in range(repeat):
        for k, s in enumerate(sessions):
            started = time.perf_counter()
            outputs[k] = s.run(feeds)
            seconds[k].append(time.perf_counter() - started)
            assert s.stats is not None and s.stats.step_times is not None
            fastest[k] = np.minimum(fastest[k], s.stats.step_times)
    verified = all(verify(path, feeds, out)["passed"] for out in outputs)
    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for (step, op), t in zip(loop.stats.step_labels, fastest[1], strict=True):  # type: ignore[union-attr]
        kinds[_kind(step, op)][0] += 1
        kinds[_kind(step, op)][1] += float(t)
    heads = {n.name for n in tiling.chosen.chain.nodes}
    untiled_head = sum(
        float(t) for (step, _), t in zip(plain.stats.step_labels, fastest[0], strict=True) if step in heads
    )  # type: ignore[union-attr]
    stage = sum(1 for step, _ in loop.stats.step_labels if _kind(step, "") != "after the stage")  # type: ignore[union-attr]
    calls = fastest[2][:stage]
    return {
        "model": name,
        "account": account,
        "stage": f"{len(tiling.chosen.chain.nodes)} nodes, {tiling.chosen.method}, {tiling.chosen.tiles} bands, {stage:,} steps",
        "arena": (plan.arena_bytes, plain.plan.arena_bytes if plain.plan else 0),
        "ms": [float(np.median(s)) * 1e3 for s in seconds],
        "fastest": [float(np.min(s)) * 1e3 for s in seconds],
        "verified": verified,
        "kinds": dict(kinds),
        "untiled_head": untiled_head * 1e3,
        "compiled_stage": float(calls[calls > 0].sum()) * 1e3,
        "route": fast.stage_note,
    }


def section(rows: list[dict], command: str) -> str:
    lines = [
        "### A tiled stage's route: the step loop against compiled calls",
        "",
        f"`{command}` (`tile_auto`'s choice planned by `best`; median and fastest of runs "
        "in one process, the three sessions taking turns, one BLAS thread; outputs against onnxruntime). "
        "Hand-written notes follow the section.",
        "",
        "| model | arena | stage | arena tiled / untiled | ms untiled | ms tiled, step loop | ms tiled, compiled stage "
        "| fastest runs: untiled / step loop / compiled | outputs match | compiled route |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        if "ms" not in r:
            lines.append(f"| {r['model']} | {r['account']} | untiled: {r['note']} | | | | | | | |")
            continue
        base, loop, fast = r["ms"]
        low = r["fastest"]
        lines.append(
            f"| {r['model']} | {r['account']} | {r['stage']} | {r['arena'][0]:,} / {r['arena'][1]:,} | {base:.1f} | {loop:.1f} "
            f"({loop / base:.2f}x) | {fast:.1f} ({fast / base:.2f}x) | {low[0]:.1f} / {low[1]:.1f} "
            f"({low[1] / low[0]:.2f}x) / {low[2]:.1f} ({low[2] / low[0]:.2f}x) | "
            f"{'yes' if r['verified'] else '**no**'} | {r['route']} |"
        )
    for r in rows:
        if "kinds" not in r:
            continue
        lines += [
            "",
            f"{r['model']} ({r['account']}), the step loop's steps by kind (sum of each step's fastest run):",
            "",
        ]
        lines += ["| steps | count | ms | us a step |", "|---|---:|---:|---:|"]
        for kind, (count, total) in sorted(r["kinds"].items(), key=lambda item: -item[1][1]):
            lines.append(f"| {kind} | {count:,} | {total * 1e3:.2f} | {total * 1e6 / count:.1f} |")
        lines += [
            "",
            f"The same nodes untiled: {r['untiled_head']:.2f} ms; the stage in compiled calls: "
            f"{r['compiled_stage']:.2f} ms.",
        ]
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    lines += ["", f"Machine load average (1, 5, 15 min) at the end of the run: {load} (2 cores, shared)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenetv2,resnet18", help="float models of bench/.models")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--accounts", default="activations", help=f"among: {', '.join(ACCOUNTS)}")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    missing = [n for n in args.models.split(",") if n and not (FOLDER / f"{n}.onnx").exists()]
    if missing:
        parser.error(f"--models {', '.join(missing)}: not in bench/.models (bench/real_models.py exports them)")
    accounts = [a for a in args.accounts.split(",") if a]
    if unknown := [a for a in accounts if a not in ACCOUNTS]:
        parser.error(f"--accounts {', '.join(unknown)}: accepted names are {', '.join(ACCOUNTS)}")
    rows = []
    for name in args.models.split(","):
        for account in accounts if name else ():
            rows.append(measure(name, args.repeat, account))
            print({k: v for k, v in rows[-1].items() if k != "kinds"}, flush=True)
    command = "python bench/band_bench.py" + (
        "" if args.models == "mobilenetv2,resnet18" else f" --models {args.models}"
    )
    command += "" if args.repeat == 15 else f" --repeat {args.repeat}"
    command += "" if args.accounts == "activations" else f" --accounts '{args.accounts}'"
    text = section(rows, command)
    from app.services.docsections import replace_section

    replace_section(args.output, "tiled-stage-route", text)
    print(text)


if __name__ == "__main__":
    main()
