"""Dependencies shared by the routers, as `Annotated` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.templating import Jinja2Templates

from app.errors import not_found
from app.jobs import FINISHED, Job, JobManager
from app.settings import Settings
from app.storage import ModelRecord, PlanRecord, Storage


def _storage(request: Request) -> Storage:
    return request.app.state.storage


def _jobs(request: Request) -> JobManager:
    return request.app.state.jobs


def _settings(request: Request) -> Settings:
    return request.app.state.settings


StorageDep = Annotated[Storage, Depends(_storage)]
JobsDep = Annotated[JobManager, Depends(_jobs)]
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


def _job(job_id: str, jobs: JobsDep, storage: StorageDep) -> Job:
    job = jobs.get(job_id)
    if job is None:
        # Forgotten by this process (an older one ran it, or it was dropped): what storage recorded.
        stored = storage.get_job(job_id)
        if stored is None or stored["state"] not in FINISHED:
            raise not_found("job", job_id)
        job = Job.restored(stored)
    return job


ModelDep = Annotated[ModelRecord, Depends(_model)]
PlanDep = Annotated[PlanRecord, Depends(_plan)]
JobDep = Annotated[Job, Depends(_job)]


def _templates(request: Request) -> Jinja2Templates:
    return request.app.state.templates


TemplatesDep = Annotated[Jinja2Templates, Depends(_templates)]
