"""The `memplan` command line.

Every command turns a bad input into one line on stderr naming what was wrong and what is
accepted, and exits with status 2; a plan that does not fit exits with status 1. No
traceback reaches the user (set MEMPLAN_DEBUG=1 to see one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

app = typer.Typer(
    name="memplan",
    help="Static memory planning for neural networks: plan, compare, run and serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])

# The model switches `plan` and `run` share (on|off, checked by `_check_switches`).
InplaceSwitch = Annotated[
    str,
    typer.Option(help="Ops write over an input that dies there (elementwise, LRN, pooling, depthwise Conv): on|off."),
]
ConcatSwitch = Annotated[str, typer.Option(help="Concat's producers write straight into their slices: on|off.")]
FuseSwitch = Annotated[
    str, typer.Option(help="Fuse BatchNorm into Conv, a 1x1 Conv with its residual Add, the exact GELU: on|off.")
]

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    typer.echo(f"memplan: error: {message}", err=True)
    return typer.Exit(code)


def user_errors(fn: F) -> F:
    """Report expected errors as one line and exit 2, unexpected ones as one line and exit 3."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from planner import PlanningError

        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except (PlanningError, ValueError, OSError, KeyError) as e:
            if os.environ.get("MEMPLAN_DEBUG"):
                raise
            raise fail(str(e).strip("'\"") or type(e).__name__) from None
        except MemoryError:
            raise fail("out of memory; try smaller --dims or a lower --time-limit") from None
        except Exception as e:  # a bug: say so in one line, keep the traceback for MEMPLAN_DEBUG
            if os.environ.get("MEMPLAN_DEBUG"):
                raise
            raise fail(
                f"internal error ({type(e).__name__}: {e}); rerun with MEMPLAN_DEBUG=1 for details", EXIT_INTERNAL
            ) from None

    return wrapper  # type: ignore[return-value]


def strategy_help() -> str:
    from planner import names

    return "Strategy name, a comma-separated list, or 'all'. Known: " + ", ".join(names()) + "."


