"""`memplan train-plan`: a training step's memory by ONE's tensor categories, and unified."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import (
    AlignmentOption,
    DimsOption,
    PreparedWeightsSwitch,
    ShapeOption,
    WorkspaceSwitch,
    step_memory_options,
    user_errors,
)


@user_errors
def train_plan(
    model: Annotated[Path, typer.Argument(help="A forward ONNX model.")],
    trainable: Annotated[
        str | None, typer.Option(help="Comma-separated initializers to train (default: every float initializer).")
    ] = None,
    loss: Annotated[str, typer.Option(help="Loss memplan appends: cross_entropy or mse.")] = "cross_entropy",
    optimizer: Annotated[str, typer.Option(help="sgd (with momentum), adam, or none (gradients only).")] = "sgd",
    dims: DimsOption = None,
    shape: ShapeOption = None,
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="Strategy for every arena.")] = "greedy_by_size",
    recompute: Annotated[
        bool, typer.Option("--recompute/--keep", help="Recompute batch norm's Conv input in backward, or keep it.")
    ] = True,
    alignment: AlignmentOption = None,
    workspace: WorkspaceSwitch = "on",
    prepared_weights: PreparedWeightsSwitch = "on",
    remat: Annotated[
        str,
        typer.Option(
            "--remat",
            help="Recompute forward tensors for backward, chosen by the placed arena: off, auto (smallest arena "
            "within --remat-overhead), or a budget in bytes (20MB) or as a fraction of the arena without it (0.5). "
            "Not off: the search also decides what batch norm's backward recomputes (--recompute/--keep is its).",
        ),
    ] = "off",
    remat_overhead: Annotated[
        str, typer.Option("--remat-overhead", help="Extra FLOPs recomputation may add, as a fraction of the step's.")
    ] = "0.2",
    as_json: Annotated[bool, typer.Option("--json", help="Print the capacities as JSON.")] = False,
) -> None:
    """Plan one training step (forward, loss, backward, update) per category and unified; print ONE-style capacities.

    Its memory switches are --alignment, --workspace and --prepared-weights (everything else lives in the arena)."""
    from app.services.inputs import parse_dims, parse_shapes
    from runtime.training import build_training_step, plan_categories, training_problem
    from runtime.training.remat_spec import parse_overhead, parse_remat, rematerialized

    spec, overhead = parse_remat(remat, "--remat"), parse_overhead(remat_overhead, "--remat-overhead")
    memory = step_memory_options(workspace=workspace, alignment=alignment, prepared_weights=prepared_weights)
    names = [n.strip() for n in trainable.split(",") if n.strip()] if trainable is not None else None
    step = build_training_step(
        model,
        names,
        loss=loss,
        optimizer=optimizer,
        dims=parse_dims(dims),
        shapes=parse_shapes(shape),
        recompute=recompute and not spec.on,
    )
    found = rematerialized(step, spec, overhead, strategy=strategy, options=memory)
    if found is not None and found.step is not None:
        step = found.step
    plans = plan_categories(training_problem(step, memory), strategy)
    options = {
        "alignment": plans.problem.alignment,
        "workspace": memory.workspace,
        "prepared_weights": memory.prepared_weights,
    }
    if as_json:
        report = {
            "model": str(model),
            "strategy": strategy,
            "options": options,
            "capacities": plans.capacities,
            "per_category_total": plans.per_category_total,
            "unified": plans.unified.arena_bytes,
            "ratio": round(plans.ratio, 4),
            "steps": plans.problem.steps,
        }
        if found is not None:
            report["remat"] = found.report()
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(plans.one_style())
        typer.echo(
            f"# memory options: alignment {options['alignment']} bytes, workspace {workspace}, "
            f"prepared weights {prepared_weights}"
        )
        if found is not None:
            typer.echo(remat_line(found.report()))


def remat_line(r: dict) -> str:
    """One line on what recomputation chose (the `remat` fields of --json)."""
    met = "met" if r["budget_met"] else "NOT met (closest point)"
    return (
        f"# remat: {len(r['recomputed'])} tensors recomputed, +{100 * r['extra_flops']:.1f}% FLOPs; arena "
        f"{r['arena_bytes']} bytes (without: {r['arena_bytes_without']}), activations {r['activation_bytes']} "
        f"(without: {r['activation_bytes_without']}); budget {met}"
    )
