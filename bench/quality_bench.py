"""Quality at scale: `best` and `optimal` against LOAD on traces of 10^4 to 10^5 buffers and
on the public traces (MiniMalloc's challenging instances and the others of the shared
benchmark folder), under a time limit.

Each problem is planned in a fresh process, once with `best` and once with `optimal`, both
with the same `--time-limit`; each plan is checked by `planner.check_plan`. A row shows the
wall-clock seconds, arena / LOAD, and for `optimal` the gap it proved (its `stats["gap"]`:
arena over its proven lower bound, minus 1; 0 is proven optimal).

Not run in CI. Writes the "planner-quality" section of docs/BENCHMARKS.md and prints it:

    python bench/quality_bench.py [--sizes 10000,100000] [--time-limit 10] [--traces DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.services.docsections import replace_section  # noqa: E402

GENERATORS = ("network_like", "training_like")
STRATEGIES = ("best", "optimal")
SECTION = "planner-quality"
GOAL = 1.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument(
        "--traces",
        type=Path,
        action="append",
        help="a folder of MiniMalloc CSV traces (repeatable; default: the shared benchmark folder), e.g. "
        "one holding idealloc's real traces (benchmarks/somas_tensors/pangu_2.6B.csv, benchmarks/iopddl/S_1.csv "
        "and Y_1.csv of github.com/cappadokes/idealloc)",
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    parser.add_argument("--worker", nargs=3, metavar=("PROBLEM", "STRATEGY", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        problem, strategy, seconds = args.worker
        print(json.dumps(measure(problem, strategy, float(seconds))))
        return
    problems = [f"{g}:{int(s)}" for g in GENERATORS for s in args.sizes.split(",")]
    for folder in args.traces or [ROOT.parent / "shared" / "bench"]:
        if not folder.is_dir():
            parser.error(f"--traces: {folder} is not a folder (a folder of .csv traces is accepted)")
        problems += [str(p) for p in sorted(folder.glob("*.csv"))]
    rows = []
    for problem in problems:
        row = {"problem": problem, "runs": {}}
        for strategy in STRATEGIES:
            row["runs"][strategy] = run_worker(problem, strategy, args.time_limit)
        rows.append(row)
        print(json.dumps(row), flush=True)
    text = markdown(rows, args.time_limit, [f.name for f in args.traces or []])
    replace_section(args.output, SECTION, text)
    print(text)


def run_worker(problem: str, strategy: str, seconds: float) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", problem, strategy, str(seconds)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_problem(name: str):  # noqa: ANN201 - a planner.Problem, imported in the worker only
    from planner import generate
    from planner.csvio import load_csv

    if ":" in name and not Path(name).exists():
        generator, size = name.split(":")
        return getattr(generate, generator)(int(size))
    return load_csv(Path(name))


def measure(name: str, strategy: str, seconds: float) -> dict:
    """In a fresh process: load or generate the problem, plan it, check the plan."""
    import planner

    problem = load_problem(name)
    machine_load = os.getloadavg()[0]
    started = time.perf_counter()
    plan = planner.plan(problem, strategy, time_limit=seconds)
    elapsed = time.perf_counter() - started
    stats = plan.stats
    return {
        "buffers": len(problem.buffers),
        "load": plan.lower_bound,
        "arena": plan.arena_bytes,
        "ratio": plan.ratio,
        "seconds": elapsed,
        "valid": planner.check_plan(problem, plan).ok,
        "gap": stats.get("gap"),
        "status": stats.get("status"),
        "winner": stats.get("winner") or stats.get("start"),
        "machine_load": machine_load,
    }


def _label(problem: str) -> str:
    if ":" in problem and "/" not in problem:
        generator, size = problem.split(":")
        return f"`{generator}({int(size):,})`"
    return Path(problem).name


def markdown(rows: list[dict], seconds: float, folders: list[str] | None = None) -> str:
    traces = (
        f" Traces: the CSV files of the `--traces` folders {', '.join(f'`{name}`' for name in folders)}."
        if folders
        else " Traces: the CSV files of the shared benchmark folder."
    )
    lines = [
        "## Planner quality at scale: `best` and `optimal` against LOAD",
        "",
        f"`python bench/quality_bench.py --time-limit {seconds:g}` on {platform.machine()} with Python "
        f"{platform.python_version()}: each problem planned in a fresh process by `best` and by "
        f"`optimal`, both with `time_limit={seconds:g}`, wall-clock seconds. Each cell: arena / LOAD "
        "(1.0000 is optimal), seconds; for `optimal` also the gap it proved (`stats.gap` in the plan's "
        "JSON: arena over its proven lower bound, minus 1; 0 means proven optimal) and its status. "
        f"Bold: within {GOAL}x of LOAD. Every plan was checked by `planner.check_plan` (an invalid one "
        "would show as INVALID). Machine load: the 1-minute load average as each run began (best, "
        "optimal); the machine may be shared." + traces,
        "",
        "| problem | buffers | LOAD (bytes) | best | best's winner | optimal | optimal's proven gap | machine load |",
        "|---|---:|---:|---:|---|---:|---|---|",
    ]
    for row in rows:
        best, optimal = row["runs"]["best"], row["runs"]["optimal"]
        cells = []
        for run in (best, optimal):
            text = f"{run['ratio']:.4f} · {run['seconds']:.1f} s" + ("" if run["valid"] else " INVALID")
            cells.append(f"**{text}**" if run["ratio"] <= GOAL else text)
        gap = f"{optimal['gap']:.4%} ({optimal['status']})" if optimal["gap"] is not None else "-"
        lines.append(
            f"| {_label(row['problem'])} | {best['buffers']:,} | {best['load']:,} | {cells[0]} | "
            f"{best['winner']} | {cells[1]} | {gap} | {best['machine_load']:.1f}, {optimal['machine_load']:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