@app.command()
@user_errors
def plan(
    input: Annotated[Path, typer.Argument(help="A Problem .json, a MiniMalloc .csv or an ONNX .onnx model.")],
    strategy: Annotated[str, typer.Option("--strategy", "-s", help=strategy_help())] = "all",
    alignment: Annotated[
        int | None, typer.Option(help="Offset alignment in bytes (default: the problem's; 64 for models).")
    ] = None,
    capacity: Annotated[int | None, typer.Option(help="Capacity of the arena (first pool) in bytes.")] = None,
    time_limit: Annotated[
        float | None, typer.Option("--time-limit", help="Seconds a search strategy may take.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of randomised strategies.")] = 0,
    dims: Annotated[str | None, typer.Option(help="Symbolic dims of a model, e.g. batch=8,seq=128.")] = None,
    io: Annotated[
        str, typer.Option(help="Model inputs/outputs: 'arena' (planned) or 'external' (caller's memory).")
    ] = "arena",
    workspace: Annotated[str, typer.Option(help="Plan kernel scratch in the arena: on|off.")] = "on",
    reorder: Annotated[
        bool, typer.Option(help="Plan a model's nodes in a memory-aware order; shows the model's own order beside it.")
    ] = False,
    inplace: InplaceSwitch = "on",
    concat_inplace: ConcatSwitch = "on",
    fuse: FuseSwitch = "on",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array, an object per strategy.")] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write the chosen plan: .csv (MiniMalloc with offsets) or .json (Plan JSON)."
        ),
    ] = None,
) -> None:
    """Plan a problem or a model with one or more strategies, check every plan, compare."""
    from app.inputs import ModelOptions, load_problem, parse_dims
    from planner.compare import best, resolve_names, run_strategies

    if time_limit is not None and time_limit <= 0:
        raise fail(f"--time-limit must be > 0 seconds, got {time_limit}")
    if io not in ("arena", "external"):
        raise fail(f"--io must be 'arena' or 'external', got {io!r}")
    if workspace not in ("on", "off"):
        raise fail(f"--workspace must be 'on' or 'off', got {workspace!r}")
    _check_switches(inplace, concat_inplace, fuse)
    if output is not None and output.suffix.lower() not in (".csv", ".json"):
        raise fail(f"--output {output}: unknown type {output.suffix!r}; accepted: .csv, .json")
    names = resolve_names(strategy)
    model = ModelOptions(
        dims=parse_dims(dims),
        io=io,
        workspace=workspace == "on",
        reorder=reorder,
        inplace=inplace == "on",
        concat_inplace=concat_inplace == "on",
        fuse=fuse == "on",
    )
    problem, graph = load_problem(input, alignment=alignment, capacity=capacity, model=model)
    options: dict[str, Any] = {"seed": seed}
    if time_limit is not None:
        options["time_limit"] = time_limit
    outcomes = run_strategies(problem, names, **options)
    from app.inputs import fused_nodes

    facts = {"tensors": len(graph.tensors), "fused_nodes": fused_nodes(graph)} if graph is not None else {}
    extras: list[dict[str, Any]] = [dict(facts) for _ in outcomes]
    if reorder:
        own, _ = load_problem(
            input, alignment=alignment, capacity=capacity, model=dataclasses.replace(model, reorder=False)
        )
        for extra, theirs in zip(extras, run_strategies(own, names, **options), strict=True):
            extra.update(
                order="memory-aware",
                model_order_lower_bound=theirs.lower_bound,
                model_order_arena_bytes=theirs.arena_bytes,
            )

    if graph is not None:
        _alias_savings(input, problem, model, alignment, capacity, extras)
    if as_json:
        typer.echo(json.dumps([{**o.to_json(), **extra} for o, extra in zip(outcomes, extras, strict=True)], indent=2))
    else:
        _print_table(problem, outcomes, extras)
        if graph is not None:
            saved = extras[0]["aliases"]
            fused = ", ".join(f"{count} {kind}" for kind, count in facts["fused_nodes"].items() if count)
            typer.echo(f"fusions {'on' if model.fuse else 'off'}: {fused or 'none applied'}")
            typer.echo(
                f"in place {'on' if model.inplace else 'off'}, concat in place {'on' if model.concat_inplace else 'off'}: "
                f"greedy_by_size {saved['arena_bytes_without']:,} -> {saved['arena_bytes_with']:,} bytes"
            )
    chosen = best(outcomes)
    if output is not None and chosen is not None:
        _write_plan(output, problem, chosen.plan)
        if not as_json:
            typer.echo(f"wrote the {chosen.strategy} plan to {output}")
    if chosen is None:
        reasons = "; ".join(f"{o.strategy}: {o.error or o.violations}" for o in outcomes)
        raise fail(f"no strategy produced a valid plan: {reasons}", EXIT_INFEASIBLE)


def _check_switches(inplace: str, concat_inplace: str, fuse: str) -> None:
    for flag, value in (("--inplace", inplace), ("--concat-inplace", concat_inplace), ("--fuse", fuse)):
        if value not in ("on", "off"):
            raise fail(f"{flag} takes on|off, got {value!r}")


def _alias_savings(
    input: Path, problem: Any, model: Any, alignment: int | None, capacity: int | None, extras: list[dict[str, Any]]
) -> None:
    """What the model's in-place and concat-in-place aliases save, with greedy_by_size (fast)."""
    from app.inputs import load_problem
    from planner import plan as plan_with

    plain, _ = load_problem(
        input,
        alignment=alignment,
        capacity=capacity,
        model=dataclasses.replace(model, inplace=False, concat_inplace=False),
    )
    saved = {
        "inplace": model.inplace,
        "concat_inplace": model.concat_inplace,
        "arena_bytes_with": plan_with(problem.with_capacity(None), "greedy_by_size").arena_bytes,
        "arena_bytes_without": plan_with(plain.with_capacity(None), "greedy_by_size").arena_bytes,
    }
    for extra in extras:
        extra["aliases"] = saved


