"""The fixtures every part of the suite shares: the real app on a real SQLite file in a temporary
data folder, its test client, and for browser tests the app served by uvicorn with a Chromium
context (`tests/browser/harness.py`). Jobs run on one real Dask cluster for the whole session
(`dask_scheduler`: two worker processes on loopback). The storage and API tests
(`ON_BOTH_DATABASES`) run on SQLite and again on a real PostgreSQL, started for the session
(`postgresql`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.cluster import PRIORITY_ENV
from app.main import create_app
from app.settings import Settings
from tests.browser.harness import chromium, serving
from tests.postgres import PostgreSQL, running_postgresql

UPLOAD_LIMIT = 1 << 22  # bytes: every model the tests build fits

# Job workers of every cluster the tests start (the session's, `memplan sweep`'s, `memplan serve`'s)
# keep their normal priority: at the service's lowest (SCHED_IDLE) they get no CPU at all on a machine
# busy with other work, and every job test would wait out its timeout. tests/app/test_jobs_priority.py
# removes the variable to test that priority.
os.environ[PRIORITY_ENV] = "normal"


@pytest.fixture(scope="session")
def pgpass_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the test PostgreSQL writes its password (the password file PostgreSQL's clients read):
    jobs reach the workers with the password hidden, and the workers look here, as a worker
    machine would in its own ~/.pgpass."""
    return tmp_path_factory.mktemp("pgpass") / "pgpass"


@pytest.fixture(scope="session")
def dask_scheduler(pgpass_file: Path) -> Iterator[str]:
    """One real Dask cluster for the session: two worker processes on 127.0.0.1; its scheduler's address.

    Apps connect their own Client to it and close only that; the cluster closes when the session ends.
    """
    # In a process of its own: the scheduler's threads would otherwise allocate inside the tests'
    # tracemalloc windows (bytes beside the arena) and take the interpreter lock from timed code.
    child = subprocess.Popen(
        [sys.executable, "-c", CLUSTER],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PGPASSFILE": str(pgpass_file)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    address = child.stdout.readline().strip()
    if not address.startswith("tcp://"):
        child.kill()
        pytest.fail(f"the test cluster did not start (it said {address!r})", pytrace=False)
    try:
        yield address
    finally:
        child.stdin.close()  # the child closes its cluster and exits
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()


# The test cluster's process: it prints the scheduler's address and lives until its stdin closes
# (when the test session ends, however it ends).
CLUSTER = """
import sys
from app.jobs import local_cluster
with local_cluster(workers=2) as address:
    print(address, flush=True)
    sys.stdin.read()
"""


@pytest.fixture()
def make_app(tmp_path, dask_scheduler, database_url) -> Iterator[Callable[..., FastAPI]]:
    """An app factory: `make_app(max_upload_bytes=10_000, token="t")` overrides any setting.

    Its database is `database_url`'s: SQLite in the data folder, or PostgreSQL for the tests that run on both.
    """
    made: list[FastAPI] = []

    def make(**settings: Any) -> FastAPI:
        options: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "database_url": database_url,
            "max_upload_bytes": UPLOAD_LIMIT,
            "scheduler": dask_scheduler,
            **settings,
        }
        made.append(create_app(Settings(**options)))
        return made[-1]

    yield make
    for app in made:  # apps a test never started (no lifespan) still hold a Client
        app.state.jobs.close()


@pytest.fixture()
def app(make_app) -> FastAPI:
    return make_app()


@pytest.fixture()
def client(app) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def server(tmp_path_factory, dask_scheduler) -> Iterator[str]:
    """The app served by uvicorn on a free loopback port, one per test module; its URL."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), max_upload_bytes=1 << 20, scheduler=dask_scheduler)
    with serving(settings) as url:
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

    def make(
        *, base_url: str = "http://testserver", raise_server_exceptions: bool = True, **settings: Any
    ) -> TestClient:
        return TestClient(make_app(**settings), base_url=base_url, raise_server_exceptions=raise_server_exceptions)

    return make


# ---- databases: every test on SQLite; the storage and API tests on PostgreSQL too --------------------

# Tests under these paths (from the repository root) run once per database; the rest only on SQLite.
ON_BOTH_DATABASES = ("tests/app/routes/", "tests/app/test_storage.py")
ROOT = Path(__file__).resolve().parent.parent


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    path = metafunc.definition.path.relative_to(ROOT).as_posix()
    if "database_url" in metafunc.fixturenames and path.startswith(ON_BOTH_DATABASES):
        metafunc.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture()
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None (the default: SQLite in the data folder), or the URL of a new, empty PostgreSQL database."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield None
        return
    server: PostgreSQL = request.getfixturevalue("postgresql")
    name = server.create_database()
    yield server.url(name)
    server.drop_database(name)


@pytest.fixture(scope="session")
def postgresql(pgpass_file: Path) -> Iterator[PostgreSQL]:
    """A real PostgreSQL server (Debian's package) for the session, on 127.0.0.1 and a free port only."""
    with running_postgresql() as server:
        pgpass_file.write_text(f"127.0.0.1:{server.port}:*:{server.USER}:{server.password}\n")
        pgpass_file.chmod(0o600)  # libpq ignores a password file others may read
        yield server
