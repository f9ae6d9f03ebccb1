"""Access control: an optional write token, and a read-only mode for review links.

Reads (GET, HEAD, OPTIONS) are always open. With `Settings.token` set, a write needs the
token as ``Authorization: Bearer <token>``, an ``X-Memplan-Token`` header, or a
``memplan_token`` cookie (so pages can post once the cookie is set). With
`Settings.read_only`, every write is refused whatever the token: a review link can be
shared without letting anyone change what is stored.

The sign-in endpoints (`SIGNIN_PATHS`, see `app.signin`) are the one exception to the token
check: posting the token is how a browser presents it. Read-only mode refuses them too. A
refused browser form post (a navigation that accepts HTML, outside /api) gets a short page
with a sign-in link instead of problem+json.

It is plain ASGI middleware so that streamed uploads are refused before a byte is read.
"""

from __future__ import annotations

import hmac
import json
from html import escape
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import PROBLEM_JSON

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
            await _refuse(scope, send, 403, "Read-only", detail)
            return
        if scope["path"] in SIGNIN_PATHS and scope["method"] == "POST":
            # Open to anyone, so it reads only a small form of a declared length.
            length = _headers(scope).get("content-length", "")
            if not length.isdigit() or int(length) > SIGNIN_MAX_BYTES:
                detail = f"the sign-in form is at most {SIGNIN_MAX_BYTES} bytes, sent with a Content-Length"
                await _refuse(scope, send, 413, "Sign-in form too large", detail)
                return
            await self.app(scope, receive, send)
            return
        if self.token is not None and not token_matches(self.token, _presented(scope)):
            detail = (
                "writes need the service's token (MEMPLAN_TOKEN): send 'Authorization: Bearer <token>', "
                "an 'X-Memplan-Token' header, or a 'memplan_token' cookie"
            )
            await _refuse(scope, send, 401, "Token required", detail, {"www-authenticate": 'Bearer realm="memplan"'})
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
    scope: Scope, send: Send, status: int, title: str, detail: str, headers: dict[str, str] | None = None
) -> None:
    if _is_page_navigation(scope):
        await _refuse_page(scope, send, status, title, detail)
        return
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": scope.get("path", ""),
    }
    raw = json.dumps(body).encode()
    out = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(raw)).encode())]
    out += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": raw})


def _is_page_navigation(scope: Scope) -> bool:
    """A browser's own form post (e.g. the example gallery), which would show problem+json raw."""
    accept = _headers(scope).get("accept", "")
    return not scope.get("path", "").startswith("/api/") and "text/html" in accept


def _back_to(scope: Scope) -> str:
    """The path of the page the form was on (its Referer), when that page is on this site; else '/'."""
    headers = _headers(scope)
    referer = urlsplit(headers.get("referer", ""))
    if referer.netloc and referer.netloc == headers.get("host") and referer.path.startswith("/"):
        return referer.path + (f"?{referer.query}" if referer.query else "")
    return "/"


async def _refuse_page(scope: Scope, send: Send, status: int, title: str, detail: str) -> None:
    link = ""
    if status == 401:
        href = "/token?" + urlencode({"next": _back_to(scope)})
        link = f'<p><a href="{escape(href)}" id="signin-link">Sign in</a> with the token, then try again.</p>'
    page = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        '<link rel="stylesheet" href="/static/memplan.css"></head><body><main>'
        f'<section class="card problem" id="problem-detail"><h1>{status} · {escape(title)}</h1>'
        f'<p class="detail">{escape(detail)}</p>{link}<p><a href="/">Back to the models</a></p></section>'
        "</main></body></html>"
    )
    raw = page.encode()
    out = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": raw})
