"""The REST API under /api/v1: one router per resource."""

from __future__ import annotations

from fastapi import APIRouter

from app.api import examples, jobs, models, pipelines, plans, problems, training

PREFIX = "/api/v1"


def router() -> APIRouter:
    api = APIRouter(prefix=PREFIX)
    for module in (models, plans, problems, jobs, examples, pipelines, training):
        api.include_router(module.router)
    return api
