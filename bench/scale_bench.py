"""The planner at trace scale: seconds and arena / LOAD per strategy at 10^4, 10^5, 10^6 buffers.

For each generator (`planner.generate.network_like`, `planner.generate.training_like`) and
size, one fresh process generates the problem, plans it with every strategy that rides the
placement engine, and checks every plan with `planner.check_plan`: plain wall-clock timing
(`time.perf_counter`), no tracing or profiling. The process's peak resident memory shows
how the planner's memory grows. A strategy whose run at the largest size would take longer
than `--budget` seconds, projected from its two smaller runs (the growth from 10^4 to 10^5
carried on to 10^6), is not run there and the table says so.

Not run in CI. Keeps the raw results in docs/scale_bench.json, draws them as a log-log chart
(docs/planner_scale.svg, seconds against buffers), writes the "planner-scale" section of
docs/BENCHMARKS.md around the chart and prints it. `--chart-only` redraws the chart and the
section from the JSON without planning anything:

    python bench/scale_bench.py [--sizes 10000,100000,1000000] [--budget 600] [--output docs/BENCHMARKS.md]
    python bench/scale_bench.py --chart-only
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.services.docsections import replace_section  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from svgchart import Goal, Panel, Series, loglog_svg  # noqa: E402

STRATEGIES = (
    "naive",
    "bump",
    "first_fit",
    "wic",
    "greedy_by_size",
    "greedy_by_breadth",
    "greedy_by_conflicts",
    "best_fit",
)
GENERATORS = ("network_like", "training_like")
SECTION = "planner-scale"
# Beside the markdown, so that the page links the chart by its bare name.
RESULTS, CHART = "scale_bench.json", "planner_scale.svg"
SCHEMA = 1
# The goals at 10^6 buffers: each heuristic within 30 s, the checker within 10 s.
STRATEGY_GOAL, CHECK_GOAL = 30.0, 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--budget", type=float, default=600.0, help="seconds a run at the largest size may take")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    parser.add_argument(
        "--chart-only", action="store_true", help=f"redraw the chart and the section from {RESULTS}, planning nothing"
    )
    parser.add_argument("--worker", nargs=3, metavar=("GENERATOR", "SIZE", "STRATEGIES"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--routes",
        nargs=3,
        metavar=("GENERATOR", "SIZE", "STRATEGIES"),
        help="in one process, each strategy through the engine's Python loop, then its compiled loop: CPU seconds and "
        "the digest of every offset of each (the two must plan alike)",
    )
    args = parser.parse_args()
    if args.routes:
        generator, size, names = args.routes
        compare_routes(generator, int(size), [n for n in names.split(",") if n])
        return
    if args.worker:
        generator, size, names = args.worker
        print(json.dumps(measure(generator, int(size), [n for n in names.split(",") if n])))
        return
    if args.chart_only:
        print(publish(load_record(args.output.parent / RESULTS), args.output))
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    names = args.strategies.split(",")
    results: dict[str, dict[int, dict]] = {}
    for generator in GENERATORS:
        results[generator] = {}
        for size in sizes:
            chosen, skipped = runnable(results[generator], names, size, args.budget)
            found = run_worker(generator, size, chosen)
            found["skipped"] = skipped
            results[generator][size] = found
            print(f"{generator} {size:,}: {found}", flush=True)
    record = {
        "schema": SCHEMA,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": current_commit(),
        "budget": args.budget,
        "sizes": sizes,
        "strategies": names,
        "results": results,
    }
    save_record(record, args.output.parent / RESULTS)
    print(publish(record, args.output))


def current_commit() -> str | None:
    """The checkout's commit, so that the figures can be tied to the code that made them."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return done.stdout.strip() or None


def save_record(record: dict, path: Path) -> None:
    """The results as JSON, sizes as string keys; `load_record` reads them back."""
    results = {g: {str(s): found for s, found in by_size.items()} for g, by_size in record["results"].items()}
    path.write_text(json.dumps({**record, "results": results}, indent=1) + "\n")


def load_record(path: Path) -> dict:
    """The saved results, with the sizes back to integers (JSON keys are strings)."""
    record = json.loads(path.read_text())
    if record.get("schema") != SCHEMA:
        raise SystemExit(f"{path}: schema {record.get('schema')!r}, expected {SCHEMA}")
    record["results"] = {g: {int(s): f for s, f in by_size.items()} for g, by_size in record["results"].items()}
    return record


