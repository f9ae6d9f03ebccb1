"""Every failure answered as RFC 9457 ``application/problem+json``, or as a page for browsers."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import AppError, from_planning
from app.jobs import QueueFull
from app.storage import DatabaseUnavailable, one_line
from planner import PlanningError

log = logging.getLogger("memplan.app")

PROBLEM_JSON = "application/problem+json"
DATABASE_RETRY_S = 5  # Retry-After while the database is unreachable


def _wants_html(request: Request) -> bool:
    if request.url.path.startswith("/api/"):
        return False
    accept = request.headers.get("accept", "")
    return "text/html" in accept


def problem_response(request: Request, error: AppError) -> Response:
    body = {"type": "about:blank", "title": error.title, "status": error.status, "detail": error.detail}
    body["instance"] = request.url.path
    body.update(error.extra)
    if _wants_html(request):
        templates = request.app.state.templates
        return templates.TemplateResponse(
            request, "error.html", {"error": body, "page_title": error.title}, status_code=error.status
        )
    return JSONResponse(body, status_code=error.status, media_type=PROBLEM_JSON)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every failure into a problem response."""

    @app.exception_handler(AppError)
    async def _app_error(request: Request, exc: AppError) -> Response:
        return problem_response(request, exc)

    @app.exception_handler(PlanningError)
    async def _planning_error(request: Request, exc: PlanningError) -> Response:
        return problem_response(request, from_planning(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "request"
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return problem_response(request, AppError(422, "; ".join(parts), title="Invalid request"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"nothing at {request.url.path}; the API is listed at /docs"
        return problem_response(request, AppError(exc.status_code, detail))

    @app.exception_handler(QueueFull)
    async def _queue_full(request: Request, exc: QueueFull) -> Response:
        return problem_response(request, AppError(429, str(exc)))

    @app.exception_handler(DatabaseUnavailable)
    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _database_down(request: Request, exc: Exception) -> Response:
        # The connection pool checks connections before use: once the database is back, so is the service.
        log.warning("database unavailable on %s: %s", request.url.path, one_line(exc))
        detail = f"the database is unreachable right now ({one_line(exc)[:300]}); try again shortly"
        response = problem_response(request, AppError(503, detail, title="Database unavailable"))
        response.headers["Retry-After"] = str(DATABASE_RETRY_S)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return problem_response(request, AppError(500, f"unexpected {type(exc).__name__}: {exc}"))

    _ = (
        _app_error,
        _planning_error,
        _validation,
        _http,
        _queue_full,
        _database_down,
        _unexpected,
    )  # registered by the decorators
