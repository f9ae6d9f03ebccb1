"""Access control: an optional write token, and a read-only mode for review links.

Reads (GET, HEAD, OPTIONS) are always open. With `Settings.token` set, a write needs the
token as ``Authorization: Bearer <token>``, an ``X-Memplan-Token`` header, or a
``memplan_token`` cookie (so pages can post once the cookie is set). With
`Settings.read_only`, every write is refused whatever the token: a review link can be
shared without letting anyone change what is stored.

It is plain ASGI middleware so that streamed uploads are refused before a byte is read.
"""

from __future__ import annotations

import hmac
import json
from http.cookies import SimpleCookie
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import PROBLEM_JSON

READS = frozenset({"GET", "HEAD", "OPTIONS"})


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
        if self.token is not None and not hmac.compare_digest(_presented(scope).encode(), self.token.encode()):
            detail = (
                "writes need the service's token (MEMPLAN_TOKEN): send 'Authorization: Bearer <token>', "
                "an 'X-Memplan-Token' header, or a 'memplan_token' cookie"
            )
            await _refuse(scope, send, 401, "Token required", detail, {"www-authenticate": 'Bearer realm="memplan"'})
            return
        await self.app(scope, receive, send)


def _presented(scope: Scope) -> str:
    """The token the request carries, or '' (compared in constant time by the caller)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
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
    morsel = cookie.get("memplan_token")
    return morsel.value if morsel else ""


async def _refuse(
    scope: Scope, send: Send, status: int, title: str, detail: str, headers: dict[str, str] | None = None
) -> None:
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