def publish(record: dict, output: Path) -> str:
    """Draw the chart beside `output` and write the section that shows it; returns the section."""
    (output.parent / CHART).write_text(chart(record))
    text = markdown(record)
    replace_section(output, SECTION, text)
    return text


def chart(record: dict) -> str:
    """Seconds against buffers, one panel per generator: each strategy, the slowest check, the goals."""
    panels = []
    for generator, by_size in record["results"].items():
        series = [
            Series(
                name, [(s, by_size[s]["runs"][name]["seconds"]) for s in record["sizes"] if name in by_size[s]["runs"]]
            )
            for name in record["strategies"]
        ]
        checks = [(s, by_size[s]["slowest_check_seconds"]) for s in record["sizes"] if by_size[s]["runs"]]
        series.append(Series("check_plan (slowest)", checks, color="#000000"))
        goals = [Goal(f"{STRATEGY_GOAL:g} s goal, each heuristic", STRATEGY_GOAL)]
        goals.append(Goal(f"{CHECK_GOAL:g} s goal, check_plan", CHECK_GOAL, color="#000000", dash="2 3"))
        panels.append(Panel(f"{generator}(n)", series, goals))
    return loglog_svg(panels, x_label="buffers (n)", y_label="planning seconds")


def runnable(done: dict[int, dict], names: list[str], size: int, budget: float) -> tuple[list[str], dict[str, float]]:
    """The strategies to run at `size`, and the projected seconds of those left out."""
    smaller = sorted(s for s in done if s < size)
    if len(smaller) < 2:
        return names, {}
    below, last = done[smaller[-2]]["runs"], done[smaller[-1]]["runs"]
    chosen, skipped = [], {}
    for name in names:
        if name not in last:
            skipped[name] = done[smaller[-1]]["skipped"].get(name, float("inf"))
            continue
        growth = last[name]["seconds"] / max(below[name]["seconds"], 1e-3) if name in below else size / smaller[-1]
        projected = last[name]["seconds"] * max(growth, size / smaller[-1])
        if projected > budget:
            skipped[name] = projected
        else:
            chosen.append(name)
    return chosen, skipped


def run_worker(generator: str, size: int, names: list[str]) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", generator, str(size), ",".join(names)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_routes(generator: str, size: int, names: list[str]) -> None:
    """The engine's Python loop against its compiled one (`planner.timeline_jit`), side by side."""
    import planner
    import planner.timeline_jit
    from planner import generate

    problem = getattr(generate, generator)(size)
    for name in names:
        found = {}
        for compiled in (False, True):
            planner.timeline_jit.USE = compiled
            gc.collect()
            cpu = time.process_time()
            plan = planner.plan(problem, name)
            found[compiled] = (time.process_time() - cpu, _digest(plan))
        (python_s, python_digest), (compiled_s, compiled_digest) = found[False], found[True]
        same = "same plan" if python_digest == compiled_digest else "DIFFERENT PLANS"
        print(f"{generator}({size:,}) {name}: Python loop {python_s:.2f} s, compiled {compiled_s:.2f} s CPU; {same}")


def _digest(plan: Any) -> str:
    """Every offset, so that two versions or routes of the engine can be shown to plan alike."""
    where = sorted((key, p.pool, p.offset) for key, p in plan.offsets.items())
    return hashlib.sha256(repr(where).encode()).hexdigest()[:16]


