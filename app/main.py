"""The memplan web service: `create_app(settings)` builds the FastAPI application.

``memplan serve`` runs ``uvicorn.run(create_app(Settings(...)))``; tests build their own
app on a temporary data directory. Pages are at /, the REST API under /api/v1, the
OpenAPI description at /docs. Nothing is fetched from the internet: plotly.js is served
from the installed plotly package. Jobs run on the Dask cluster at `settings.scheduler`
(`memplan serve` starts a local one when none is given): the app submits and reads them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app import routes
from app.db import public_url
from app.jobs import JobEnv, JobService, connect
from app.routes import errors
from app.routes.rendering import make_templates
from app.routes.security import AccessControl
from app.services.paths import STATIC_DIR, plotly_js_path
from app.settings import Settings, activate
from app.storage import Storage

__all__ = ["Settings", "create_app"]


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    activate(settings.limits())
    if settings.scheduler is None:
        raise ValueError(
            "no Dask scheduler for jobs: set MEMPLAN_SCHEDULER=tcp://host:port, or start the service with "
            "`memplan serve`, which starts a local cluster"
        )
    # owns_jobs=False: jobs run on Dask workers and outlive this process; opening storage leaves them be.
    storage = Storage(settings.data_dir, settings.database_url, owns_jobs=False)
    env = JobEnv(
        data_dir=str(Path(settings.data_dir).resolve()),
        # None: the data folder's SQLite; else the URL without its password (workers bring their own)
        database_url=None if storage.db_path is not None else public_url(storage.url),
        limits=settings.limits(),
    )
    try:
        client = connect(settings.scheduler)
    except OSError:
        storage.close()
        raise
    jobs = JobService(client, storage, env, max_queued=settings.max_queued_jobs)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(jobs.close)  # this process's Client only: the cluster and its jobs go on
        storage.close()

    app = FastAPI(
        title="memplan",
        summary="Static memory planning for neural networks",
        description="Upload an ONNX model or a buffer problem, plan tensor offsets in one arena with several strategies, "
        "compare the plans, and run the model inside its plan.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # app.routes.pages.docs serves Swagger UI from the installed package, not a CDN
    )
    app.state.settings = settings
    app.state.storage = storage
    app.state.jobs = jobs
    app.state.templates = make_templates()
    errors.install(app)
    app.add_middleware(AccessControl, token=settings.token, read_only=settings.read_only)

    plotly_js = plotly_js_path()

    @app.get("/static/vendor/plotly.min.js", include_in_schema=False)
    def vendored_plotly() -> FileResponse:
        return FileResponse(plotly_js, media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"})

    app.mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static")
    routes.include_routers(app)
    log = logging.getLogger("memplan.app")
    log.info("memplan data in %s", settings.data_dir)
    if any(storage.recovered.values()):
        log.warning("recovered after an unclean stop: %s", storage.recovered)
    return app
