"""Below LOAD: each model's arena untiled and with `--tile auto`, its extra MACs and its time.

For every model (`bench/real_models.py`'s CNNs, exported with torch; random weights, batch 1,
224x224) and two accountings of the arena, graph inputs and outputs outside it in both (as
MCUNetV2 counts: the input image is not in its 1,372 kB / 172 kB):

- activations: ``MemoryOptions(io="external", workspace=False)``, kernels' scratch outside too,
  as the peer benchmark's like-for-like column counts;
- with scratch: ``MemoryOptions(io="external")``, kernels' scratch planned in the arena.

Columns: untiled arena and LOAD (`planner.plan(problem, "best")`), the tiled arena (`tile_auto`
at its default 20% MAC budget, then "best" on the tiled graph's problem), the ratio, the stage
(head length, method, bands), extra MACs as a fraction of the model's, the median time of
`--repeat` runs of each in a `runtime.Session` (same process, one after the other) and their
ratio, and whether the tiled run's outputs match onnxruntime's (`runtime.oracle.verify`).

Run from the repository root: ``python bench/tile_bench.py [--models a,b] [--repeat 5]``.
Writes section "tiling" of docs/BENCHMARKS.md and prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

# One BLAS thread, as the other time benches run, unless the caller sets it: BLAS reads it when
# numpy loads. With two threads on a shared 2-core machine a tiled stage's many small sgemms
# wait on each other (ResNet-18 tiled: 1.4 s against 0.14 s with one).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner  # noqa: E402
from runtime import MemoryOptions, Session, load_model, memory_problem  # noqa: E402
from runtime.oracle import verify  # noqa: E402
from runtime.tiling import tile_auto  # noqa: E402

FOLDER = ROOT / "bench" / ".models"
MODELS = ("mobilenetv2", "mobilenetv3_small", "efficientnet_b0", "resnet18")
ACCOUNTS = {
    "activations": MemoryOptions(io="external", workspace=False),
    "with scratch": MemoryOptions(io="external"),
}
PUBLISHED = (
    "MCUNetV2 (Lin et al., NeurIPS 2021) reports MobileNetV2's int8 peak of 1,372 kB falling to 172 kB (8.0x) "
    "with patch-based inference of its first stages, the input image left out; int8 bytes are a quarter of "
    "these float32 ones."
)


def median_seconds(session: Session, feeds: dict[str, np.ndarray], repeat: int) -> tuple[float, dict]:
    outputs = session.run(feeds)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        outputs = session.run(feeds)
        times.append(time.perf_counter() - started)
    return float(np.median(times)), outputs


def measure(name: str, account: str, options: MemoryOptions, repeat: int, limit: float) -> dict[str, Any]:
    path = FOLDER / f"{name}.onnx"
    graph = load_model(path)
    with np.load(FOLDER / f"{name}.npz") as archive:
        feeds = {k: archive[k] for k in archive.files}
    problem = memory_problem(graph, options)
    untiled = planner.plan(problem, "best", time_limit=limit)
    started = time.perf_counter()
    tiling = tile_auto(graph, options)
    search = time.perf_counter() - started
    row: dict[str, Any] = {
        "model": name,
        "account": account,
        "untiled": untiled.arena_bytes,
        "load": untiled.lower_bound,
        "search": search,
        "note": tiling.note,
    }
    base, _ = median_seconds(Session(graph, untiled, options).prepare(), feeds, repeat)
    if tiling.chosen is None:
        return row | {"tiled": untiled.arena_bytes, "extra": 0.0, "stage": "untiled", "time": (base, base)}
    tiled_problem = memory_problem(tiling.graph, options)
    tiled = planner.plan(tiled_problem, "best", time_limit=limit)
    session = Session(tiling.graph, tiled, options).prepare()
    seconds, outputs = median_seconds(session, feeds, repeat)
    verdict = verify(path, feeds, outputs, capture=lambda names: session.capture(feeds, names))
    c = tiling.chosen
    return row | {
        "tiled": tiled.arena_bytes,
        "tiled_load": tiled.lower_bound,
        "extra": c.extra_macs,
        "stage": f"{len(c.chain.nodes)} nodes, {c.method}, {c.tiles} bands",
        "time": (base, seconds),
        "verified": bool(verdict["passed"]),
    }


def section(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "## Tiling: arenas below LOAD",
        "",
        f"`{command}`. Graph inputs and outputs outside the arena in every row; 'activations' leaves kernels' "
        "scratch outside too (the peer benchmark's like-for-like accounting), 'with scratch' plans it in the "
        "arena. Arenas: `best` on each problem; tiled: `--tile auto` (default budget of 20% extra MACs). "
        "Times: median of timed runs in one process, untiled then tiled, one BLAS thread. " + PUBLISHED,
        "",
        "| model | arena | untiled arena (LOAD) | tiled arena | untiled / tiled | stage | extra MACs "
        "| ms untiled / tiled | time ratio | outputs match onnxruntime | search s |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        base, tiled = r["time"]
        match = {True: "yes", False: "**no**", None: "-"}[r.get("verified")]
        lines.append(
            f"| {r['model']} | {r['account']} | {r['untiled']:,} ({r['load']:,}) | {r['tiled']:,} | "
            f"{r['untiled'] / r['tiled']:.2f}x | {r['stage']} | {r['extra']:.1%} | {base * 1e3:.1f} / "
            f"{tiled * 1e3:.1f} | {tiled / base:.2f}x | {match} | {r['search']:.1f} |"
        )
    lines += ["", "Notes:", ""] + [f"- {r['model']} ({r['account']}): {r['note']}" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds for each plan by best")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        for account, options in ACCOUNTS.items():
            rows.append(measure(name, account, options, args.repeat, args.time_limit))
            print(rows[-1], flush=True)
    command = "python bench/tile_bench.py" + ("" if args.models == ",".join(MODELS) else f" --models {args.models}")
    command += "" if args.repeat == 5 else f" --repeat {args.repeat}"
    command += "" if args.time_limit == 10.0 else f" --time-limit {args.time_limit:g}"
    text = section(rows, command)
    from app.services.docsections import replace_section

    replace_section(args.output, "tiling", text)
    print(text)


if __name__ == "__main__":
    main()
