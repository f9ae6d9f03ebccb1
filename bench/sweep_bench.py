"""Sweep throughput: the same 1,000+ plan tasks run by a plain loop in one process, and by a local Dask
cluster of 1 and of 2 worker processes, as `memplan sweep` and a sweep job run them: the tasks of one
(model, memory options) combination as one Dask task (`app.services.sweeps.groups_of`, `plan_group`),
so that a worker loads each model once for all its strategies.

The tasks: the onnx wheel's light zoo models x every fast strategy x memory options (in place,
concat in place and workspace on or off), so that each group loads and plans a real network.
Cluster start-up (LocalCluster of worker processes on loopback) is timed apart from the tasks. Every
runner's rows are checked equal to the loop's (see `same_rows`).

    python bench/sweep_bench.py --docs docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import inspect
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
from app.services.sweeps import SweepTask, groups_of, plan_group  # noqa: E402
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


def plain_loop(work: list[SweepTask]) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    rows = [row for group in groups_of(work) for row in plan_group(group)]
    return time.perf_counter() - started, rows


def on_cluster(work: list[SweepTask], workers: int) -> tuple[float, float, int, list[dict]]:
    """(start-up s, tasks s, Dask tasks, rows) on a fresh local cluster of `workers` worker processes."""
    from distributed import Client, LocalCluster

    started = time.perf_counter()
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = Client(cluster)
    startup = time.perf_counter() - started
    try:
        started = time.perf_counter()
        groups = groups_of(work, workers=workers)
        rows = [row for part in client.gather(client.map(plan_group, groups, pure=False)) for row in part]
        elapsed = time.perf_counter() - started
    finally:
        client.close()
        cluster.close()
    return startup, elapsed, len(groups), rows


def same_rows(a: list[dict], b: list[dict]) -> bool:
    """The same rows but for the seconds, and for the arena of a time-bounded search (hill_climb: where it
    stops depends on the machine's speed at the time; its plan is still checked valid)."""
    bounded = {n for n in names() if "time_limit" in inspect.signature(get(n).fn).parameters}

    def key(row: dict) -> tuple:
        skip = {"seconds", "arena_bytes"} if row["strategy"] in bounded else {"seconds"}
        return tuple((k, repr(v)) for k, v in sorted(row.items()) if k not in skip)

    return sorted(map(key, a)) == sorted(map(key, b))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000, help="at least this many plan tasks")
    parser.add_argument(
        "--repeat", type=int, default=2, help="cluster runs of each size, alternating; the fastest counts"
    )
    parser.add_argument("--docs", type=Path, default=None)
    args = parser.parse_args(argv)
    work = tasks(args.tasks)
    loop, rows = plain_loop(work)
    runs: dict[int, list[tuple[float, float, int, list[dict]]]] = {1: [], 2: []}
    for _ in range(args.repeat):  # alternating, so that a busy spell on the machine hits both sizes
        for workers in runs:
            runs[workers].append(on_cluster(work, workers))
            if not same_rows(rows, runs[workers][-1][3]):
                raise SystemExit(f"the rows on {workers} worker(s) differ from the loop's: a bug, no figures recorded")
    (one_start, one, one_tasks, _), (two_start, two, two_tasks, _) = (min(runs[w], key=lambda r: r[1]) for w in (1, 2))
    rate = lambda seconds: len(work) / seconds  # noqa: E731
    text = "\n".join(
        [
            f"Sweep throughput (`python bench/sweep_bench.py --tasks {args.tasks}`): {len(work):,} plan tasks "
            f"(the zoo's light models x every fast strategy x in place, concat in place and workspace on/off), "
            f"grouped per (model, memory options) into {one_tasks} Dask tasks on 1 worker and {two_tasks} on 2, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; the loop once, each cluster size "
            f"{args.repeat} time(s), alternating, the fastest shown:",
            "",
            "| runner | start-up s | tasks s | tasks per s | vs the loop |",
            "|---|---|---|---|---|",
            f"| plain loop, one process | - | {loop:.1f} | {rate(loop):.1f} | 1.00x |",
            f"| Dask, 1 worker process | {one_start:.1f} | {one:.1f} | {rate(one):.1f} | {loop / one:.2f}x |",
            f"| Dask, 2 worker processes | {two_start:.1f} | {two:.1f} | {rate(two):.1f} | {loop / two:.2f}x |",
            "",
            f"2 workers over 1: {one / two:.2f}x. Every runner's rows equal the loop's (but for the seconds, and "
            "the arena of the time-bounded hill_climb).",
        ]
    )
    print(text)
    if args.docs is not None:
        replace_section(args.docs, SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
