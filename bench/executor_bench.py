"""Benchmark of the executor on real models, side by side with onnxruntime at one thread each.

Models: the set of `bench/real_models.py` (MobileNetV2, MobileNetV3-Small, EfficientNet-B0,
ResNet-18, a small ViT, a MiniLM-sized BERT, a GPT-2-style decoder, a CRNN text recognizer, a GRU
audio model; random weights, exported by torch into ``bench/.models``, which this command
refreshes first when torch is installed: ``pip install -e '.[bench]'``), the small audio models of
`bench/audio_models.py` (two voice-activity detectors, a keyword-spotting CNN, and a chain of
one-element Adds whose time per step is the executor's overhead per step; written with onnx.helper,
no torch), and the onnx wheel's ``light_resnet50.onnx`` for comparison with the light-model benchmark.

For each model, in this one process: memplan's Session (greedy_by_size, its default memory
options: workspace, inputs and outputs in the arena) and an onnxruntime CPU session (all graph
optimisations, intra- and inter-op threads 1; numpy's BLAS is held to one thread by the
environment, set before numpy loads). Each side gets one warm-up, then `--repeat` calls each,
the two sides alternating so that a burst of load on the shared machine slows both; the figure
is the median call (inputs in, outputs out), as the CPU time of the calling thread (which other
processes do not inflate) and as wall time. No timed memplan run is traced (``measure="time"``).
Separately, one traced run (``measure="memory"``) gives the bytes numpy allocated beside the
arena, and its outputs are judged against onnxruntime's by `runtime.oracle.verify`. Where
memplan's time goes: each timed run's per-step seconds (`RunStats.trace`) summed by op type, the
share of that run's loop, the median over the runs. A model memplan cannot load, plan or run keeps
its row, with the error.

Run from the repository root: ``python bench/executor_bench.py [--repeat N] [--models a,b]``.
Writes section "executor-real-models" of docs/BENCHMARKS.md and prints the table; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))  # its sibling scripts (not a package)

FOLDER = ROOT / "bench" / ".models"
ZOO = "resnet50_zoo"  # the onnx wheel's light_resnet50.onnx
TOP_OPS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--models", default="", help=f"comma-separated names (default: the whole set and {ZOO})")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    # BLAS reads its thread count when numpy loads, so this comes before any heavy import.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    wanted = [m.strip() for m in args.models.split(",") if m.strip()]

    rows = []
    for name, path, feeds in models(wanted):
        row = bench_model(name, path, feeds, args.repeat)
        rows.append(row)
        print(summary(row), flush=True)
    command = "python bench/executor_bench.py" + (f" --repeat {args.repeat}" if args.repeat != 10 else "")
    command += f" --models {','.join(wanted)}" if wanted else ""
    from app.services.docsections import replace_section

    text = section(rows, command, args.repeat)
    replace_section(args.output, "executor-real-models", text)
    print(text.splitlines()[-1])
    print(f"wrote {args.output}")


def models(wanted: list[str]) -> list[tuple[str, Path, Path | None]]:
    """(name, model, inputs .npz or None) for each model to measure: the torch set, exported first
    in a child process (torch never loads here), then the zoo's ResNet-50."""
    import audio_models

    audio = [m for m in wanted if m in audio_models.MODELS]
    if audio or not wanted:
        audio_models.write(FOLDER, audio or None)
    real = [m for m in wanted if m != ZOO and m not in audio_models.MODELS]
    if real or not wanted:
        command = [sys.executable, str(ROOT / "bench" / "real_models.py"), str(FOLDER)]
        done = subprocess.run(command + (["--models", ",".join(real)] if real else []), check=False)
        if done.returncode != 0:
            print("bench/real_models.py failed (is torch installed?); measuring the models already exported")
    found = []
    for path in sorted(FOLDER.glob("*.onnx")):
        if not wanted or path.stem in wanted:
            found.append((path.stem, path, path.with_suffix(".npz")))
    if not wanted or ZOO in wanted:
        import onnx

        found.append((ZOO, Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx", None))
    missing = sorted(set(wanted) - {name for name, _, _ in found})
    if missing:
        print(f"not found, skipped: {', '.join(missing)}")
    return found


def bench_model(name: str, path: Path, inputs: Path | None, repeat: int) -> dict[str, Any]:
    """One row: arena, bytes beside it, the verdict, both sides' median times and memplan's by op type;
    or the stage that failed and its error."""
    import numpy as np
    import onnxruntime as ort

    import runtime
    from runtime.oracle import random_inputs, verify

    row: dict[str, Any] = {"model": name}
    stage = "load"
    try:
        graph = runtime.load_model(path)
        feeds = dict(np.load(inputs)) if inputs is not None else random_inputs(graph, seed=0)
        stage = "prepare"
        session = runtime.Session(graph, "greedy_by_size").prepare()
        stage = "run"
        outputs = session.run(feeds, measure="memory")  # the one traced run: bytes beside the arena
        row.update(arena=session.stats.arena_bytes, outside=session.stats.outside_arena_bytes)
        row["steps"] = len(session.stats.step_times)
        stage = "verify"
        row["verdict"] = verify(
            path, feeds, outputs, prefer="onnxruntime", capture=lambda names: session.capture(feeds, names)
        )
        stage = "onnxruntime"
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3
        peer = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        peer.run(None, feeds)  # its warm-up
        stage = "run"
        session.run(feeds)  # memplan's warm-up, untraced like every timed run
        row.update(timed(session, peer, feeds, repeat))
    except Exception as e:
        row["error"] = f"{stage}: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return row


def timed(session: Any, peer: Any, feeds: dict, repeat: int) -> dict[str, Any]:
    """Medians of `repeat` alternating calls of each side, their spreads, and memplan's loop by op type."""
    cpu: dict[str, list[float]] = {"ours": [], "theirs": []}
    wall: dict[str, list[float]] = {"ours": [], "theirs": []}
    shares: dict[str, list[float]] = defaultdict(list)  # op type -> its share of each run's loop
    calls = {"ours": lambda: session.run(feeds, measure="time"), "theirs": lambda: peer.run(None, feeds)}
    for _ in range(repeat):
        for side, call in calls.items():
            started, started_cpu = time.perf_counter(), time.thread_time()
            call()
            cpu[side].append(time.thread_time() - started_cpu)
            wall[side].append(time.perf_counter() - started)
        sums: dict[str, float] = defaultdict(float)
        for record in session.stats.trace:
            sums[record.op_type] += record.seconds
        for op, seconds in sums.items():
            shares[op].append(seconds / session.stats.seconds)
    ops = sorted(((statistics.median(s), op) for op, s in shares.items()), key=lambda t: (-t[0], t[1]))
    return {
        "ours": statistics.median(cpu["ours"]),
        "theirs": statistics.median(cpu["theirs"]),
        "ours_wall": statistics.median(wall["ours"]),
        "theirs_wall": statistics.median(wall["theirs"]),
        "ratio": statistics.median(cpu["ours"]) / statistics.median(cpu["theirs"]),
        "ratio_wall": statistics.median(wall["ours"]) / statistics.median(wall["theirs"]),
        "spread": (spread(cpu["ours"]), spread(cpu["theirs"])),
        "ops": [(op, share) for share, op in ops[:TOP_OPS]],
    }


def spread(values: list[float]) -> float:
    """(slowest - fastest) / median of one side's runs."""
    return (max(values) - min(values)) / statistics.median(values)


def per_step(row: dict[str, Any]) -> float:
    """memplan's CPU microseconds per step of the model (arithmetic and overhead)."""
    return row["ours"] * 1e6 / max(1, row["steps"])


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def match(verdict: dict[str, Any] | None) -> str:
    if verdict is None:
        return ""
    if verdict["passed"] is None:
        return f"no oracle: {verdict.get('detail', '')[:120]}"
    if verdict["passed"]:
        worst = max((o["max_abs_diff"] for o in verdict["outputs"]), default=0.0)
        return f"yes (max abs diff {worst:.1e})"
    bad = [o for o in verdict["outputs"] if not o["close"]]
    return "**no**: " + "; ".join(
        f"{o['name']} {o['mismatched']:,} elements off, max abs diff {o['max_abs_diff']:.2g}" for o in bad
    )


def top_ops(row: dict[str, Any]) -> str:
    return ", ".join(f"{op} {share:.0%}" for op, share in row["ops"])


def summary(row: dict[str, Any]) -> str:
    if "ratio" not in row:
        return f"{row['model']:18} FAILS {row.get('error', '')}"
    return (
        f"{row['model']:18} cpu: memplan {row['ours'] * 1e3:8.1f} ms  onnxruntime {row['theirs'] * 1e3:8.1f} ms  "
        f"x{row['ratio']:.2f} (wall x{row['ratio_wall']:.2f})  {per_step(row):.1f} us/step  outside/arena {row['outside'] / row['arena']:.2%}  "
        f"{match(row['verdict'])}  | {top_ops(row)}"
    )


def machine() -> str:
    import numpy as np
    import onnxruntime as ort

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:
        blas = "unknown BLAS"
    from planner import jit as compiled_loops

    jit = f"on (numba {compiled_loops.numba.__version__})" if compiled_loops.ENABLED else "off (numpy routes only)"
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs (shared), {platform.system()} {platform.machine()}; Python "
        f"{platform.python_version()}, numpy {np.__version__} ({blas}), onnxruntime {ort.__version__}; "
        f"compiled loops {jit}"
    )


def section(rows: list[dict[str, Any]], command: str, repeat: int) -> str:
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    walls = [r["ratio_wall"] for r in rows if "ratio" in r]
    lines = [
        "## Executor: real models inside the arena, against onnxruntime",
        "",
        f"`{command}` on {machine()}. Models: `bench/real_models.py` (torch definitions, random weights, "
        f"opset 17, batch 1), `bench/audio_models.py` (onnx.helper, random weights) and the onnx wheel's ResNet-50 (`{ZOO}`). Both sides in one process at one thread "
        f"each; each figure is the median of {repeat} calls (inputs in, outputs out) after a warm-up, the sides "
        "alternating. ms: CPU time of the calling thread; ratio: memplan / onnxruntime (also by wall time); spread: "
        "(slowest - fastest) / median of each side's runs. Arena: greedy_by_size with workspace and graph "
        "inputs/outputs inside it; outside: bytes numpy allocated beside the arena during one traced run "
        "(tracemalloc peak; no timed run is traced). Match: outputs of that run against onnxruntime's "
        "(`runtime.oracle.verify`). us/step: memplan's CPU time over its steps (after fusions); on `step_chain`, whose steps do no arithmetic, it is the executor's overhead per step. Time by op type: memplan's per-step times summed by op type (after "
        "memplan's load-time fusions), as a share of its loop: the median over the timed runs. Compiled loops "
        "(`MEMPLAN_JIT`) are compiled, or loaded from numba's cache, when the session prepares: before the "
        "traced run and every timed one.",
        "",
        "| model | arena (bytes) | outside arena (bytes) | outside / arena | memplan ms | onnxruntime ms | ratio "
        "| ratio (wall) | spread memplan / ort | steps | memplan us/step | outputs match onnxruntime "
        "| memplan time by op type (top 5) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for r in rows:
        if "ratio" not in r:
            cells = [f"{r['arena']:,}" if "arena" in r else "", "", "", "", "", "", "", "", "", ""]
            lines.append(f"| {r['model']} | " + " | ".join(cells) + f" | **fails** at {r['error']} | |")
            continue
        lines.append(
            f"| {r['model']} | {r['arena']:,} | {r['outside']:,} | {r['outside'] / r['arena']:.2%} | "
            f"{r['ours'] * 1e3:.1f} | {r['theirs'] * 1e3:.1f} | {r['ratio']:.2f}x | {r['ratio_wall']:.2f}x | "
            f"{r['spread'][0]:.0%} / {r['spread'][1]:.0%} | {r['steps']} | {per_step(r):.1f} | {match(r['verdict'])} "
            f"| {top_ops(r)} |"
        )
    failed = len(rows) - len(ratios)
    means = f"{geomean(ratios):.2f}x by CPU time, {geomean(walls):.2f}x by wall time" if ratios else "none"
    lines += [
        "",
        f"Geometric mean of the ratios over the {len(ratios)} models that ran: {means}"
        + (f"; {failed} model(s) failed." if failed else "."),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
