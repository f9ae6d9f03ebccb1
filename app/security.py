"""Access control: an optional write token, and a read-only mode for review links.

Reads (GET, HEAD, OPTIONS) are always open. With `Settings.token` set, a write needs the
token as ``Authorization: Bearer <token>``, an ``X-Memplan-Token`` header, or a
``memplan_token`` cookie (so pages can post once the cookie is set). With
`Settings.read_only`, every write is refused whatever the token: a review link can be
shared without letting anyone change what is stored.

The sign-in endpoints (`SIGNIN_PATHS`, see `app.signin`) are the one exception to the token
check: posting the token is how a browser presents it. Read-only mode refuses them too. A
refused browser form post (a navigation that accepts HTML, outside /api) gets the error page
with a sign-in link instead of problem+json.

It is plain ASGI middleware so that streamed uploads are refused before a byte is read.
"""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import AppError, problem_response

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
    """Answer as every route does (`app.errors.problem_response`: problem+json, or the error
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
