"""`memplan serve`: the web service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import fail, user_errors


@user_errors
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    data: Annotated[
        Path | None, typer.Option(help="Data directory (default: $MEMPLAN_DATA or ./memplan-data).")
    ] = None,
) -> None:
    """Start the web service (browser UI at /, REST API under /api/v1, OpenAPI at /docs)."""
    import uvicorn

    from app.main import Settings, create_app
    from app.storage import DatabaseUnavailable

    settings = Settings(data_dir=data) if data is not None else Settings()
    try:
        app = create_app(settings)
    except DatabaseUnavailable as e:  # one line naming the database (no password) and what failed
        raise fail(str(e)) from None
    uvicorn.run(app, host=host, port=port)
