"""`memplan run`: execute a model inside its planned arena and report memory and time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

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
    user_errors,
)


@user_errors
def run(
    model: Annotated[Path, typer.Argument(help="An ONNX .onnx or a TFLite .tflite model.")],
    dims: DimsOption = None,
    shape: ShapeOption = None,
    strategy: Annotated[
        str, typer.Option("--strategy", "-s", help="The strategy whose plan to run in.")
    ] = "greedy_by_size",
    inputs: Annotated[
        Path | None, typer.Option(help="An .npz of inputs by name (default: seeded random inputs).")
    ] = None,
    save_outputs: Annotated[Path | None, typer.Option("--save-outputs", help="Write the outputs to this .npz.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    repeat: Annotated[
        int,
        typer.Option(
            help="Timed runs (without tracing) after one traced run that measures bytes beside the arena; "
            "seconds is their median."
        ),
    ] = 3,
    io: IoOption = "arena",
    workspace: WorkspaceSwitch = "on",
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
    prepared_weights: PreparedWeightsSwitch = "on",
    tile: TileOption = "off",
    tile_overhead: TileOverheadOption = 0.2,
    tile_slack: TileSlackOption = 0.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print arena_bytes, outside_arena_bytes, seconds, outputs as JSON.")
    ] = False,
) -> None:
    """Execute a model inside its planned arena and report memory and time."""
    from app.services.execute import run_model
    from app.services.inputs import parse_dims, parse_shapes

    if repeat < 1:
        raise fail(f"--repeat must be >= 1, got {repeat}")
    report = run_model(
        model,
        dims=parse_dims(dims),
        shapes=parse_shapes(shape),
        strategy=strategy,
        inputs=inputs,
        save_outputs=save_outputs,
        seed=seed,
        repeat=repeat,
        memory=memory_options(
            io=io,
            workspace=workspace,
            alignment=None,
            inplace=inplace,
            concat_inplace=concat_inplace,
            fuse=fuse,
            prepared_weights=prepared_weights,
        ),
        canary=canary,
        verify=verify,
        reorder=reorder,
        tile=tile,
        tile_overhead=tile_overhead,
        tile_slack=tile_slack,
    )
    if as_json:
        typer.echo(json.dumps(report, indent=2, allow_nan=False))  # strict JSON: the verdict holds finite floats
    else:
        ratio = report["outside_arena_bytes"] / report["arena_bytes"] if report["arena_bytes"] else 0.0
        typer.echo(
            f"{model.name}: {report['strategy']} arena {report['arena_bytes']:,} bytes; outside it {report['outside_arena_bytes']:,} bytes ({ratio:.2%}, one traced run)"
        )
        typer.echo(f"median of {repeat} timed run(s), without tracing: {report['seconds'] * 1000:.2f} ms")
        typer.echo(
            f"parameters beside the arena {report['parameter_bytes']:,} bytes (prepared weights {prepared_weights})"
        )
        if report["state_bytes"]:
            typer.echo(f"of which states {report['state_bytes']:,} bytes (variable tensors, kept from run to run)")
        typer.echo(
            f"in place {inplace}, concat in place {concat_inplace}; "
            f"with both off this strategy needs {report['arena_bytes_without_aliases']:,} bytes"
        )
        if "reorder" in report:
            typer.echo(report["reorder"]["description"])
        if "tiling_note" in report:
            typer.echo(f"tiling: {report['tiling_note']}")
        for name, sizes in report["outputs"].items():
            typer.echo(f"  output {name}: {sizes}")
        if "verification" in report:
            v = report["verification"]
            word = {True: "PASSED", False: "FAILED"}.get(v["passed"], "UNDECIDED")
            typer.echo(f"verification against {v['oracle']}: {word} ({v.get('verdict', '')}: {v.get('check', '')})")
            for row in v.get("outputs", []):
                if row.get("evidence"):
                    typer.echo(f"  {row['name']} is ill-conditioned: {row['evidence']}")
    if verify and not report["verification"]["passed"]:
        raise typer.Exit(EXIT_INFEASIBLE)
