"""How routes answer with pages: the Jinja2 templates, a page or its JSON twin, and a page whose
head is sent before its body is built."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from app.errors import AppError
from app.routes.security import access
from app.services import notes
from app.services.paths import TEMPLATES_DIR

HEAD_END = "</head>"


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
    templates.env.globals["access"] = access  # pages show or hide write controls by it
    templates.env.filters["when"] = notes.when  # times of earlier work, as the notes show theirs
    templates.env.filters["size"] = size_in_words
    return templates


def size_in_words(n: int) -> str:
    """2147483648 -> '2 GiB (2,147,483,648 bytes)': bytes as a reader says them, exact figure beside."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            shown = f"{value:.0f}" if value == int(value) else f"{value:.1f}"
            return f"{shown} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"


def wants_json(request: Request) -> bool:
    if request.query_params.get("format") == "json":
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def render(request: Request, template: str, context: dict[str, Any]) -> Response:
    """The page, or with ``?format=json`` (or ``Accept: application/json``) exactly the data the template gets."""
    if wants_json(request):
        return JSONResponse({"page": template.removesuffix(".html"), **context})
    return request.app.state.templates.TemplateResponse(request, template, context)


async def head_first(
    request: Request, template_name: str, title: str, build: Callable[[], dict[str, Any]]
) -> AsyncIterator[str]:
    """The page's head at once, then the rest once `build` has made the context.

    The head names plotly.js (4.8 MB): the browser fetches and compiles it while the server
    is still building a large page, instead of after. The head needs only the title.
    """
    template = request.app.state.templates.get_template(template_name)
    head = ""
    for chunk in template.generate(request=request, page_title=title):  # stops before the body renders
        head += str(chunk)  # str: adding a str to Markup would escape it
        if HEAD_END in head:
            break
    yield head[: head.index(HEAD_END) + len(HEAD_END)]
    try:
        context = await run_in_threadpool(build)
    except AppError as e:  # the status is sent already: say what went wrong on the page
        yield f'<body><div class="error-box" role="alert">{html.escape(e.detail)}</div></body></html>'
        return
    page = await run_in_threadpool(template.render, request=request, **context)
    yield page[page.index(HEAD_END) + len(HEAD_END) :]
