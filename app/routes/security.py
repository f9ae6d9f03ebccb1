"""Access control: an optional write token, and a read-only mode for review links.

Reads (GET, HEAD, OPTIONS) are always open. With `Settings.token` set, a write needs the
token as ``Authorization: Bearer <token>``, an ``X-Memplan-Token`` header, or a
``memplan_token`` cookie (so pages can post once the cookie is set). With
`Settings.read_only`, every write is refused whatever the token: a review link can be
shared without letting anyone change what is stored.

The sign-in endpoints (`SIGNIN_PATHS`, see `app.routes.pages.signin`) are the one exception to the token
check: posting the token is how a browser presents it. Read-only mode refuses them too. A
refused browser form post (a navigation that accepts HTML, outside /api) gets the error page
with a sign-in link instead of problem+json.

It is plain ASGI middleware so that streamed uploads are refused before a byte is read.
"""

from __future__ import annotations

import hmac
import threading
from collections import deque
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import AppError
from app.routes.errors import problem_response

READS = frozenset({"GET", "HEAD", "OPTIONS"})
COOKIE = "memplan_token"
# Posting the token here is how one presents it; signing out only clears a cookie.
SIGNIN_PATHS = frozenset({"/token", "/token/signout"})
SIGNIN_MAX_BYTES = 16 * 1024


def token_matches(token: str | None, presented: str | None) -> bool:
    """Whether `presented` equals the configured `token`, compared in constant time.

    False when no token is configured or none was presented: callers decide what an
    unconfigured token means (everything is open).
    """
    if not token or not presented:
        return False
    return hmac.compare_digest(presented.encode(), token.encode())


class AccessControl:
    """Refuse writes without the token (401) or in read-only mode (403)."""

    def __init__(self, app: ASGIApp, *, token: str | None, read_only: bool) -> None:
        self.app = app
        self.token = token or None
        self.read_only = read_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in READS:
            await self.app(scope, receive, send)
            return
        if self.read_only:
            detail = "this memplan is read-only (MEMPLAN_READ_ONLY): models, plans and runs can be viewed, not changed"
            await _refuse(scope, receive, send, 403, "Read-only", detail)
            return
        if scope["path"] in SIGNIN_PATHS and scope["method"] == "POST":
            # Open to anyone, so it reads only a small form of a declared length.
            length = _headers(scope).get("content-length", "")
            if not length.isdigit() or int(length) > SIGNIN_MAX_BYTES:
                detail = f"the sign-in form is at most {SIGNIN_MAX_BYTES} bytes, sent with a Content-Length"
                await _refuse(scope, receive, send, 413, "Sign-in form too large", detail)
                return
            await self.app(scope, receive, send)
            return
        if self.token is not None and not token_matches(self.token, _presented(scope)):
            detail = (
                "writes need the service's token (MEMPLAN_TOKEN): send 'Authorization: Bearer <token>', "
                "an 'X-Memplan-Token' header, or a 'memplan_token' cookie"
            )
            await _refuse(
                scope, receive, send, 401, "Token required", detail, {"www-authenticate": 'Bearer realm="memplan"'}
            )
            return
        await self.app(scope, receive, send)


def _presented(scope: Scope) -> str:
    """The token the request carries, or '' (compared in constant time by the caller)."""
    headers = _headers(scope)
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    if "x-memplan-token" in headers:
        return headers["x-memplan-token"].strip()
    cookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # a malformed cookie header is no token
        return ""
    morsel = cookie.get(COOKIE)
    return morsel.value if morsel else ""


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
) -> None:
    """Answer as every route does (`app.routes.errors.problem_response`: problem+json, or the error
    page for a browser's own navigation); a 401 also names where to sign in."""
    extra = {"signin": "/token?" + urlencode({"next": _back_to(scope)})} if status == 401 else {}
    response = problem_response(Request(scope), AppError(status, detail, title=title, **extra))
    response.headers.update(headers or {})
    await response(scope, receive, send)


def _back_to(scope: Scope) -> str:
    """The path of the page the request came from (its Referer), when on this site; else '/'."""
    headers = _headers(scope)
    referer = urlsplit(headers.get("referer", ""))
    if referer.netloc and referer.netloc == headers.get("host") and referer.path.startswith("/"):
        return referer.path + (f"?{referer.query}" if referer.query else "")
    return "/"


# ---- signing in from a browser (the routes are in app.routes.pages.signin) ----------------------

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


def failed_sign_ins(request: Request) -> FailedSignIns:
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
