"""Benchmark of the exact planner on MiniMalloc's eleven "challenging" instances.

Each instance is planned as ``memplan plan X.csv --strategy optimal --capacity 1048576
--time-limit 60`` would plan it (the same loading and strategy-running code as the CLI),
one after the other, and every plan is checked by the independent checker (as
`planner.compare.run_strategies` does; called directly here to keep the node count of a
search that gives up). An arena of exactly 1,048,576 bytes exists for each instance.

With ``--minimalloc PATH`` (a MiniMalloc binary built outside the repository, e.g. from
google/minimalloc with ``-O3``), MiniMalloc's own solver runs on each instance in the same
run, alternating with memplan (memplan first on even instances, MiniMalloc first on odd
ones, so that neither always meets a warmer or busier machine), under the same time limit;
its output is checked here (every buffer once, sizes as given, within the capacity, no
two buffers live at a common step overlapping in bytes). Both times are wall clock around
loading and solving: memplan's in this process (the problem read, planned and checked),
MiniMalloc's around its process (which reads the CSV, solves and writes its CSV).

Run from the repository root: ``python bench/exact_bench.py`` (``--traces DIR`` for the
folder of ``minimalloc_*.csv`` files, by default ``shared/bench`` next to the checkout;
``--time-limit S``; ``--only A,B``; ``--minimalloc PATH``). Writes the "exact-solver"
section of docs/BENCHMARKS.md and prints it.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.services.docsections import replace_section  # noqa: E402
from app.services.inputs import load_problem  # noqa: E402
from planner import check_plan, get  # noqa: E402
from planner.exact import ExactInfeasibleError  # noqa: E402

CAPACITY = 1_048_576
INSTANCES = "ABCDEFGHIJK"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "bench")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--only", default=INSTANCES, help="instance letters, e.g. A,B")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    parser.add_argument(
        "--minimalloc", type=Path, default=None, help="a MiniMalloc binary: run it on each instance too, side by side"
    )
    args = parser.parse_args()
    if args.time_limit <= 0:
        parser.error(f"--time-limit: must be > 0 seconds, got {args.time_limit}")
    if args.minimalloc is not None and not (args.minimalloc.is_file() and os.access(args.minimalloc, os.X_OK)):
        parser.error(f"--minimalloc: {args.minimalloc} is not an executable file (a MiniMalloc binary is accepted)")
    load_before = os.getloadavg()[0]
    rows = []
    letters = [c for c in args.only.upper() if c in INSTANCES]
    for k, letter in enumerate(letters):
        path = args.traces / f"minimalloc_{letter}.{CAPACITY}.csv"
        if not path.exists():
            print(f"{path.name}: missing, skipped", file=sys.stderr)
            continue
        if args.minimalloc is None:
            row = run_one(path, args.time_limit)
        elif k % 2 == 0:
            row = run_one(path, args.time_limit)
            row["minimalloc"] = run_minimalloc(args.minimalloc, path, args.time_limit)
        else:
            theirs = run_minimalloc(args.minimalloc, path, args.time_limit)
            row = run_one(path, args.time_limit)
            row["minimalloc"] = theirs
        rows.append(row)
        print(row, flush=True)
    markdown = render(rows, args.time_limit, (load_before, os.getloadavg()[0]))
    replace_section(args.output, "exact-solver", markdown)
    print(markdown)


def run_one(path: Path, time_limit: float) -> dict:
    """What `memplan plan` does for one strategy: load, plan, check (and keep the nodes)."""
    started = time.perf_counter()
    problem, _ = load_problem(path, capacity=CAPACITY)
    row = {"instance": path.name, "buffers": len(problem.buffers), "solved": False, "arena": None}
    try:
        result = get("optimal")(problem, time_limit=time_limit)
    except ExactInfeasibleError as e:
        row.update(status="proven infeasible" if e.proven else "timeout", nodes=e.nodes)
    else:
        verdict = check_plan(problem, result)
        row.update(solved=verdict.ok, arena=result.arena_bytes, nodes=result.stats["nodes"])
        row["status"] = result.stats["status"] if verdict.ok else f"INVALID: {verdict}"
    row["seconds"] = time.perf_counter() - started
    return row


def run_minimalloc(binary: Path, path: Path, time_limit: float) -> dict:
    """MiniMalloc's solver on one instance: wall seconds, its own solve time, and whether
    its packing is valid (checked here, not by MiniMalloc)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "solution.csv"
        command = [
            str(binary),
            f"--capacity={CAPACITY}",
            f"--input={path}",
            f"--output={out}",
            f"--timeout={time_limit:g}s",
        ]
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=time_limit + 30)
        except subprocess.TimeoutExpired:
            return {"solved": False, "status": "timeout", "seconds": time.perf_counter() - started, "solve": None}
        seconds = time.perf_counter() - started
        said = done.stderr + done.stdout
        found = re.search(r"Elapsed time ([0-9.]+)s", said)
        row = {"seconds": seconds, "solve": float(found.group(1)) if found else None}
        if done.returncode != 0:
            last = said.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            return {**row, "solved": False, "status": f"failed: {last[0][:80]}"}
        error = _check_minimalloc(path, out) if out.exists() else "no output written"
        return {**row, "solved": error is None, "status": "solved" if error is None else f"INVALID: {error}"}


