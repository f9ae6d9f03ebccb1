"""The memplan web service: `create_app(settings)` builds the FastAPI application.

``memplan serve`` runs ``uvicorn.run(create_app(Settings(...)))``; tests build their own
app on a temporary data directory. Pages are at /, the REST API under /api/v1, the
OpenAPI description at /docs. Nothing is fetched from the internet: plotly.js is served
from the installed plotly package.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app import routes
from app.jobs import Job, JobManager
from app.routes import errors
from app.routes.rendering import make_templates
from app.security import AccessControl
from app.services.paths import STATIC_DIR, plotly_js_path
from app.settings import Settings, activate
from app.storage import Storage

__all__ = ["Settings", "create_app"]


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    activate(settings.limits())
    # Jobs left queued or running died with this process (so are marked interrupted at start-up) only with
    # the default SQLite file and no scheduler address: otherwise other processes' workers may be running them.
    owns_jobs = settings.database_url is None and not getattr(settings, "scheduler", None)
    storage = Storage(settings.data_dir, settings.database_url, owns_jobs=owns_jobs)

    def remember(job: Job) -> None:
        storage.save_job({**job.to_json(), "created": job.created, "finished": job.finished})

    jobs = JobManager(settings.max_jobs, settings.keep_jobs, max_queued=settings.max_queued_jobs, on_change=remember)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        jobs.shutdown()
        storage.close()

    app = FastAPI(
        title="memplan",
        summary="Static memory planning for neural networks",
        description="Upload an ONNX model or a buffer problem, plan tensor offsets in one arena with several strategies, "
        "compare the plans, and run the model inside its plan.",
        version="0.1.0",
        lifespan=lifespan,
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
