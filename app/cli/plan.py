"""`memplan plan`: plan a problem or a model with one or more strategies, check every plan, compare."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.common import (
    EXIT_INFEASIBLE,
    ConcatSwitch,
    DimsOption,
    FuseSwitch,
    InplaceSwitch,
    IoOption,
    PreparedWeightsSwitch,
    ShapeOption,
    TileOption,
    TileOverheadOption,
    TileSlackOption,
    WorkspaceSwitch,
    fail,
    memory_options,
    strategy_help,
    user_errors,
)


@user_errors
def plan(
    input: Annotated[
        Path, typer.Argument(help="A Problem .json, a MiniMalloc .csv, an ONNX .onnx or a TFLite .tflite model.")
    ],
    strategy: Annotated[str, typer.Option("--strategy", "-s", help=strategy_help())] = "all",
    alignment: Annotated[
        int | None, typer.Option(help="Offset alignment in bytes (default: the problem's; 64 for models).")
    ] = None,
    capacity: Annotated[int | None, typer.Option(help="Capacity of the arena (first pool) in bytes.")] = None,
    time_limit: Annotated[
        float | None, typer.Option("--time-limit", help="Seconds a search strategy may take.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of randomised strategies.")] = 0,
    dims: DimsOption = None,
    shape: ShapeOption = None,
    io: IoOption = "arena",
    workspace: WorkspaceSwitch = "on",
    reorder: Annotated[
        bool, typer.Option(help="Plan a model's nodes in a memory-aware order; shows the model's own order beside it.")
    ] = False,
    inplace: InplaceSwitch = "on",
    concat_inplace: ConcatSwitch = "on",
    fuse: FuseSwitch = "on",
    prepared_weights: PreparedWeightsSwitch = "on",
    tile: TileOption = "off",
    tile_overhead: TileOverheadOption = 0.2,
    tile_slack: TileSlackOption = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array, an object per strategy.")] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the chosen plan: .csv (MiniMalloc with offsets), .json (Plan JSON), or .tflite (a .tflite "
            "model with the plan as TensorFlow Lite Micro's offline plan).",
        ),
    ] = None,
) -> None:
    """Plan a problem or a model with one or more strategies, check every plan, compare."""
    from app.services.inputs import (
        ModelOptions,
        fused_nodes,
        load_problem,
        load_problem_and_order,
        parse_dims,
        parse_shapes,
    )
    from app.services.tiling import check_tile, tiled_problem
    from planner.compare import best, resolve_names, run_strategies

    check_tile(tile, tile_overhead, tile_slack)

    if time_limit is not None and time_limit <= 0:
        raise fail(f"--time-limit must be > 0 seconds, got {time_limit}")
    if output is not None and output.suffix.lower() not in (".csv", ".json", ".tflite"):
        raise fail(f"--output {output}: unknown type {output.suffix!r}; accepted: .csv, .json, .tflite")
    if output is not None and output.suffix.lower() == ".tflite":
        from app.services.tflite_export import check_output

        check_output(input, reorder)
    names = resolve_names(strategy)
    memory = memory_options(
        io=io,
        workspace=workspace,
        alignment=alignment,
        inplace=inplace,
        concat_inplace=concat_inplace,
        fuse=fuse,
        prepared_weights=prepared_weights,
    )
    model = ModelOptions(dims=parse_dims(dims), shapes=parse_shapes(shape), memory=memory, reorder=reorder)
    problem, graph, found = load_problem_and_order(input, alignment=alignment, capacity=capacity, model=model)
    tiling = _tiling(input, problem, graph, memory, tile, tile_overhead, tile_slack)
    if tiling is not None:
        problem, graph = tiled_problem(problem, tiling, memory), tiling.graph
    options: dict[str, Any] = {"seed": seed}
    if time_limit is not None:
        options["time_limit"] = time_limit
    outcomes = run_strategies(problem, names, **options)
    facts: dict[str, Any] = {}
    if graph is not None:
        facts = {"tensors": len(graph.tensors), "fused_nodes": fused_nodes(graph)}
    extras: list[dict[str, Any]] = [dict(facts, tiling=tiling and tiling.to_json()) for _ in outcomes]
    if reorder:
        own, _ = load_problem(
            input, alignment=alignment, capacity=capacity, model=dataclasses.replace(model, reorder=False)
        )
        for extra, theirs in zip(extras, run_strategies(own, names, **options), strict=True):
            extra.update(
                order="memory-aware",
                reorder=found.summary(),
                model_order_lower_bound=theirs.lower_bound,
                model_order_arena_bytes=theirs.arena_bytes,
            )

    if graph is not None:
        _alias_savings(input, problem, model, alignment, capacity, extras)
    if as_json:
        typer.echo(json.dumps([{**o.to_json(), **extra} for o, extra in zip(outcomes, extras, strict=True)], indent=2))
    else:
        _print_table(problem, outcomes, extras)
        if tiling is not None:
            typer.echo(f"tiling: {tiling.note}")
        if graph is not None:
            saved = extras[0]["aliases"]
            fused = ", ".join(f"{count} {kind}" for kind, count in facts["fused_nodes"].items() if count)
            typer.echo(f"fusions {'on' if memory.fuse else 'off'}: {fused or 'none applied'}")
            typer.echo(
                f"in place {'on' if memory.inplace else 'off'}, concat in place {'on' if memory.concat_inplace else 'off'}: "
                f"greedy_by_size {saved['arena_bytes_without']:,} -> {saved['arena_bytes_with']:,} bytes"
            )
    chosen = best(outcomes)
    if output is not None and chosen is not None and output.suffix.lower() == ".tflite":
        from app.services.tflite_export import write_tflite

        told = write_tflite(output, input, graph, chosen.plan)
        if not as_json:
            typer.echo(f"wrote the {chosen.strategy} plan into {output}: {told}")
    elif output is not None and chosen is not None:
        _write_plan(output, problem, chosen.plan)
        if not as_json:
            typer.echo(f"wrote the {chosen.strategy} plan to {output}")
    if chosen is None:
        reasons = "; ".join(f"{o.strategy}: {o.error or o.violations}" for o in outcomes)
        raise fail(f"no strategy produced a valid plan: {reasons}", EXIT_INFEASIBLE)


def _tiling(input: Path, problem: Any, graph: Any, memory: Any, tile: str, overhead: float, slack: float) -> Any:
    """The tiling `--tile auto` chooses (its note says what, or why the model stays untiled), or None."""
    from app.services.tiling import tile_graph

    if tile == "off":
        return None
    if graph is None:
        raise fail(f"{input}: --tile auto tiles a model's layers; a bare problem has none")
    return tile_graph(graph, memory, tile=tile, overhead=overhead, slack=slack)


def _alias_savings(
    input: Path, problem: Any, model: Any, alignment: int | None, capacity: int | None, extras: list[dict[str, Any]]
) -> None:
    """What the model's in-place and concat-in-place aliases save, with greedy_by_size (fast)."""
    from app.services.inputs import load_problem
    from planner import plan as plan_with

    plain, _ = load_problem(
        input,
        alignment=alignment,
        capacity=capacity,
        model=dataclasses.replace(model, memory=model.memory.replace(inplace=False, concat_inplace=False)),
    )
    saved = {
        "inplace": model.memory.inplace,
        "concat_inplace": model.memory.concat_inplace,
        "arena_bytes_with": plan_with(problem.with_capacity(None), "greedy_by_size").arena_bytes,
        "arena_bytes_without": plan_with(plain.with_capacity(None), "greedy_by_size").arena_bytes,
    }
    for extra in extras:
        extra["aliases"] = saved


def _print_table(problem: Any, outcomes: list[Any], extras: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    from planner import ratio

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
        x_load = ratio(o.plan.arena_bytes, o.lower_bound)
        valid = "yes" if o.valid else f"NO: {o.violations}"
        table.add_row(o.strategy, f"{o.plan.arena_bytes:,}", f"{x_load:.4f}", f"{o.seconds:.3f}", valid, *theirs)
    console = Console()
    console.print(table)
    if outcomes:
        first = outcomes[0]
        console.print(f"LOAD (lower bound) {first.lower_bound:,} bytes; naive sum {first.naive_bytes:,} bytes")
        if reordered:
            console.print(
                f"memory-aware order; the model's own order has LOAD {extras[0]['model_order_lower_bound']:,} bytes"
            )
            console.print(extras[0]["reorder"]["description"], markup=False)


def _write_plan(path: Path, problem: Any, plan: Any) -> None:
    from planner.csvio import write_csv

    text = write_csv(problem, plan) if path.suffix.lower() == ".csv" else plan.dumps(indent=2)
    path.write_text(text)
