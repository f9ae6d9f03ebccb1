"""Signing in from the browser: the page that sets the write-token cookie, and what pages may offer.

With ``MEMPLAN_TOKEN`` set, writes need the token (`app.security`). A browser presents it once
at ``POST /token``, which sets the ``memplan_token`` cookie (HttpOnly, SameSite=Strict, Path=/,
Secure over https); ``POST /token/signout`` clears it. Both answer with a redirect to ``next``,
a path on this site: anything else (another host, a scheme, ``//``) is refused, so the sign-in
page cannot be turned into an open redirect.

Wrong tokens are rate limited per client address: after `MAX_FAILURES` within
`FAILURE_WINDOW_S` seconds, sign-in answers 429 with Retry-After until the oldest failure
ages out (guessing the token from a browser form stays slow).

`access(request)` tells templates whether this request may write, so pages show a sign-in
notice (or say the service is read-only) instead of controls whose posts would be refused.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from app.deps import SettingsDep
from app.errors import AppError, problem_response
from app.pages import render, wants_json
from app.security import COOKIE, token_matches

router = APIRouter(include_in_schema=False)

# How long a browser stays signed in; signing in again renews it.
COOKIE_MAX_AGE_S = 7 * 24 * 3600
MAX_FAILURES = 10
FAILURE_WINDOW_S = 60.0


@dataclass
class FailedSignIns:
    """Recent wrong tokens per client address (in this process), for the rate limit."""

    times: dict[str, deque[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait(self, client: str, now: float) -> float:
        """Seconds until `client` may try again (0: now)."""
        with self.lock:
            recent = self._recent(client, now)
            if not recent:
                del self.times[client]  # forget addresses that have stopped failing
            if len(recent) < MAX_FAILURES:
                return 0.0
            return recent[0] + FAILURE_WINDOW_S - now

    def record(self, client: str, now: float) -> None:
        with self.lock:
            self._recent(client, now).append(now)

    def _recent(self, client: str, now: float) -> deque[float]:
        """The client's failures within the window (older ones dropped)."""
        recent = self.times.setdefault(client, deque())
        while recent and recent[0] <= now - FAILURE_WINDOW_S:
            recent.popleft()
        return recent


def _failures(request: Request) -> FailedSignIns:
    state = request.app.state
    if not hasattr(state, "failed_sign_ins"):
        state.failed_sign_ins = FailedSignIns()
    return state.failed_sign_ins  # type: ignore[no-any-return]


NEXT_MAX_CHARS = 2000


@dataclass(frozen=True)
class Access:
    """What the request may do. `writes` is the one a template needs to show or hide controls."""

    token_required: bool
    read_only: bool
    signed_in: bool
    signin_url: str

    @property
    def writes(self) -> bool:
        return not self.read_only and (self.signed_in or not self.token_required)


def access(request: Any) -> Access:
    """The request's access, for templates (a Jinja global); computed once per request.

    The cookie alone decides `signed_in`: pages are what a browser sees, and a browser has
    only the cookie. The token is compared in constant time.
    """
    cached = getattr(request.state, "memplan_access", None)
    if cached is not None:
        return cached
    settings = request.app.state.settings
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    result = Access(
        token_required=bool(settings.token),
        read_only=settings.read_only,
        signed_in=token_matches(settings.token, request.cookies.get(COOKIE)),
        signin_url=signin_url(here),
    )
    request.state.memplan_access = result
    return result


def signin_url(back: str) -> str:
    """The sign-in page, returning to `back` afterwards (the sign-in page itself returns home)."""
    if safe_next(back) is None or urlsplit(back).path in ("/token", "/token/signout"):
        back = "/"
    return "/token?" + urlencode({"next": back})


def safe_next(value: str) -> str | None:
    """`value` when it is a path on this site ('/models/abc?x=1'); None for anything a browser
    could follow elsewhere: another host ('//evil', '/\\\\evil'), a scheme ('https:', 'javascript:'),
    control characters, or an overlong value."""
    if not value.startswith("/") or value.startswith("//") or len(value) > NEXT_MAX_CHARS:
        return None
    if "\\" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return None
    return value


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
    failures = _failures(request)
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
