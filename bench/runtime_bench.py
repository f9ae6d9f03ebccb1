"""Benchmark of the executor on the onnx wheel's nine light models, side by side with onnxruntime.

For each model, in one process: memplan's Session runs the model inside the planned arena
(greedy_by_size, workspace on, inputs and outputs in the arena) and onnxruntime runs it
with the same number of threads (numpy's BLAS and onnxruntime's intra-op pool are both
given `--threads`). Each side: one warm-up run, then the median of `--repeat` runs.
Also recorded: arena, LOAD, and the bytes numpy allocated outside the arena during a run.

Run from the repository root: ``python bench/runtime_bench.py [--threads N] [--repeat N]``.
Writes its section of docs/BENCHMARKS.md and prints the table; it asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # One thread each by default: on a shared machine a second BLAS thread waits on the
    # scheduler and makes timings swing; pass --threads to compare multi-threaded.
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    # BLAS reads its thread count when numpy loads, so set it before importing anything heavy.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import onnx
    import onnxruntime as ort

    import runtime
    from app.docsections import replace_section
    from runtime.oracle import random_inputs

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    rows = []
    for path in sorted(light.glob("*.onnx")):
        graph = runtime.load_model(path)
        feeds = random_inputs(graph, seed=0)
        session = runtime.Session(graph, "greedy_by_size").prepare()
        session.run(feeds)
        outside = session.stats.outside_arena_bytes
        session.measure_memory = False  # tracemalloc slows numpy down: off while timing
        ours = _median(functools.partial(session.run, feeds), args.repeat)

        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        peer = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        peer.run(None, feeds)
        theirs = _median(functools.partial(peer.run, None, feeds), args.repeat)
        name = path.stem.removeprefix("light_")
        rows.append((name, session.plan.arena_bytes, session.plan.lower_bound, outside, ours, theirs))
        print(
            f"{name:14} memplan {ours * 1e3:8.1f} ms  onnxruntime {theirs * 1e3:8.1f} ms  x{ours / theirs:.2f}",
            flush=True,
        )

    lines = [
        "## Executor: light models inside the arena, against onnxruntime",
        "",
        f"`python bench/runtime_bench.py --threads {args.threads} --repeat {args.repeat}`: both sides in one process, "
        f"{args.threads} thread(s) each, median of {args.repeat} runs after a warm-up. Arena: greedy_by_size with "
        "workspace and graph inputs/outputs inside it. Outside: bytes numpy allocated beside the arena during one run "
        "(tracemalloc peak).",
        "",
        "| model | arena (bytes) | LOAD (bytes) | outside arena (bytes) | outside / arena | memplan ms | onnxruntime ms | memplan / onnxruntime |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, arena, load, outside, ours, theirs in rows:
        lines.append(
            f"| {name} | {arena:,} | {load:,} | {outside:,} | {outside / arena:.2%} | {ours * 1e3:.1f} | {theirs * 1e3:.1f} | {ours / theirs:.2f}x |"
        )
    replace_section(args.output, "runtime-light-models", "\n".join(lines))
    print(f"wrote {args.output}")


def _median(call, repeat: int) -> float:
    """Median wall time of `repeat` calls (the whole call: inputs in, outputs out)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


if __name__ == "__main__":
    main()