def _check_minimalloc(instance: Path, solution: Path) -> str | None:
    """What is wrong with MiniMalloc's packing of `instance`, or None when it is valid."""
    with instance.open() as f:
        given = {r["id"]: (int(r["lower"]), int(r["upper"]), int(r["size"])) for r in csv.DictReader(f)}
    with solution.open() as f:
        rows = list(csv.DictReader(f))
    placed = {}
    for r in rows:
        key = r["id"]
        if key not in given or key in placed:
            return f"buffer {key} unknown or placed twice"
        if (int(r["lower"]), int(r["upper"]), int(r["size"])) != given[key]:
            return f"buffer {key} changed its lifetime or size"
        placed[key] = int(r["offset"])
    if set(placed) != set(given):
        return f"{len(set(given) - set(placed))} buffers without an offset"
    spans = [(*given[k], placed[k]) for k in sorted(given)]
    for i, (lo, hi, size, at) in enumerate(spans):
        if at < 0 or at + size > CAPACITY:
            return f"a buffer at {at} of {size} bytes leaves the capacity"
        for lo2, hi2, size2, at2 in spans[i + 1 :]:
            if lo < hi2 and lo2 < hi and at < at2 + size2 and at2 < at + size:
                return "two buffers live at a common step overlap in bytes"
    return None


def render(rows: list[dict], time_limit: float, machine_load: tuple[float, float]) -> str:
    solved = sum(r["solved"] for r in rows)
    side = [r["minimalloc"] for r in rows if "minimalloc" in r]
    lines = [
        "## Exact planner: MiniMalloc's challenging instances",
        "",
        f"`python bench/exact_bench.py{' --minimalloc PATH' if side else ''}`: `memplan plan X.csv --strategy optimal "
        f"--capacity {CAPACITY:,} --time-limit {time_limit:g}` on each instance, one at a time, on "
        f"{platform.machine()} with Python {platform.python_version()} ({os.cpu_count()} cores; 1-minute load "
        f"average {machine_load[0]:.1f} at the start, {machine_load[1]:.1f} at the end). Solved: a plan within "
        f"the capacity, checked by the independent checker. Nodes: search nodes over all restarts. "
        f"{solved} of {len(rows)} solved.",
    ]
    if side:
        lines[-1] += (
            " MiniMalloc: its own solver (C++, `--capacity=1048576`, its default three orders with restarts) run "
            "in the same run, alternating with memplan; seconds are wall clock around each process, its "
            "packing checked by the bench; ratio: memplan's seconds over MiniMalloc's."
        )
    head = "| instance | buffers | solved? | arena (bytes) | status | seconds | nodes |"
    rule = "|---|---:|:---:|---:|---|---:|---:|"
    if side:
        head += " MiniMalloc solved? | MiniMalloc seconds | ratio |"
        rule += ":---:|---:|---:|"
    lines += ["", head, rule]
    for r in rows:
        arena = f"{r['arena']:,}" if r["arena"] is not None else "-"
        nodes = f"{r['nodes']:,}" if r["nodes"] is not None else "-"
        line = (
            f"| {r['instance']} | {r['buffers']} | {'yes' if r['solved'] else 'no'} | {arena} | "
            f"{r['status']} | {r['seconds']:.2f} | {nodes} |"
        )
        if side:
            theirs = r["minimalloc"]
            solved_there = "yes" if theirs["solved"] else f"no ({theirs['status']})"
            line += f" {solved_there} | {theirs['seconds']:.2f} | {r['seconds'] / theirs['seconds']:.2f} |"
        lines.append(line)
    if side:
        ours = sum(r["seconds"] for r in rows)
        theirs_total = sum(s["seconds"] for s in side)
        lines.append(
            f"| **total** | | {solved} of {len(rows)} | | | {ours:.2f} | | "
            f"{sum(s['solved'] for s in side)} of {len(side)} | {theirs_total:.2f} | **{ours / theirs_total:.2f}** |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
