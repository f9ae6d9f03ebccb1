"""Below LOAD: each model's arena untiled and with `--tile auto`, its extra MACs and its time.

For every model (`bench/real_models.py`'s CNNs, exported with torch; random weights, batch 1,
224x224) and two accountings of the arena, graph inputs and outputs outside it in both (as
MCUNetV2 counts: the input image is not in its 1,372 kB / 172 kB):

- activations: ``MemoryOptions(io="external", workspace=False)``, kernels' scratch outside too,
  as the peer benchmark's like-for-like column counts (what the tiled run holds beside the arena,
  that scratch included, is measured by a traced run and given in the notes);
- with scratch: ``MemoryOptions(io="external")``, kernels' scratch planned in the arena.

Int8 rows (`--int8`, on by default): MobileNetV2-224 and person_detect as `.tflite` files from
``../shared/models/tflite`` (NHWC, TensorFlow Lite's integer kernels) and MobileNetV2-224 quantized
by onnxruntime's `quantize_static` (QDQ, NCHW; `bench/quant_bench.py` makes it in
``bench/.models/quant``), fed seeded random inputs (`runtime.oracle.random_inputs`). Their outputs
are checked bit for bit against memplan's untiled run, and against the oracle `runtime.oracle.verify`
picks by format: TensorFlow Lite Micro (bit-exact) for `.tflite`, onnxruntime (within one step) for QDQ.

Columns: untiled arena and LOAD (`planner.plan(problem, "best")`), the tiled arena (`tile_auto`
at its default 20% MAC budget and `--slack`, then the smaller of "best" and "eject" on the tiled
graph's problem), the ratio, the smallest arena the search placed within that budget (its curve's
lowest point, by the search's greedy strategies and eject repair: what a zero `slack` would have
taken), the stage
(head length, method, bands), extra MACs as a fraction of the model's, the median time of
`--repeat` runs of each in a `runtime.Session` (same process, taking turns run by run) and their
ratio, and whether the tiled run's outputs match onnxruntime's (`runtime.oracle.verify`).

Run from the repository root: ``python bench/tile_bench.py [--models a,b] [--repeat 5] [--slack 0.1]``.
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
from runtime.oracle import random_inputs, verify  # noqa: E402
from runtime.tiling import tile_auto  # noqa: E402
from runtime.tiling.search import DEFAULT_SLACK  # noqa: E402

FOLDER = ROOT / "bench" / ".models"
SHARED = ROOT.parent / "shared" / "models" / "tflite"
MODELS = ("mobilenetv2", "mobilenetv3_small", "efficientnet_b0", "resnet18")
INT8 = {  # name in the table -> where the model is
    "mobilenetv2 int8 (.tflite)": SHARED / "mobilenet_v2_quantized_1x3x224x224.tflite",
    "person_detect int8 (.tflite)": SHARED / "person_detect.tflite",
    "mobilenetv2 int8 (QDQ ONNX)": FOLDER / "quant" / "mobilenetv2_qdq.onnx",
}
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
    """The session's median seconds over `repeat` timed runs, and its outputs."""
    return turns([session], feeds, repeat)[0]


def turns(sessions: list[Session], feeds: dict[str, np.ndarray], repeat: int) -> list[tuple[float, dict]]:
    """Each session's median seconds over `repeat` timed runs and its outputs. The sessions take
    turns, one run each, so that a burst of load on the shared machine falls on all of them rather
    than on whichever ran then (untiled five times, then tiled five times, swung the ratio by 2x)."""
    outputs = [s.run(feeds) for s in sessions]
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(repeat):
        for k, s in enumerate(sessions):
            started = time.perf_counter()
            outputs[k] = s.run(feeds)
            times[k].append(time.perf_counter() - started)
    return [(float(np.median(t)), out) for t, out in zip(times, outputs, strict=True)]


def float_model(name: str) -> tuple[Path, dict[str, np.ndarray]]:
    with np.load(FOLDER / f"{name}.npz") as archive:
        return FOLDER / f"{name}.onnx", {k: archive[k] for k in archive.files}


def int8_model(name: str) -> tuple[Path, dict[str, np.ndarray]] | None:
    path = INT8[name]
    if not path.exists() and path.name == "mobilenetv2_qdq.onnx" and (FOLDER / "mobilenetv2.onnx").exists():
        from bench.quant_bench import quantized

        quantized("mobilenetv2", FOLDER / "mobilenetv2.onnx")
    if not path.exists():
        print(f"skipped {name}: {path.name} not found", flush=True)
        return None
    return path, random_inputs(load_model(path), seed=0)


