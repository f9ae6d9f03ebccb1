"""The fixtures every part of the suite shares: the real app on a real SQLite file in a temporary
data folder, its test client, and for browser tests the app served by uvicorn with a Chromium
context (`tests/browser/harness.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.browser.harness import chromium, serving

UPLOAD_LIMIT = 1 << 22  # bytes: every model the tests build fits


@pytest.fixture()
def make_app(tmp_path) -> Callable[..., FastAPI]:
    """An app factory: `make_app(max_upload_bytes=10_000, token="t")` overrides any setting."""

    def make(**settings: Any) -> FastAPI:
        options: dict[str, Any] = {"data_dir": tmp_path / "data", "max_upload_bytes": UPLOAD_LIMIT, **settings}
        return create_app(Settings(**options))

    return make


@pytest.fixture()
def app(make_app) -> FastAPI:
    return make_app()


@pytest.fixture()
def client(app) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """The app served by uvicorn on a free loopback port, one per test module; its URL."""
    with serving(Settings(data_dir=tmp_path_factory.mktemp("data"), max_upload_bytes=1 << 20)) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Any]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


@pytest.fixture()
def page(browser) -> Iterator[Any]:
    page = browser.new_page()
    yield page
    page.close()


@pytest.fixture()
def make_client(make_app) -> Callable[..., TestClient]:
    """A client factory: `with make_client(token="t", base_url="https://testserver") as c: ...`."""

    def make(*, base_url: str = "http://testserver", raise_server_exceptions: bool = True, **settings: Any) -> TestClient:
        return TestClient(make_app(**settings), base_url=base_url, raise_server_exceptions=raise_server_exceptions)

    return make
