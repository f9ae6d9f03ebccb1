"""`memplan worker ADDRESS`: a Dask worker that runs memplan's jobs, for a cluster of many machines."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import fail, user_errors

ROOT = Path(__file__).resolve().parents[2]  # the folder holding app/, runtime/ and planner/


@user_errors
def worker(
    scheduler: Annotated[str, typer.Argument(help="The Dask scheduler, tcp://host:port.")],
    data: Annotated[
        Path | None,
        typer.Option(help="The shared data folder as this machine sees it (default: the path the app gives)."),
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(help="The database as this machine reaches it (default: the URL the app gives).")
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (default: the one this machine reaches the scheduler from)."),
    ] = None,
) -> None:
    """Run jobs for the memplan services connected to SCHEDULER until interrupted (Ctrl-C).

    The worker process (kept up by a Dask nanny) runs one job at a time, at the lowest CPU priority
    once a memplan service has used the scheduler (SCHED_IDLE, else nice 19;
    MEMPLAN_WORKER_PRIORITY=normal keeps its own); start as many as there are cores to spare, on any
    machine that sees the data folder and the database.
    """
    from app.jobs import WORKER_DATA_ENV, WORKER_DATABASE_ENV

    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    if data is not None:
        env[WORKER_DATA_ENV] = str(data.resolve())
    if database_url is not None:
        env[WORKER_DATABASE_ENV] = database_url
    try:
        asyncio.run(_work(scheduler, host, env))
    except KeyboardInterrupt:
        sys.exit(130)


async def _work(scheduler: str, host: str | None, env: dict[str, str]) -> None:
    from distributed import Nanny
    from distributed.comm import connect

    try:  # one look first, so that a wrong address is one line and exit 2, not a retry loop
        comm = await connect(scheduler, timeout=5)
    except (OSError, TimeoutError, ValueError) as e:
        what = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise fail(f"cannot reach the Dask scheduler at {scheduler}: {what}") from None
    await comm.close()
    async with Nanny(scheduler, nthreads=1, host=host, dashboard_address=None, env=env) as nanny:
        typer.echo(f"memplan worker {nanny.worker_address} runs jobs for {scheduler}", err=True)
        await nanny.finished()
