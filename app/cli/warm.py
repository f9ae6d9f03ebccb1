"""`memplan warm`: compile numba's loops once and leave them in its on-disk cache."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from app.cli.common import JsonFlag, fail, user_errors
from app.services.warm import DEFAULT_BLOCKS
from planner.timeline_jit import FROM_BLOCKS

FLAGS = {"blocks": "--blocks", "strategies": "--strategy", "models": "--model"}  # the service's parameters


@user_errors
def warm(
    blocks: Annotated[
        int,
        typer.Option(
            help=f"Buffers of each generated problem ({FROM_BLOCKS:,} and up, where the compiled loop places)."
        ),
    ] = DEFAULT_BLOCKS,
    strategy: Annotated[
        list[str] | None,
        typer.Option("--strategy", "-s", help="Strategy to plan with (repeatable; default every fast one)."),
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option(help="mlp or cnn (a training demo step), or a gallery example (repeatable; default all of them)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Plan generated problems, run models once and then tiny graphs of every kernel with compiled
    loops, so that numba caches those loops on disk (in NUMBA_CACHE_DIR when set): later processes
    load them instead of compiling for seconds."""
    from app.services.warm import WarmError
    from app.services.warm import warm as warm_cache

    try:
        report = warm_cache(blocks=blocks, strategies=strategy, models=model, progress=None if as_json else _say)
    except WarmError as e:
        raise fail(f"{FLAGS[e.parameter]} {e.value}: {e.reason}") from None
    if as_json:
        typer.echo(json.dumps(report, indent=1))
    elif not report["compiled_loops"]:
        typer.echo("compiled loops are off (numba not installed, or MEMPLAN_JIT=0): nothing to warm")
    else:
        seconds = sum(step["seconds"] for step in report["steps"])
        typer.echo(
            f"{report['loops']} compiled loops used in {seconds:.1f} s: {report['compiled']} compiled, "
            f"{report['loaded']} loaded from the cache ({', '.join(report['cache']) or 'none'})"
        )
        if report["missed"]:
            typer.echo(f"entry loops not reached: {', '.join(report['missed'])}")


def _say(what: str) -> None:
    typer.echo(what)
