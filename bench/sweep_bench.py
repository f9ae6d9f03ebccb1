"""Sweep throughput: the same 1,000+ plan tasks run by a plain loop in one process, and by a local Dask
cluster of 1 and of 2 worker processes (`app.services.sweeps.plan_task`, as `memplan sweep` runs them).

The tasks: the onnx wheel's light zoo models x every fast strategy x memory options (in place,
concat in place and workspace on or off), so that each task loads and plans a real network.
Cluster start-up (LocalCluster of worker processes on loopback) is timed apart from the tasks.

    python bench/sweep_bench.py --docs docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from app.services.docsections import replace_section  # noqa: E402
from app.services.sweeps import SweepTask, plan_task  # noqa: E402
from planner import get, names  # noqa: E402
from runtime import MemoryOptions  # noqa: E402

SECTION = "sweep-throughput"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def tasks(minimum: int) -> list[SweepTask]:
    models = sorted(LIGHT.glob("light_*.onnx"))
    fast = [n for n in names() if not get(n).slow and n != "best"]
    memories = [
        MemoryOptions(inplace=a, concat_inplace=b, workspace=c)
        for a, b, c in itertools.product([True, False], repeat=3)
    ]
    out = [
        SweepTask(model.stem.removeprefix("light_"), str(model), strategy, (), memory)
        for memory in memories
        for model in models
        for strategy in fast
    ]
    while len(out) < minimum:  # more alignments, if the zoo is small
        out += [
            SweepTask(t.model, t.path, t.strategy, (), t.memory.replace(alignment=128))
            for t in out[: minimum - len(out)]
        ]
    return out


def plain_loop(work: list[SweepTask]) -> float:
    started = time.perf_counter()
    for task in work:
        plan_task(task)
    return time.perf_counter() - started


def on_cluster(work: list[SweepTask], workers: int) -> tuple[float, float]:
    from distributed import Client, LocalCluster, wait

    started = time.perf_counter()
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = Client(cluster)
    startup = time.perf_counter() - started
    try:
        started = time.perf_counter()
        futures = client.map(plan_task, work, pure=False)
        wait(futures)
        elapsed = time.perf_counter() - started
        assert all(f.status == "finished" for f in futures)
    finally:
        client.close()
        cluster.close()
    return startup, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000, help="at least this many plan tasks")
    parser.add_argument("--docs", type=Path, default=None)
    args = parser.parse_args(argv)
    work = tasks(args.tasks)
    loop = plain_loop(work)
    one_start, one = on_cluster(work, 1)
    two_start, two = on_cluster(work, 2)
    rate = lambda seconds: len(work) / seconds  # noqa: E731
    text = "\n".join(
        [
            f"Sweep throughput (`python bench/sweep_bench.py --tasks {args.tasks}`): {len(work):,} plan tasks "
            f"(the zoo's light models x every fast strategy x in place, concat in place and workspace on/off), "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one run:",
            "",
            "| runner | start-up s | tasks s | tasks per s | vs the loop |",
            "|---|---|---|---|---|",
            f"| plain loop, one process | - | {loop:.1f} | {rate(loop):.1f} | 1.00x |",
            f"| Dask, 1 worker process | {one_start:.1f} | {one:.1f} | {rate(one):.1f} | {loop / one:.2f}x |",
            f"| Dask, 2 worker processes | {two_start:.1f} | {two:.1f} | {rate(two):.1f} | {loop / two:.2f}x |",
            "",
            f"2 workers over 1: {one / two:.2f}x.",
        ]
    )
    print(text)
    if args.docs is not None:
        replace_section(args.docs, SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
