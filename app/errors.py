"""The error every service raises: an HTTP status and a message a person can act on.

Services raise `AppError`; planner errors are translated by `from_planning`, so that a bad
input is always a 4xx that says what to change. `app.routes.errors` answers them as RFC 9457
``application/problem+json``, or as a page for browsers; the CLI prints the message.
"""

from __future__ import annotations

from typing import Any

from planner import InfeasibleError, PlanningError, ProblemError, UnknownStrategyError

_TITLES = {
    400: "Bad request",
    401: "Token required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    410: "Gone",
    413: "Upload too large",
    415: "Unsupported file",
    422: "Unprocessable input",
    429: "Too many jobs",
    500: "Internal error",
    503: "Not available",
}


class AppError(Exception):
    """An error with an HTTP status and a detail that tells the user what to do."""

    def __init__(self, status: int, detail: str, *, title: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or _TITLES.get(status, "Error")
        self.extra = extra


def not_found(what: str, ident: str) -> AppError:
    return AppError(404, f"no {what} with id {ident!r}; list them at /api/v1/{what}s", title=f"Unknown {what}")


def from_planning(error: PlanningError) -> AppError:
    """The planner's own message already names the field; pick the status."""
    if isinstance(error, UnknownStrategyError):
        return AppError(422, str(error), title="Unknown strategy")
    if isinstance(error, InfeasibleError):
        return AppError(422, str(error), title="Does not fit", pool=error.pool, shortfall=error.shortfall)
    if isinstance(error, ProblemError):
        return AppError(422, str(error), title="Invalid problem")
    return AppError(422, str(error))
