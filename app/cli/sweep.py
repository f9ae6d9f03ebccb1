"""`memplan sweep`: plan every model x strategy x dims combination on a Dask cluster."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.common import (
    ConcatSwitch,
    FuseSwitch,
    InplaceSwitch,
    IoOption,
    PreparedWeightsSwitch,
    ShapeOption,
    TileOption,
    TileOverheadOption,
    WorkspaceSwitch,
    fail,
    memory_options,
    strategy_help,
    user_errors,
)


@user_errors
def sweep(
    inputs: Annotated[
        list[Path], typer.Argument(help="ONNX or TFLite models, or folders of them (every *.onnx and *.tflite inside).")
    ],
    strategy: Annotated[str, typer.Option("--strategy", "-s", help=strategy_help())] = "all",
    dims: Annotated[
        str | None, typer.Option(help="Values of symbolic dims to sweep, e.g. batch=1,8,32 or batch=1,8,seq=64,128.")
    ] = None,
    shape: ShapeOption = None,
    time_limit: Annotated[
        float | None, typer.Option("--time-limit", help="Seconds a search strategy may take per task.")
    ] = None,
    workers: Annotated[int, typer.Option(help="Worker processes of the local cluster (without a scheduler).")] = 2,
    scheduler: Annotated[
        str | None,
        typer.Option(help="A Dask scheduler to use instead of a local cluster (default $MEMPLAN_SCHEDULER)."),
    ] = None,
    io: IoOption = "arena",
    workspace: WorkspaceSwitch = "on",
    inplace: InplaceSwitch = "on",
    concat_inplace: ConcatSwitch = "on",
    fuse: FuseSwitch = "on",
    prepared_weights: PreparedWeightsSwitch = "on",
    tile: TileOption = "off",
    tile_overhead: TileOverheadOption = 0.2,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array, a row per task.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the rows as CSV.")] = None,
) -> None:
    """Plan every model x strategy x dims combination, one task each, on a Dask cluster; table, JSON or CSV."""
    from app.services import sweeps
    from app.services.inputs import parse_shapes
    from app.services.tflite_info import summary_of
    from app.services.tiling import check_tile
    from planner.compare import resolve_names

    if workers < 1:
        raise fail(f"--workers must be >= 1, got {workers}")
    check_tile(tile, tile_overhead)
    if output is not None and output.suffix.lower() != ".csv":
        raise fail(f"--output {output}: unknown type {output.suffix!r}; accepted: .csv")
    memory = memory_options(
        io=io,
        workspace=workspace,
        alignment=None,
        inplace=inplace,
        concat_inplace=concat_inplace,
        fuse=fuse,
        prepared_weights=prepared_weights,
    )
    files = _model_files(inputs)
    summaries = {f.stem: _summary(f, summary_of) for f in files}
    symbolic = {f.stem: (str(f), summaries[f.stem]["symbolic_dims"]) for f in files}
    declared = {n: {v["name"]: (list(v["dims"]) or None) for v in s["inputs"]} for n, s in summaries.items()}
    names = resolve_names(strategy)
    grid = sweeps.parse_dims_grid(dims)
    shapes = parse_shapes(shape)
    sweeps.check_combinations(symbolic, names, grid, shapes=shapes, inputs=declared)
    tasks = sweeps.tasks_of(
        {n: p for n, (p, _) in symbolic.items()},
        names,
        grid,
        memory=memory,
        time_limit=time_limit,
        shapes=shapes,
        tile=tile,
        tile_overhead=tile_overhead,
    )
    rows = _run(tasks, scheduler or os.environ.get("MEMPLAN_SCHEDULER"), workers, quiet=as_json)
    rows = sweeps.ordered(rows)
    if output is not None:
        output.write_text(sweeps.to_csv(rows))
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
    else:
        _print_table(rows)
        if output is not None:
            typer.echo(f"wrote {len(rows)} rows to {output}")


def _summary(path: Path, summary_of: Any) -> dict[str, Any]:
    from app.errors import AppError

    try:
        return dict(summary_of(path))
    except AppError as e:
        raise fail(f"{path}: {e}") from None


def _model_files(inputs: list[Path]) -> list[Path]:
    from app.services.inputs import MODEL_SUFFIXES

    files: list[Path] = []
    for path in inputs:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix.lower() in MODEL_SUFFIXES)
            if not found:
                raise fail(f"{path}: a folder with no .onnx model (nor a .tflite one) in it")
            files += found
        elif path.suffix.lower() in MODEL_SUFFIXES and path.exists():
            files.append(path)
        else:
            raise fail(f"{path}: no such .onnx or .tflite model; give ONNX or TFLite models or folders of them")
    stems = [f.stem for f in files]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise fail(f"two models are named {twice[0]!r}; a sweep names rows by file name, so rename one")
    return files


def _run(tasks: list, scheduler: str | None, workers: int, *, quiet: bool) -> list[dict]:
    from distributed import Client, LocalCluster, as_completed
    from rich.progress import Progress

    from app.jobs import SchedulerUnreachable, connect
    from app.services.sweeps import groups_of, plan_group

    cluster = None
    try:
        if scheduler:
            client = connect(scheduler)
        else:
            cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
            )
            client = Client(cluster, set_as_default=False)
    except SchedulerUnreachable as e:
        raise fail(str(e)) from None
    rows = []
    try:
        with client.as_current(), Progress(transient=True, disable=quiet) as progress:
            # A (model, dims, memory options) combination's strategies as one task: one load of the model.
            futures = client.map(plan_group, groups_of(tasks, workers=len(client.nthreads())), pure=False)
            bar = progress.add_task(f"{len(tasks)} plan tasks", total=len(tasks))
            for future in as_completed(futures):
                rows += future.result()
                progress.advance(bar, len(future.result()))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return rows


def _print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sweep: {len(rows)} plans")
    for column in ("model", "dims", "strategy", "arena bytes", "x LOAD", "seconds", "valid"):
        table.add_column(column, justify="left" if column in ("model", "dims", "strategy") else "right")
    for row in rows:
        dims = " ".join(f"{k}={v}" for k, v in sorted(row["dims"].items()))
        if row["arena_bytes"] is None:
            table.add_row(row["model"], dims, row["strategy"], "-", "-", "-", row["error"] or "no")
            continue
        ratio = row["arena_bytes"] / row["lower_bound"] if row["lower_bound"] else 1.0
        table.add_row(
            row["model"],
            dims,
            row["strategy"],
            f"{row['arena_bytes']:,}",
            f"{ratio:.4f}",
            f"{row['seconds']:.3f}",
            "yes" if row["valid"] else "NO",
        )
    Console().print(table)
