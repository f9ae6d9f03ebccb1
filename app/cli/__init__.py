"""The `memplan` command line: one module per command, registered here under its name.

Options the commands share (strategy, dims, the memory switches) and the one-line error
handling are defined once, in `app.cli.common`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import typer

from app.cli import bench, conformance, plan, run, serve, sweep, train, train_plan, warm, worker

app = typer.Typer(
    name="memplan",
    help="Static memory planning for neural networks: plan, compare, run and serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMANDS: dict[str, Callable[..., Any]] = {
    "plan": plan.plan,
    "run": run.run,
    "bench": bench.bench,
    "conformance": conformance.conformance,
    "train-plan": train_plan.train_plan,
    "train": train.train,
    "serve": serve.serve,
    "worker": worker.worker,
    "sweep": sweep.sweep,
    "warm": warm.warm,
}
for _name, _command in COMMANDS.items():
    app.command(_name)(_command)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
