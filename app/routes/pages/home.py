"""The home page (upload, gallery, stored models) and the gallery's one-click import."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from app.routes.deps import SettingsDep, StorageDep
from app.routes.rendering import render
from app.services import library, listings, reports
from app.services.library import model_out

router = APIRouter(include_in_schema=False)


@router.get("/")
def home(request: Request, storage: StorageDep, settings: SettingsDep) -> Response:
    return render(
        request,
        "home.html",
        {
            "page_title": "memplan",
            "models": [model_out(r) for r in storage.list_models()],
            "examples": library.examples(),
            "strategies": reports.strategy_list(),
            "max_upload_bytes": settings.max_upload_bytes,
            "recent_notes": listings.notes(storage, limit=10),
        },
    )


@router.post("/examples/{name}")
async def open_example(name: str, storage: StorageDep) -> RedirectResponse:
    """The gallery's one click: store the example (once) and go to its model page."""
    record, _ = await run_in_threadpool(library.import_example, storage, name)
    return RedirectResponse(f"/models/{record.id}", status_code=303)
