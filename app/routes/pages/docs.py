"""The API page: Swagger UI served from the installed swagger_ui_bundle package, so that /docs works
without internet as every other page does (plotly.js comes from the plotly package the same way)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

from app.errors import AppError
from app.services.paths import SWAGGER_ASSETS, swagger_ui_dir

router = APIRouter(include_in_schema=False)

ASSETS = "/docs/assets"
MISSING = (
    "<!doctype html><title>memplan API</title><h1>memplan API</h1>"
    "<p>Swagger UI is not installed here: <code>pip install swagger-ui-bundle-v2</code> (part of memplan's "
    'dependencies) shows this page. The API description itself is at <a href="{openapi}">{openapi}</a>.</p>'
)


@router.get("/docs")
def api_docs(request: Request) -> HTMLResponse:
    openapi = request.app.openapi_url or "/openapi.json"
    if swagger_ui_dir() is None:
        return HTMLResponse(MISSING.format(openapi=openapi))
    return get_swagger_ui_html(
        openapi_url=openapi,
        title="memplan API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url="data:,",
    )


@router.get(ASSETS + "/{name}")
def api_docs_asset(name: str) -> Response:
    folder = swagger_ui_dir()
    if folder is None or name not in SWAGGER_ASSETS:
        raise AppError(404, f"no Swagger UI file {name!r}; served: {', '.join(SWAGGER_ASSETS)}")
    kind = "text/javascript" if name.endswith(".js") else "text/css"
    return FileResponse(folder / name, media_type=kind, headers={"Cache-Control": "public, max-age=86400"})
