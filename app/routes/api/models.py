"""/api/v1/models: upload, list, show, delete; plan a model; run a model in its plan."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from app.errors import AppError
from app.routes.deps import JobsDep, ModelDep, PagingDep, SettingsDep, StorageDep
from app.schemas import JobOut, ModelList, ModelOut, PlanRequest, PlansOut, RunRequest
from app.services import library, listings, planning, runs, tensor_table
from app.services.library import model_out
from app.services.uploads import receive

router = APIRouter(tags=["models"])

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": ".onnx, or .zip of an .onnx with its data files",
                        }
                    },
                }
            },
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


@router.post("/models", status_code=201, response_model=ModelOut, openapi_extra=_UPLOAD_BODY)
async def upload_model(request: Request, storage: StorageDep, settings: SettingsDep) -> dict[str, Any]:
    """Upload an ONNX model (multipart field `file`, or a raw body with `?name=`).

    A model with external data comes as a .zip of the .onnx and its data files. The same
    content uploaded again returns the stored model (`new` is false).
    """
    incoming = await receive(
        request.stream(),
        content_type=request.headers.get("content-type", ""),
        declared=request.headers.get("content-length"),
        name=request.query_params.get("name"),
        temp=storage.incoming_path(),
        limit=settings.max_upload_bytes,
    )
    record, new = await run_in_threadpool(library.ingest, storage, incoming)
    return model_out(record, new)


@router.get("/models", response_model=ModelList)
def list_models(storage: StorageDep) -> dict[str, Any]:
    return {"models": [model_out(r) for r in storage.list_models()]}


@router.get("/models/{model_id}", response_model=ModelOut)
def get_model(record: ModelDep) -> dict[str, Any]:
    return model_out(record)


@router.delete("/models/{model_id}", status_code=204)
def delete_model(record: ModelDep, storage: StorageDep) -> Response:
    library.remove(storage, record)
    return Response(status_code=204)


@router.get("/models/{model_id}/plans")
def list_model_plans(record: ModelDep, storage: StorageDep, paging: PagingDep) -> dict[str, Any]:
    """The model's plans, newest first, paged (`items`, `total`, `limit`, `offset`, `next`)."""
    return listings.plans(storage, model_id=record.id, limit=paging.limit, offset=paging.offset)


@router.get("/models/{model_id}/tensors")
def list_model_tensors(record: ModelDep, storage: StorageDep, paging: PagingDep) -> dict[str, Any]:
    """The model's tensors in graph order, paged (`items`, `total`, `limit`, `offset`): kind, dtype, shape,
    bytes and quantization (scale and zero point, per tensor or per channel; null for float tensors)."""
    return tensor_table.model_tensors(storage, record, paging.offset, paging.limit)


@router.get("/models/{model_id}/runs")
def list_model_runs(record: ModelDep, storage: StorageDep, paging: PagingDep) -> dict[str, Any]:
    """The model's finished runs, newest first, paged: strategy, arena, seconds and verdict of each."""
    return listings.runs(storage, model_id=record.id, limit=paging.limit, offset=paging.offset)


@router.post("/models/{model_id}/plans", response_model=PlansOut)
async def create_plans(record: ModelDep, body: PlanRequest, storage: StorageDep, jobs: JobsDep) -> dict[str, Any]:
    """Plan the model with the given strategies; slow ones (or all, with `background`) run as a job."""
    return await run_in_threadpool(planning.plan_model, storage, jobs, record, body)


_RUN_BODY = {
    "requestBody": {
        "content": {
            "application/json": {"schema": RunRequest.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "inputs": {
                            "type": "string",
                            "format": "binary",
                            "description": ".npz of the model's inputs by name",
                        },
                        "options": {"type": "string", "description": "RunRequest as JSON"},
                    },
                }
            },
        }
    }
}


@router.post("/models/{model_id}/runs", status_code=202, response_model=JobOut, openapi_extra=_RUN_BODY)
async def create_run(
    request: Request, record: ModelDep, storage: StorageDep, jobs: JobsDep, settings: SettingsDep
) -> dict[str, Any]:
    """Execute the model inside a plan's arena as a job; follow it at /api/v1/jobs/{id}/events."""
    body, npz = await _run_request(request, settings.max_upload_bytes)
    library.check_dims(record, body.dims)
    job = await run_in_threadpool(runs.start, storage, jobs, record, body, npz)
    return job.to_json()


async def _run_request(request: Request, limit: int) -> tuple[RunRequest, bytes | None]:
    content_type = request.headers.get("content-type", "")
    npz = None
    if content_type.startswith("multipart/form-data"):
        form = await request.form(max_part_size=limit)
        raw = form.get("options") or "{}"
        upload = form.get("inputs")
        if upload is not None and not isinstance(upload, str):
            npz = await upload.read()
            if not npz:
                npz = None
    else:
        raw = (await request.body()).decode("utf-8", "replace") or "{}"
    try:
        data = json.loads(raw) if isinstance(raw, str) else {}
    except json.JSONDecodeError as e:
        raise AppError(422, f"run options are not valid JSON: {e.msg} at column {e.colno}") from None
    try:
        return RunRequest.model_validate(data), npz
    except ValueError as e:
        raise AppError(422, f"run options: {_pydantic_message(e)}", title="Invalid request") from None


def _pydantic_message(error: ValueError) -> str:
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return str(error)
    return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}" for e in errors())