def measure(
    name: str,
    path: Path,
    feeds: dict[str, np.ndarray],
    account: str,
    options: MemoryOptions,
    repeat: int,
    limit: float,
    slack: float = DEFAULT_SLACK,
) -> dict[str, Any]:
    graph = load_model(path)
    problem = memory_problem(graph, options)
    untiled = planner.plan(problem, "best", time_limit=limit)
    started = time.perf_counter()
    tiling = tile_auto(graph, options, slack=slack)
    search = time.perf_counter() - started
    row: dict[str, Any] = {
        "model": name,
        "account": account,
        "untiled": untiled.arena_bytes,
        "load": untiled.lower_bound,
        "search": search,
        "note": tiling.note,
    }
    plain_session = Session(graph, untiled, options).prepare()
    if tiling.chosen is None:
        base, _ = median_seconds(plain_session, feeds, repeat)
        return row | {"tiled": untiled.arena_bytes, "extra": 0.0, "stage": "untiled", "time": (base, base)}
    tiled_problem = memory_problem(tiling.graph, options)
    # `best` runs the fast strategies; eject (slow-registered, the repair tile_auto places with) beside it,
    # bounded by its work, not by `limit`, so that the row does not depend on the machine's load
    found = (planner.plan(tiled_problem, "best", time_limit=limit), planner.plan(tiled_problem, "eject"))
    tiled = min(found, key=lambda p: p.arena_bytes)
    session = Session(tiling.graph, tiled, options).prepare()
    (base, plain), (seconds, outputs) = turns([plain_session, session], feeds, repeat)
    verdict = verify(path, feeds, outputs, capture=lambda names: session.capture(feeds, names))
    session.run(feeds, measure="memory")  # what the tiled run holds beside the arena, shared scratch included
    integer = name in INT8  # integer arithmetic throughout: the tiled run must equal the untiled one bit for bit
    c = tiling.chosen
    within = [p["arena_bytes"] for p in tiling.curve if p["extra_macs"] <= 0.2 and p["arena_bytes"]]
    return row | {
        "smallest": min(within),
        "tiled": tiled.arena_bytes,
        "tiled_load": tiled.lower_bound,
        "extra": c.extra_macs,
        "stage": f"{len(c.chain.nodes)} nodes, {c.method}, {c.tiles} bands",
        "time": (base, seconds),
        "verified": bool(verdict["passed"]),
        "oracle": verdict.get("oracle"),
        "same_as_untiled": all(np.array_equal(outputs[k], plain[k]) for k in plain) if integer else None,
        "beside": session.stats.outside_arena_bytes,
    }


def section(rows: list[dict[str, Any]], command: str, slack: float = DEFAULT_SLACK) -> str:
    lines = [
        "## Tiling: arenas below LOAD",
        "",
        f"`{command}`. Graph inputs and outputs outside the arena in every row; 'activations' leaves kernels' "
        "scratch outside too (the peer benchmark's like-for-like accounting; the notes give the bytes a traced "
        "tiled run holds beside the arena, that scratch included), 'with scratch' plans it in the arena. Arenas: "
        "`best` on each problem; tiled: `--tile auto` (default budget of 20% extra MACs), then "
        "the smaller of `best` and `eject` on its problem; smallest searched: the lowest arena on its curve within "
        "that budget (the search's greedy strategies and its eject repair), which it trades for fewer bands within "
        f"a slack of {slack:.0%} (`DEFAULT_SLACK` unless `--slack`). "
        "Times: median of timed runs in one process, untiled and tiled taking turns, one BLAS thread. Outputs: float models "
        "against onnxruntime; int8 ones bit for bit against memplan's untiled run and against their oracle "
        "(TensorFlow Lite Micro, bit-exact, for `.tflite`; onnxruntime, within one step, for QDQ). " + PUBLISHED,
        "",
        "| model | arena | untiled arena (LOAD) | tiled arena | untiled / tiled | smallest searched (ratio) "
        "| stage | extra MACs | ms untiled / tiled | time ratio | outputs match (oracle) | int8: = untiled | search s |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        base, tiled = r["time"]
        match = {True: "yes", False: "**no**", None: "-"}[r.get("verified")]
        match += f" ({r['oracle']})" if r.get("oracle") else ""
        same = {True: "bit-exact", False: "**differs**", None: "-"}[r.get("same_as_untiled")]
        smallest = f"{r['smallest']:,} ({r['untiled'] / r['smallest']:.2f}x)" if r.get("smallest") else "-"
        lines.append(
            f"| {r['model']} | {r['account']} | {r['untiled']:,} ({r['load']:,}) | {r['tiled']:,} | "
            f"{r['untiled'] / r['tiled']:.2f}x | {smallest} | {r['stage']} | {r['extra']:.1%} | {base * 1e3:.1f} / "
            f"{tiled * 1e3:.1f} | {tiled / base:.2f}x | {match} | {same} | {r['search']:.1f} |"
        )
    beside = "; a traced tiled run holds {:,} bytes beside the arena (kernels' scratch and temporaries)"
    lines += ["", "Notes:", ""] + [
        f"- {r['model']} ({r['account']}): {r['note']}" + (beside.format(r["beside"]) if r.get("beside") else "")
        for r in rows
    ]
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    lines += ["", f"Machine load average (1, 5, 15 min) at the end of the run: {load} (2 cores, shared)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="float models of bench/.models ('' for none)")
    parser.add_argument("--int8", default=",".join(INT8), help=f"int8 models among: {', '.join(INT8)} ('' for none)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds for each plan by best")
    parser.add_argument("--slack", type=float, default=DEFAULT_SLACK, help="tile_auto's slack (fewer bands)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    unknown = [n for n in args.int8.split(",") if n and n not in INT8]
    if unknown:
        parser.error(f"--int8 {', '.join(unknown)}: accepted names are {', '.join(INT8)}")
    models = [(name, *float_model(name)) for name in args.models.split(",") if name]
    models += [(name, *found) for name in args.int8.split(",") if name and (found := int8_model(name))]
    rows = []
    for name, path, feeds in models:
        for account, options in ACCOUNTS.items():
            rows.append(measure(name, path, feeds, account, options, args.repeat, args.time_limit, args.slack))
            print(rows[-1], flush=True)
    command = "python bench/tile_bench.py" + ("" if args.models == ",".join(MODELS) else f" --models '{args.models}'")
    command += "" if args.int8 == ",".join(INT8) else f" --int8 '{args.int8}'"
    command += "" if args.repeat == 5 else f" --repeat {args.repeat}"
    command += "" if args.time_limit == 10.0 else f" --time-limit {args.time_limit:g}"
    command += "" if args.slack == DEFAULT_SLACK else f" --slack {args.slack:g}"
    text = section(rows, command, args.slack)
    from app.services.docsections import replace_section

    replace_section(args.output, "tiling", text)
    print(text)


if __name__ == "__main__":
    main()
