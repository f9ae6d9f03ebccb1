"""Benchmark of the executor on the onnx wheel's nine light models, side by side with onnxruntime.

For each model, in one process: memplan's Session runs the model inside the planned arena
(greedy_by_size, workspace on, inputs and outputs in the arena) and onnxruntime runs it
with the same number of threads (numpy's BLAS and onnxruntime's intra-op pool are both
given `--threads`). Each side: one warm-up run, then the median of `--repeat` runs, the two
sides alternating, timed twice: wall time, and the CPU time of the calling thread. With one
thread both sides compute in the calling thread, so the CPU-time ratio is the one to trust
on a shared machine, where the scheduler can stall either side for milliseconds of wall time.
Also recorded: arena, LOAD, and the bytes numpy allocated outside the arena, from a separate
traced run (the warm-up): no timed run is traced.

Run from the repository root: ``python bench/runtime_bench.py [--threads N] [--repeat N] [--models a,b]``.
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
    parser.add_argument("--models", default="", help="comma-separated model names (default: all nine)")
    args = parser.parse_args()
    # BLAS reads its thread count when numpy loads, so set it before importing anything heavy.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import onnx
    import onnxruntime as ort

    import runtime
    from app.services.docsections import replace_section
    from runtime.oracle import random_inputs

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    rows = []
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    for path in sorted(light.glob("*.onnx")):
        if wanted and path.stem.removeprefix("light_") not in wanted:
            continue
        graph = runtime.load_model(path)
        feeds = random_inputs(graph, seed=0)
        session = runtime.Session(graph, "greedy_by_size").prepare()
        session.run(feeds, measure="memory")  # the warm-up, traced for the bytes beside the arena
        outside = session.stats.outside_arena_bytes
        # The timed runs below use the default measure="time": no tracemalloc, which slows numpy down.

        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        peer = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        peer.run(None, feeds)
        ours, theirs = _medians(
            functools.partial(session.run, feeds), functools.partial(peer.run, None, feeds), args.repeat
        )
        name = path.stem.removeprefix("light_")
        rows.append((name, session.plan.arena_bytes, session.plan.lower_bound, outside, ours, theirs))
        print(
            f"{name:14} wall: memplan {ours[0] * 1e3:7.1f} ms  onnxruntime {theirs[0] * 1e3:7.1f} ms  "
            f"x{ours[0] / theirs[0]:.2f}   cpu: memplan {ours[1] * 1e3:7.1f} ms  onnxruntime {theirs[1] * 1e3:7.1f} ms  "
            f"x{ours[1] / theirs[1]:.2f}",
            flush=True,
        )

    lines = [
        "## Executor: light models inside the arena, against onnxruntime",
        "",
        f"`python bench/runtime_bench.py --threads {args.threads} --repeat {args.repeat}`: both sides in one process, "
        f"{args.threads} thread(s) each, median of {args.repeat} runs after a warm-up. Arena: greedy_by_size with "
        "workspace and graph inputs/outputs inside it. Outside: bytes numpy allocated beside the arena during the "
        "warm-up, the one run traced by tracemalloc (its peak); the timed runs are not traced. Wall: elapsed time; CPU: the calling thread's CPU time (`time.thread_time`), which the "
        "other processes of a shared machine do not inflate.",
        "",
        "| model | arena (bytes) | LOAD (bytes) | outside arena (bytes) | outside / arena | memplan ms (wall) | onnxruntime ms (wall) | ratio (wall) | memplan ms (CPU) | onnxruntime ms (CPU) | ratio (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, arena, load, outside, ours, theirs in rows:
        lines.append(
            f"| {name} | {arena:,} | {load:,} | {outside:,} | {outside / arena:.2%} | {ours[0] * 1e3:.1f} | "
            f"{theirs[0] * 1e3:.1f} | {ours[0] / theirs[0]:.2f}x | {ours[1] * 1e3:.1f} | {theirs[1] * 1e3:.1f} | "
            f"{ours[1] / theirs[1]:.2f}x |"
        )
    replace_section(args.output, "runtime-light-models", "\n".join(lines))
    print(f"wrote {args.output}")


def _medians(ours, theirs, repeat: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(median wall time, median calling-thread CPU time) of `repeat` calls of each side (the
    whole call: inputs in, outputs out). The two sides alternate, so that a burst of load on
    the machine slows both rather than one."""
    times: dict[str, tuple[list[float], list[float]]] = {"ours": ([], []), "theirs": ([], [])}
    for _ in range(repeat):
        for side, call in (("ours", ours), ("theirs", theirs)):
            started, started_cpu = time.perf_counter(), time.thread_time()
            call()
            times[side][1].append(time.thread_time() - started_cpu)
            times[side][0].append(time.perf_counter() - started)
    wall_ours, cpu_ours = times["ours"]
    wall_theirs, cpu_theirs = times["theirs"]
    return (
        (statistics.median(wall_ours), statistics.median(cpu_ours)),
        (statistics.median(wall_theirs), statistics.median(cpu_theirs)),
    )


if __name__ == "__main__":
    main()
