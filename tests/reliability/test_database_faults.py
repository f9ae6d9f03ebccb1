"""PostgreSQL stopped under a running service: requests answer 503 with a reason (no traceback), and
the service recovers by itself once the database is back. A real PostgreSQL of its own, on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.postgres import PostgreSQL, running_postgresql
from tests.runtime.test_session import small_cnn


@pytest.fixture()
def own_postgresql() -> Iterator[PostgreSQL]:
    with running_postgresql() as server:  # its own: this test stops and starts it
        yield server


def test_a_stopped_database_is_503_and_the_service_recovers(make_app, own_postgresql):
    url = own_postgresql.url(own_postgresql.create_database())
    with TestClient(make_app(database_url=url)) as client:
        r = client.post("/api/v1/models", files={"file": ("cnn.onnx", small_cnn().SerializeToString())})
        assert r.status_code == 201, r.text
        model_id = r.json()["id"]
        own_postgresql.pause()
        try:
            down = client.get("/api/v1/models")
            assert down.status_code == 503, down.text
            assert "database is unreachable" in down.json()["detail"] and "Traceback" not in down.text
            assert down.headers["retry-after"] and own_postgresql.password not in down.text
            page = client.get(f"/models/{model_id}", headers={"accept": "text/html"})
            assert page.status_code == 503 and "database is unreachable" in page.text
        finally:
            own_postgresql.resume()
        deadline = time.monotonic() + 30
        while (back := client.get("/api/v1/models")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert back.status_code == 200 and [m["id"] for m in back.json()["models"]] == [model_id]
