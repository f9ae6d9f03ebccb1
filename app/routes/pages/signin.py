"""Signing in from the browser: the form that sets the write-token cookie, and signing out.

With ``MEMPLAN_TOKEN`` set, writes need the token (`app.routes.security`). A browser presents it once
at ``POST /token``, which sets the ``memplan_token`` cookie (HttpOnly, SameSite=Strict, Path=/,
Secure over https); ``POST /token/signout`` clears it. Both answer with a redirect to ``next``,
a path on this site: anything else (another host, a scheme, ``//``) is refused, so the sign-in
page cannot be turned into an open redirect. Wrong tokens are rate limited per client address
(`app.routes.security.FailedSignIns`).
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from app.errors import AppError
from app.routes.deps import SettingsDep
from app.routes.errors import problem_response
from app.routes.rendering import render, wants_json
from app.routes.security import (
    COOKIE,
    COOKIE_MAX_AGE_S,
    FAILURE_WINDOW_S,
    MAX_FAILURES,
    access,
    failed_sign_ins,
    safe_next,
    token_matches,
)

router = APIRouter(include_in_schema=False)


def _checked_next(value: str) -> str:
    checked = safe_next(value)
    if checked is None:
        raise AppError(
            400,
            f"next: {value[:100]!r} is not a path on this site; accepted: a path starting with a single '/', "
            "such as '/models/<id>'",
            title="Refused redirect",
        )
    return checked


@router.get("/token")
def signin_page(request: Request, back: Annotated[str, Query(alias="next")] = "/") -> Response:
    """The sign-in form (or, with no token configured or in read-only mode, why none is needed)."""
    return _signin_form(request, _checked_next(back), error=None)


@router.post("/token")
def sign_in(
    request: Request,
    settings: SettingsDep,
    token: Annotated[str, Form()] = "",
    back: Annotated[str, Form(alias="next")] = "/",
) -> Response:
    """Check the token in constant time; if it matches, set the cookie and go back to `next`.

    A wrong (or missing) token is a 401 that sets no cookie: the form again with the reason
    for a browser, problem+json for anything else.
    """
    back = _checked_next(back)
    if not settings.token:
        return RedirectResponse(back, status_code=303)  # nothing to sign in to: every write is open
    client, now = request.client.host if request.client else "?", time.monotonic()
    failures = failed_sign_ins(request)
    wait = failures.wait(client, now)
    if wait > 0:
        seconds = max(1, int(wait + 0.999))
        detail = (
            f"too many wrong tokens from this address ({MAX_FAILURES} in {FAILURE_WINDOW_S:.0f} s); "
            f"try again in {seconds} s"
        )
        response = problem_response(request, AppError(429, detail, title="Too many sign-in attempts"))
        response.headers["Retry-After"] = str(seconds)
        return response
    if not token_matches(settings.token, token.strip()):
        failures.record(client, now)
        detail = "token: that is not this service's token (MEMPLAN_TOKEN); no cookie was set"
        if wants_json(request) or "text/html" not in request.headers.get("accept", ""):
            raise AppError(401, detail, title="Wrong token")
        return _signin_form(request, back, error=detail, status=401)
    response = RedirectResponse(back, status_code=303)
    response.set_cookie(
        COOKIE,
        settings.token,
        max_age=COOKIE_MAX_AGE_S,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/token/signout")
def sign_out(request: Request, back: Annotated[str, Form(alias="next")] = "/") -> Response:
    """Clear the cookie (with the attributes it was set with, so the browser drops that one)."""
    response = RedirectResponse(_checked_next(back), status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response


def _signin_form(request: Request, back: str, *, error: str | None, status: int = 200) -> Response:
    current = access(request)
    context = {
        "page_title": "sign in",
        "next": back,
        "token_required": current.token_required,
        "read_only": current.read_only,
        "signed_in": current.signed_in,
        "error": error,
    }
    response = render(request, "token.html", context)
    response.status_code = status
    return response
