"""`memplan serve`: the web service, with a local Dask cluster for its jobs (in a process of its own)
unless given a scheduler."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.common import fail, user_errors


@user_errors
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    data: Annotated[
        Path | None, typer.Option(help="Data directory (default: $MEMPLAN_DATA or ./memplan-data).")
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="Dask scheduler for jobs, tcp://host:port (default: $MEMPLAN_SCHEDULER, else a local cluster)."
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="Worker processes of the local cluster (without a scheduler).")
    ] = 2,
) -> None:
    """Start the web service (browser UI at /, REST API under /api/v1, OpenAPI at /docs).

    Jobs (slow plans, runs, pipelines, training demos) run on Dask workers at the lowest CPU
    priority: on a local cluster of `--workers` processes on loopback (its scheduler in a process of
    its own, not the server's), started here and closed on exit, or on the cluster of
    `--scheduler`/MEMPLAN_SCHEDULER, whose workers are started with `memplan worker ADDRESS`.
    """
    import uvicorn

    from app.cluster import local_cluster
    from app.jobs import SchedulerUnreachable
    from app.main import Settings, create_app
    from app.storage import DatabaseUnavailable

    overrides: dict[str, Any] = {k: v for k, v in {"data_dir": data, "scheduler": scheduler}.items() if v is not None}
    settings = Settings(**overrides)
    with ExitStack() as stack:
        if settings.scheduler is None:
            settings = settings.model_copy(update={"scheduler": stack.enter_context(local_cluster(workers))})
        try:
            app = create_app(settings)
        except (SchedulerUnreachable, DatabaseUnavailable) as e:  # one line naming what failed
            raise fail(str(e)) from None
        uvicorn.run(app, host=host, port=port)