def measure(generator: str, size: int, names: list[str]) -> dict:
    """In a fresh process: generate, then plan and check with each strategy."""
    import planner
    from planner import generate

    started = time.perf_counter()
    machine_load = os.getloadavg()[0]
    problem = getattr(generate, generator)(size)
    found: dict = {"generate_seconds": time.perf_counter() - started, "load": planner.load(problem), "runs": {}}
    for name in names:
        gc.collect()
        started, cpu = time.perf_counter(), time.process_time()
        plan = planner.plan(problem, name)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        digest = _digest(plan)
        started = time.perf_counter()
        verdict = planner.check_plan(problem, plan)
        found["runs"][name] = {
            "seconds": seconds,
            "cpu_seconds": cpu,
            "digest": digest,
            "arena_bytes": plan.arena_bytes,
            "ratio": plan.ratio,
            "valid": verdict.ok,
            "check_seconds": time.perf_counter() - started,
        }
        del plan
    found["slowest_check_seconds"] = max((r["check_seconds"] for r in found["runs"].values()), default=0.0)
    found["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    found["machine_load"] = (machine_load, os.getloadavg()[0])
    return found


def markdown(record: dict) -> str:
    sizes, names, results = record["sizes"], record["strategies"], record["results"]
    made = f" at {record['commit']}" if record.get("commit") else ""
    lines = [
        "## Planner at trace scale: 10^4 to 10^6 buffers",
        "",
        f"`python bench/scale_bench.py` on {record['machine']} with Python {record['python']}{made}, "
        f"{record['date']}, one fresh process per problem, wall-clock seconds without tracing or profiling. Each cell: "
        "planning seconds, then arena / LOAD (1.0000 is optimal). Every plan was checked by "
        "`planner.check_plan` (an invalid one would show as INVALID); the check row is the slowest "
        "check of that column's plans. Peak memory: the process's resident set at its end "
        "(problem, plans and planner together). A run projected past "
        f"{record['budget']:.0f} s (its growth from the two smaller sizes carried on) is not run. Machine "
        "load: the 1-minute load average when the column's process began and ended (the machine "
        f"may be shared: compare seconds within a column). The raw figures are in `{RESULTS}`.",
        "",
        f"![Planning seconds against buffers, log-log, per strategy and for check_plan, with the goals dashed]({CHART})",
        "",
        reading(record),
    ]
    for generator, by_size in results.items():
        lines += ["", f"### `{generator}(n)`", ""]
        lines.append("| strategy | " + " | ".join(f"n = {s:,}" for s in sizes) + " |")
        lines.append("|---|" + "---:|" * len(sizes))
        for name in names:
            cells = []
            for size in sizes:
                found = by_size[size]
                run = found["runs"].get(name)
                if run is None:
                    cells.append(f"not run (~{found['skipped'].get(name, float('inf')):,.0f} s projected)")
                else:
                    mark = "" if run["valid"] else " INVALID"
                    cells.append(f"{run['seconds']:.2f} s · {run['ratio']:.4f}{mark}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        checks = [by_size[s]["slowest_check_seconds"] for s in sizes]
        lines.append("| check_plan | " + " | ".join(f"{c:.2f} s" for c in checks) + " |")
        lines.append("| generate | " + " | ".join(f"{by_size[s]['generate_seconds']:.1f} s" for s in sizes) + " |")
        lines.append("| peak memory | " + " | ".join(f"{by_size[s]['peak_rss_mb']:,.0f} MB" for s in sizes) + " |")
        loads = (by_size[s]["machine_load"] for s in sizes)
        lines.append("| machine load | " + " | ".join(f"{a:.1f} → {b:.1f}" for a, b in loads) + " |")
    return "\n".join(lines)


def reading(record: dict) -> str:
    """One sentence on the chart: how much each generator's seconds grew over the last decade of size."""
    sizes = record["sizes"]
    goals = f"a point above a dashed line misses its goal ({STRATEGY_GOAL:g} s per heuristic, {CHECK_GOAL:g} s for the checker)"
    if len(sizes) < 2:
        return f"On these axes {goals}."
    below, top = sizes[-2], sizes[-1]
    growths = []
    for generator, by_size in record["results"].items():
        low, high = by_size[below]["runs"], by_size[top]["runs"]
        growth = {n: high[n]["seconds"] / low[n]["seconds"] for n in high if n in low and low[n]["seconds"] > 0}
        if growth:
            slow, fast = max(growth, key=lambda n: (growth[n], n)), min(growth, key=lambda n: (growth[n], n))
            growths.append(f"{growth[fast]:.2g}x ({fast}) to {growth[slow]:.2g}x ({slow}) on `{generator}`")
    if not growths:
        return f"On these axes {goals}."
    return (
        f"On log-log axes a line that climbs one decade per decade of buffers is linear time: from "
        f"n = {below:,} to n = {top:,} the strategies' seconds grew {' and '.join(growths)}; {goals}."
    )


if __name__ == "__main__":
    main()
