"""Dependencies shared by the routers, as `Annotated` aliases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.templating import Jinja2Templates

from app.errors import not_found
from app.jobs import Job, JobService
from app.settings import Settings
from app.storage import ModelRecord, PlanRecord, Storage


def _storage(request: Request) -> Storage:
    return request.app.state.storage


def _jobs(request: Request) -> JobService:
    return request.app.state.jobs


def _settings(request: Request) -> Settings:
    return request.app.state.settings


StorageDep = Annotated[Storage, Depends(_storage)]
JobsDep = Annotated[JobService, Depends(_jobs)]
SettingsDep = Annotated[Settings, Depends(_settings)]


def _model(model_id: str, storage: StorageDep) -> ModelRecord:
    record = storage.get_model(model_id)
    if record is None:
        raise not_found("model", model_id)
    return record


def _plan(plan_id: str, storage: StorageDep) -> PlanRecord:
    record = storage.get_plan(plan_id)
    if record is None:
        raise not_found("plan", plan_id)
    return record


def _plan_head(plan_id: str, storage: StorageDep) -> PlanRecord:
    """A plan without its Plan JSON (`plan` is {}), for a page that reads the problem's plans anyway."""
    record = storage.get_plan(plan_id, placements=False)
    if record is None:
        raise not_found("plan", plan_id)
    return record


def _job(job_id: str, jobs: JobsDep) -> Job:
    job = jobs.get(job_id)  # from the database: any app process's job
    if job is None:
        raise not_found("job", job_id)
    return job


ModelDep = Annotated[ModelRecord, Depends(_model)]
PlanDep = Annotated[PlanRecord, Depends(_plan)]
PlanHeadDep = Annotated[PlanRecord, Depends(_plan_head)]
JobDep = Annotated[Job, Depends(_job)]


def _templates(request: Request) -> Jinja2Templates:
    return request.app.state.templates


TemplatesDep = Annotated[Jinja2Templates, Depends(_templates)]


@dataclass(frozen=True)
class Paging:
    """`?limit=&offset=` of a list, newest first (the service refuses a limit out of range, naming it)."""

    limit: int
    offset: int


def _paging(
    limit: Annotated[int, Query(description="items per page, 1 to 200")] = 20,
    offset: Annotated[int, Query(description="items to skip, from the newest")] = 0,
) -> Paging:
    return Paging(limit, offset)


PagingDep = Annotated[Paging, Depends(_paging)]
