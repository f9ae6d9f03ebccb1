"""`memplan train`: the demo that trains an MLP or a small CNN inside one arena."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import (
    EXIT_INFEASIBLE,
    AlignmentOption,
    PreparedWeightsSwitch,
    WorkspaceSwitch,
    fail,
    step_memory_options,
    user_errors,
)


@user_errors
def train(
    model: Annotated[str, typer.Option(help="Network of the demo: mlp or cnn.")] = "mlp",
    steps: Annotated[int, typer.Option(help="Training steps.")] = 200,
    batch: Annotated[int, typer.Option(help="Images per step.")] = 32,
    optimizer: Annotated[str, typer.Option(help="sgd or adam.")] = "adam",
    lr: Annotated[float | None, typer.Option(help="Learning rate (default 0.01 for adam, 0.05 for sgd).")] = None,
    every: Annotated[int, typer.Option(help="Print the loss every this many steps.")] = 20,
    remat: Annotated[
        str,
        typer.Option(
            "--remat",
            help="Recompute forward tensors for backward, chosen by the placed arena: off, auto, or a budget "
            "in bytes (20MB) or as a fraction of the arena without it (0.5).",
        ),
    ] = "off",
    remat_overhead: Annotated[
        str, typer.Option("--remat-overhead", help="Extra FLOPs recomputation may add, as a fraction of the step's.")
    ] = "0.2",
    alignment: AlignmentOption = None,
    workspace: WorkspaceSwitch = "on",
    prepared_weights: PreparedWeightsSwitch = "on",
) -> None:
    """Train an MLP or a small CNN on 8x8 digits inside one arena and print the loss falling.

    Its memory switches are --alignment, --workspace and --prepared-weights (everything else lives in the arena)."""
    from app.cli.train_plan import remat_line
    from runtime.training import NonFiniteLossError
    from runtime.training.demo import train_demo
    from runtime.training.remat_spec import parse_overhead, parse_remat

    spec, overhead = parse_remat(remat, "--remat"), parse_overhead(remat_overhead, "--remat-overhead")
    memory = step_memory_options(workspace=workspace, alignment=alignment, prepared_weights=prepared_weights)

    def show(i: int, value: float) -> None:
        if i % max(every, 1) == 0 or i == steps - 1:
            typer.echo(f"step {i + 1:5d}  loss {value:.4f}")

    try:
        result = train_demo(
            model, steps, batch, optimizer, lr, on_step=show, options=memory, remat=str(spec), remat_overhead=overhead
        )
    except NonFiniteLossError as e:
        raise fail(str(e), EXIT_INFEASIBLE) from None
    assert result.plans is not None
    typer.echo(f"data: {result.source}")
    typer.echo(
        f"arena: {result.plans.unified.arena_bytes} bytes unified, {result.plans.per_category_total} per category"
    )
    typer.echo(
        f"memory options: alignment {result.plans.problem.alignment} bytes, workspace {workspace}, "
        f"prepared weights {prepared_weights}; kernel scratch {result.plans.capacities['disposable']} bytes"
    )
    typer.echo(f"loss: {result.losses[0]:.4f} -> {result.losses[-1]:.4f}; training accuracy {result.accuracy:.3f}")
    if result.remat is not None:
        typer.echo(remat_line(result.remat).lstrip("# "))