def _print_table(problem: Any, outcomes: list[Any], extras: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    title = f"{problem.name or 'problem'}: {len(problem.buffers):,} buffers, {problem.steps:,} steps"
    table = Table(title=title)
    reordered = bool(extras and "order" in extras[0])
    columns = ["strategy", "arena bytes", "x LOAD", "seconds", "valid"] + (["model order arena"] if reordered else [])
    for column in columns:
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for o, extra in zip(outcomes, extras, strict=True):
        theirs = [f"{extra['model_order_arena_bytes'] or 0:,}"] if reordered else []
        if o.plan is None:
            table.add_row(o.strategy, "-", "-", f"{o.seconds:.3f}", o.error or "", *theirs)
            continue
        ratio = o.plan.arena_bytes / o.lower_bound if o.lower_bound else 1.0
        valid = "yes" if o.valid else f"NO: {o.violations}"
        table.add_row(o.strategy, f"{o.plan.arena_bytes:,}", f"{ratio:.4f}", f"{o.seconds:.3f}", valid, *theirs)
    console = Console()
    console.print(table)
    if outcomes:
        first = outcomes[0]
        console.print(f"LOAD (lower bound) {first.lower_bound:,} bytes; naive sum {first.naive_bytes:,} bytes")
        if reordered:
            console.print(
                f"memory-aware order; the model's own order has LOAD {extras[0]['model_order_lower_bound']:,} bytes"
            )


def _write_plan(path: Path, problem: Any, plan: Any) -> None:
    from planner.csvio import write_csv

    text = write_csv(problem, plan) if path.suffix.lower() == ".csv" else plan.dumps(indent=2)
    path.write_text(text)


@app.command()
@user_errors
def bench(
    folder: Annotated[Path, typer.Argument(help="A folder of Problem .json and MiniMalloc .csv files.")],
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="Markdown file to write the table into (its benchmark section is replaced)."
        ),
    ] = Path("docs/BENCHMARKS.md"),
    strategy: Annotated[str, typer.Option("--strategy", "-s", help=strategy_help())] = "all",
    synthetic: Annotated[
        int, typer.Option(help="Also plan a generated network-like problem of this many buffers (0: none).")
    ] = 20_000,
    time_limit: Annotated[
        float | None, typer.Option("--time-limit", help="Seconds a search strategy may take per problem.")
    ] = None,
) -> None:
    """Plan every problem in a folder with every strategy; write arena/LOAD and seconds as markdown."""
    from app.benchmark import bench_folder

    markdown = bench_folder(folder, output, strategy=strategy, synthetic=synthetic, time_limit=time_limit)
    typer.echo(markdown)
    typer.echo(f"wrote {output}")


