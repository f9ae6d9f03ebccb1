"""`memplan conformance`: memplan's backend through onnx's own backend test suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import EXIT_INFEASIBLE, user_errors


@user_errors
def conformance(
    full: Annotated[
        bool, typer.Option("--full/--fast", help="Every node test and all 9 light models, or the quick CI sample.")
    ] = True,
    op: Annotated[list[str] | None, typer.Option(help="Only the node tests of this op (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Markdown file whose onnx-backend section to write; the rest of it stays."),
    ] = Path("docs/CONFORMANCE.md"),
) -> None:
    """Run memplan's backend through onnx's own backend test suite; write pass/fail/skip by op."""
    from rich.progress import Progress

    from runtime.conformance import run_conformance

    with Progress(transient=True, disable=as_json) as progress:
        task = progress.add_task("conformance", total=None)

        def show(test: str, status: str) -> None:
            progress.update(task, description=f"{status:7} {test}")

        report = run_conformance(op, None, fast=not full and not op, progress=show)
    report.write_markdown(output)
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
