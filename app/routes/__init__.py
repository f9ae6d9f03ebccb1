"""The one place that assembles the routers: the REST API under /api/v1, one module per resource
(`app/routes/api/`), and the pages, one module per page type (`app/routes/pages/`).

Nothing else imports a route module; routes import services, never each other.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from app.routes.api import examples, jobs, models, notes, pipelines, plans, problems, sweeps, training
from app.routes.pages import docs, home, signin
from app.routes.pages import jobs as job_pages
from app.routes.pages import models as model_pages
from app.routes.pages import pipelines as pipeline_pages
from app.routes.pages import plans as plan_pages
from app.routes.pages import sweeps as sweep_pages
from app.routes.pages import training as training_pages

API_PREFIX = "/api/v1"
API_MODULES = (models, plans, notes, problems, jobs, examples, pipelines, training, sweeps)
PAGE_MODULES = (home, model_pages, plan_pages, job_pages, pipeline_pages, training_pages, sweep_pages, signin, docs)


def include_routers(app: FastAPI) -> None:
    api = APIRouter(prefix=API_PREFIX)
    for module in API_MODULES:
        api.include_router(module.router)
    app.include_router(api)
    for module in PAGE_MODULES:
        app.include_router(module.router)
