"""`memplan train-plan` (a training step's memory by ONE's categories) and `memplan train` (the demo)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from app.cli import EXIT_INFEASIBLE, app, fail, user_errors


@app.command("train-plan")
@user_errors
def train_plan(
    model: Annotated[Path, typer.Argument(help="A forward ONNX model.")],
    trainable: Annotated[
        str | None, typer.Option(help="Comma-separated initializers to train (default: every float initializer).")
    ] = None,
    loss: Annotated[str, typer.Option(help="Loss memplan appends: cross_entropy or mse.")] = "cross_entropy",
    optimizer: Annotated[str, typer.Option(help="sgd (with momentum), adam, or none (gradients only).")] = "sgd",
    dims: Annotated[str | None, typer.Option(help="Symbolic dims, e.g. batch=32.")] = None,
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="Strategy for every arena.")] = "greedy_by_size",
    recompute: Annotated[
        bool, typer.Option("--recompute/--keep", help="Recompute batch norm's Conv input in backward, or keep it.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the capacities as JSON.")] = False,
) -> None:
    """Plan one training step (forward, loss, backward, update) per category and unified; print ONE-style capacities."""
    from app.inputs import parse_dims
    from runtime.training import build_training_step, plan_categories, training_problem

    names = [n.strip() for n in trainable.split(",") if n.strip()] if trainable is not None else None
    step = build_training_step(model, names, loss=loss, optimizer=optimizer, dims=parse_dims(dims), recompute=recompute)
    plans = plan_categories(training_problem(step), strategy)
    if as_json:
        report = {
            "model": str(model),
            "strategy": strategy,
            "capacities": plans.capacities,
            "per_category_total": plans.per_category_total,
            "unified": plans.unified.arena_bytes,
            "ratio": round(plans.ratio, 4),
            "steps": plans.problem.steps,
        }
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(plans.one_style())


@app.command("train")
@user_errors
def train(
    model: Annotated[str, typer.Option(help="Network of the demo: mlp or cnn.")] = "mlp",
    steps: Annotated[int, typer.Option(help="Training steps.")] = 200,
    batch: Annotated[int, typer.Option(help="Images per step.")] = 32,
    optimizer: Annotated[str, typer.Option(help="sgd or adam.")] = "adam",
    lr: Annotated[float | None, typer.Option(help="Learning rate (default 0.01 for adam, 0.05 for sgd).")] = None,
    every: Annotated[int, typer.Option(help="Print the loss every this many steps.")] = 20,
) -> None:
    """Train an MLP or a small CNN on 8x8 digits inside one arena and print the loss falling."""
    from runtime.training import NonFiniteLossError
    from runtime.training.demo import train_demo

    def show(i: int, value: float) -> None:
        if i % max(every, 1) == 0 or i == steps - 1:
            typer.echo(f"step {i + 1:5d}  loss {value:.4f}")

    try:
        result = train_demo(model, steps, batch, optimizer, lr, on_step=show)
    except NonFiniteLossError as e:
        raise fail(str(e), EXIT_INFEASIBLE) from None
    assert result.plans is not None
    typer.echo(f"data: {result.source}")
    typer.echo(
        f"arena: {result.plans.unified.arena_bytes} bytes unified, {result.plans.per_category_total} per category"
    )
    typer.echo(f"loss: {result.losses[0]:.4f} -> {result.losses[-1]:.4f}; training accuracy {result.accuracy:.3f}")
