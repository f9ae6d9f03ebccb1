"""Real Chromium (Debian's, through Playwright) against the real app served by uvicorn: the one
place the launch flags, the server and the screenshots of the browser tests are defined.

Each test keeps a screenshot of the page it drove under test-artifacts/ (git-ignored).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from app.settings import Settings

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

BROWSER = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (apt-get install chromium)"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(settings: Settings) -> Iterator[str]:
    """The app with `settings` served by uvicorn on a free port, in a thread; yields its URL."""
    import uvicorn

    port = _free_port()
    # A long keep-alive: the browser reuses idle connections, and one the server closes at that moment
    # (uvicorn's default is 5 s) resets a request mid-flight.
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=300
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """A headless Debian Chromium context (Playwright) with its profile in `profile`."""
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def upload(page: Any, server: str, model: Any, name: str) -> str:
    """Upload an ONNX model through the page's own request context; its id."""
    response = page.request.post(
        server + "/api/v1/models",
        multipart={
            "file": {
                "name": f"{name}.onnx",
                "mimeType": "application/octet-stream",
                "buffer": model.SerializeToString(),
            }
        },
    )
    assert response.status == 201, response.text()
    return response.json()["id"]


def assert_remat_chart(page: Any, element_id: str, remat: dict) -> None:
    """The recomputation search's Pareto curve drawn in `element_id` is `remat`'s curve, and its
    chosen point `remat`'s extra FLOPs (in %) and arena."""
    page.wait_for_function(f"document.getElementById('{element_id}').data !== undefined")
    curve, chosen = page.evaluate(
        f"(() => {{ const d = document.getElementById('{element_id}').data;"
        " return [d[0].y.map(Number), [d[1].x[0], d[1].y[0]]]; })()"
    )
    assert curve == [p["arena_bytes"] for p in remat["curve"]]
    assert chosen == pytest.approx([100 * remat["extra_flops"], remat["arena_bytes"]])
