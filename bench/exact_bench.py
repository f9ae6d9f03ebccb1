"""Benchmark of the exact planner on MiniMalloc's eleven "challenging" instances.

Each instance is planned as ``memplan plan X.csv --strategy optimal --capacity 1048576
--time-limit 60`` would plan it (the same loading and strategy-running code as the CLI),
one after the other, and every plan is checked by the independent checker (as
`planner.compare.run_strategies` does; called directly here to keep the node count of a
search that gives up). An arena of
exactly 1,048,576 bytes exists for each instance.

Run from the repository root: ``python bench/exact_bench.py`` (``--traces DIR`` for the
folder of ``minimalloc_*.csv`` files, by default ``shared/bench`` next to the checkout;
``--time-limit S``; ``--only A,B``). Writes the "exact-solver" section of
docs/BENCHMARKS.md and prints it.
"""

from __future__ import annotations

import argparse
import platform
import sys
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
    args = parser.parse_args()
    rows = []
    for letter in [c for c in args.only.upper() if c in INSTANCES]:
        path = args.traces / f"minimalloc_{letter}.{CAPACITY}.csv"
        if not path.exists():
            print(f"{path.name}: missing, skipped", file=sys.stderr)
            continue
        rows.append(run_one(path, args.time_limit))
        print(rows[-1], flush=True)
    markdown = render(rows, args.time_limit)
    replace_section(args.output, "exact-solver", markdown)
    print(markdown)


def run_one(path: Path, time_limit: float) -> dict:
    """What `memplan plan` does for one strategy: load, plan, check (and keep the nodes)."""
    problem, _ = load_problem(path, capacity=CAPACITY)
    started = time.perf_counter()
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


def render(rows: list[dict], time_limit: float) -> str:
    solved = sum(r["solved"] for r in rows)
    lines = [
        "## Exact planner: MiniMalloc's challenging instances",
        "",
        f"`python bench/exact_bench.py`: `memplan plan X.csv --strategy optimal --capacity {CAPACITY:,} "
        f"--time-limit {time_limit:g}` on each instance, one at a time, on {platform.machine()} with Python "
        f"{platform.python_version()}. Solved: a plan within the capacity, checked by the independent checker. "
        f"Nodes: search nodes over all restarts. {solved} of {len(rows)} solved.",
        "",
        "| instance | buffers | solved? | arena (bytes) | status | seconds | nodes |",
        "|---|---:|:---:|---:|---|---:|---:|",
    ]
    for r in rows:
        arena = f"{r['arena']:,}" if r["arena"] is not None else "-"
        nodes = f"{r['nodes']:,}" if r["nodes"] is not None else "-"
        lines.append(
            f"| {r['instance']} | {r['buffers']} | {'yes' if r['solved'] else 'no'} | {arena} | "
            f"{r['status']} | {r['seconds']:.2f} | {nodes} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
