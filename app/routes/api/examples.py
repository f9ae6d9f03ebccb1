"""/api/v1/examples: the zoo models shipped inside the onnx wheel, one call to import each."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from app.routes.deps import StorageDep
from app.schemas import ModelOut
from app.services import library
from app.services.library import model_out

router = APIRouter(tags=["examples"])


@router.get("/examples")
def list_examples() -> dict[str, Any]:
    return {"examples": [{**e, "links": {"import": f"/api/v1/examples/{e['name']}"}} for e in library.examples()]}


@router.post("/examples/{name}", status_code=201, response_model=ModelOut)
async def import_example(name: str, storage: StorageDep) -> dict[str, Any]:
    """Store an example model (once) and return it like an upload does."""
    record, new = await run_in_threadpool(library.import_example, storage, name)
    return model_out(record, new)
