"""`memplan bench`: every strategy on every problem of a folder, as a markdown table."""

from __future__ import annotations

import platform
from pathlib import Path

from app.services.docsections import replace_section
from app.services.inputs import InputError, load_problem
from planner import Problem
from planner.compare import StrategyResult, resolve_names, run_strategies
from planner.generate import network_like

SECTION = "planner-traces"


def bench_folder(
    folder: Path, output: Path, *, strategy: str = "all", synthetic: int = 0, time_limit: float | None = None
) -> str:
    from rich.progress import Progress

    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder; expected a folder of .json/.csv problems")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".json", ".csv"))
    if not files and not synthetic:
        raise InputError(f"{folder}: no .json or .csv problems in it")
    names = resolve_names(strategy)
    problems: list[tuple[str, Problem]] = [(p.name, load_problem(p)[0]) for p in files]
    if synthetic:
        problems.append((f"network_like({synthetic:,}) generated", network_like(synthetic)))
    options = {} if time_limit is None else {"time_limit": time_limit}
    results: list[tuple[str, Problem, list[StrategyResult]]] = []
    with Progress(transient=True) as progress:
        task = progress.add_task("planning", total=len(problems) * len(names))
        for label, problem in problems:
            progress.update(task, description=label)
            outcomes = run_strategies(problem, names, on_done=lambda _: progress.advance(task), **options)
            results.append((label, problem, outcomes))
    markdown = render(results, names, time_limit)
    replace_section(output, SECTION, markdown)
    return markdown


def render(results: list[tuple[str, Problem, list[StrategyResult]]], names: list[str], time_limit: float | None) -> str:
    lines = [
        "## Planner: arena / LOAD and seconds per strategy",
        "",
        f"`memplan bench` on {platform.machine()} with Python {platform.python_version()}; "
        f"search strategies limited to {time_limit or 'their default'} s. "
        "Each cell: arena / LOAD (1.0000 is optimal), then planning seconds. "
        "Every plan was checked by the independent checker; a failed check would show as INVALID.",
        "",
        "| problem | buffers | LOAD (bytes) | " + " | ".join(names) + " |",
        "|---|---:|---:|" + "---:|" * len(names),
    ]
    for label, problem, outcomes in results:
        cells = []
        best_ratio = min((o.plan.ratio for o in outcomes if o.valid and o.plan), default=None)
        for o in outcomes:
            if o.plan is None:
                cells.append(f"— ({o.error})")
                continue
            text = f"{o.plan.ratio:.4f} / {o.seconds:.2f}s" + ("" if o.valid else " INVALID")
            cells.append(f"**{text}**" if o.plan.ratio == best_ratio else text)
        load = outcomes[0].lower_bound if outcomes else 0
        lines.append(f"| {label} | {len(problem.buffers):,} | {load:,} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Bold: the best ratio on that problem.")
    return "\n".join(lines)