@app.command()
@user_errors
def run(
    model: Annotated[Path, typer.Argument(help="An ONNX .onnx model.")],
    dims: Annotated[str | None, typer.Option(help="Symbolic dims, e.g. batch=1,seq=128.")] = None,
    strategy: Annotated[
        str, typer.Option("--strategy", "-s", help="The strategy whose plan to run in.")
    ] = "greedy_by_size",
    inputs: Annotated[
        Path | None, typer.Option(help="An .npz of inputs by name (default: seeded random inputs).")
    ] = None,
    save_outputs: Annotated[Path | None, typer.Option("--save-outputs", help="Write the outputs to this .npz.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    repeat: Annotated[int, typer.Option(help="Timed runs after one warm-up; seconds is their median.")] = 3,
    io: Annotated[str, typer.Option(help="Inputs/outputs in the 'arena' or 'external' (caller's memory).")] = "arena",
    workspace: Annotated[str, typer.Option(help="Plan kernel scratch in the arena: on|off.")] = "on",
    canary: Annotated[
        bool, typer.Option(help="Poison free bytes and check live tensors at every step (slow).")
    ] = False,
    verify: Annotated[
        bool, typer.Option(help="Compare outputs with onnxruntime (or onnx.reference when it is missing).")
    ] = False,
    reorder: Annotated[bool, typer.Option(help="Run the nodes in a memory-aware order.")] = False,
    inplace: InplaceSwitch = "on",
    concat_inplace: ConcatSwitch = "on",
    fuse: FuseSwitch = "on",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print arena_bytes, outside_arena_bytes, seconds, outputs as JSON.")
    ] = False,
) -> None:
    """Execute a model inside its planned arena and report memory and time."""
    from app.execute import run_model

    if repeat < 1:
        raise fail(f"--repeat must be >= 1, got {repeat}")
    if io not in ("arena", "external") or workspace not in ("on", "off"):
        raise fail("--io takes arena|external and --workspace takes on|off")
    _check_switches(inplace, concat_inplace, fuse)
    report = run_model(
        model,
        dims=_dims(dims),
        strategy=strategy,
        inputs=inputs,
        save_outputs=save_outputs,
        seed=seed,
        repeat=repeat,
        io=io,
        workspace=workspace == "on",
        canary=canary,
        verify=verify,
        reorder=reorder,
        inplace=inplace == "on",
        concat_inplace=concat_inplace == "on",
        fuse=fuse == "on",
    )
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        ratio = report["outside_arena_bytes"] / report["arena_bytes"] if report["arena_bytes"] else 0.0
        typer.echo(
            f"{model.name}: {report['strategy']} arena {report['arena_bytes']:,} bytes; outside it {report['outside_arena_bytes']:,} bytes ({ratio:.2%})"
        )
        typer.echo(f"median of {repeat} run(s): {report['seconds'] * 1000:.2f} ms")
        typer.echo(
            f"in place {'on' if inplace == 'on' else 'off'}, concat in place {'on' if concat_inplace == 'on' else 'off'}; "
            f"with both off this strategy needs {report['arena_bytes_without_aliases']:,} bytes"
        )
        for name, shape in report["outputs"].items():
            typer.echo(f"  output {name}: {shape}")
        if "verification" in report:
            v = report["verification"]
            typer.echo(f"verification against {v['oracle']}: {'PASSED' if v['passed'] else 'FAILED'}")
    if verify and not report["verification"]["passed"]:
        raise typer.Exit(EXIT_INFEASIBLE)


def _dims(text: str | None) -> dict[str, int]:
    from app.inputs import parse_dims

    return parse_dims(text)


@app.command()
@user_errors
def conformance(
    full: Annotated[
        bool, typer.Option("--full/--fast", help="Every node test and all 9 light models, or the quick CI sample.")
    ] = True,
    op: Annotated[list[str] | None, typer.Option(help="Only the node tests of this op (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    output: Annotated[Path, typer.Option("--output", "-o", help="Markdown report to write.")] = Path(
        "docs/CONFORMANCE.md"
    ),
) -> None:
    """Run memplan's backend through onnx's own backend test suite; write pass/fail/skip by op."""
    from rich.progress import Progress

    from runtime.conformance import run_conformance

    with Progress(transient=True, disable=as_json) as progress:
        task = progress.add_task("conformance", total=None)

        def show(test: str, status: str) -> None:
            progress.update(task, description=f"{status:7} {test}")

        report = run_conformance(op, None if op else None, fast=not full and not op, progress=show)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report.to_markdown())
    totals = report.totals()
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=1))
    else:
        typer.echo(
            f"node tests of supported ops: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped; "
            f"{totals['unsupported']} tests of ops without a kernel; light models {report.models_passed()}/{len(report.models)}; wrote {output}"
        )
    if totals["failed"] or report.models_passed() != len(report.models):
        raise typer.Exit(EXIT_INFEASIBLE)


@app.command()
@user_errors
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    data: Annotated[
        Path | None, typer.Option(help="Data directory (default: $MEMPLAN_DATA or ./memplan-data).")
    ] = None,
) -> None:
    """Start the web service (browser UI at /, REST API under /api/v1, OpenAPI at /docs)."""
    import uvicorn

    from app.main import Settings, create_app

    settings = Settings(data_dir=data) if data is not None else Settings()
    uvicorn.run(create_app(settings), host=host, port=port)


def _load_command_modules() -> None:
    import importlib
    import pkgutil

    import app.commands as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")


_load_command_modules()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    # Run the package module's app, on which app/commands/ registered their commands.
    from app.cli import main as package_main

    package_main()
