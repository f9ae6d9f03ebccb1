"""The REST API under /api/v1: one router per resource."""

from __future__ import annotations

from fastapi import APIRouter

from app.api import examples, jobs, models, plans, problems

PREFIX = "/api/v1"


def router() -> APIRouter:
    api = APIRouter(prefix=PREFIX)
    for module in (models, plans, problems, jobs, examples):
        api.include_router(module.router)
    return api
