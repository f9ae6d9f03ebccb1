"""`memplan bench`: plan every problem of a folder with every strategy, as a markdown table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import strategy_help, user_errors


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
    from app.services.benchmark import bench_folder

    markdown = bench_folder(folder, output, strategy=strategy, synthetic=synthetic, time_limit=time_limit)
    typer.echo(markdown)
    typer.echo(f"wrote {output}")
