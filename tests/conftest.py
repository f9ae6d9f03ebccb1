"""The fixtures every part of the suite shares: the real app on a real SQLite file in a temporary
data folder, its test client, and for browser tests the app served by uvicorn with a Chromium
context (`tests/browser/harness.py`). Jobs run on one real Dask cluster for the whole session
(`dask_scheduler`: two worker processes on loopback). The storage and API tests
(`ON_BOTH_DATABASES`) run on SQLite and again on a real PostgreSQL, started for the session
(`postgresql`)."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.jobs import local_cluster
from app.main import create_app
from app.settings import Settings
from tests.browser.harness import chromium, serving

UPLOAD_LIMIT = 1 << 22  # bytes: every model the tests build fits


@pytest.fixture(scope="session")
def dask_scheduler() -> Iterator[str]:
    """One real Dask cluster for the session: two worker processes on 127.0.0.1; its scheduler's address.

    Apps connect their own Client to it and close only that; the cluster closes when the session ends.
    """
    with local_cluster(workers=2) as address:
        yield address


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
def postgresql() -> Iterator[PostgreSQL]:
    """A real PostgreSQL server (Debian's package) for the session, on 127.0.0.1 and a free port only.

    Without one, the PostgreSQL tests fail in CI (CI=true) and are skipped, saying why, elsewhere.
    """
    try:
        server = PostgreSQL.start()
    except PostgreSQLUnavailable as e:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"PostgreSQL is required in CI: {e}", pytrace=False)
        pytest.skip(f"no PostgreSQL for the PostgreSQL half of the tests: {e} (scripts/test.sh installs it)")
    try:
        yield server
    finally:
        server.stop()


class PostgreSQLUnavailable(RuntimeError):
    pass


# Run by a separate process: stops the server and removes its folder once pytest is gone, however it ended.
WATCHDOG = """
import os, shutil, subprocess, sys, time
pytest_pid, folder, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while True:
    try:
        os.kill(pytest_pid, 0)
    except ProcessLookupError:
        break
    time.sleep(1)
subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
shutil.rmtree(folder, ignore_errors=True)
"""


class PostgreSQL:
    """A throwaway cluster: initdb into a temporary folder, `pg_ctl start` listening on 127.0.0.1:port
    (its unix socket in that folder), password authentication, fsync off. As root it runs as the
    `postgres` system user (PostgreSQL refuses root), in a folder that user owns."""

    USER = "memplan"

    def __init__(self, bindir: Path, folder: Path, run_as: list[str]) -> None:
        self.bindir, self.folder, self.run_as = bindir, folder, run_as
        self.password = secrets.token_hex(12)
        self.port = 0
        self.made = 0
        self.watchdog: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls) -> PostgreSQL:
        bindir = _postgresql_bindir()
        run_as: list[str] = []
        folder = Path(tempfile.mkdtemp(prefix="memplan-pg-"))
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(folder)
                raise PostgreSQLUnavailable("running as root and there is no 'postgres' system user") from None
            os.chown(folder, owner.pw_uid, owner.pw_gid)
            run_as = ["runuser", "-u", "postgres", "--"]
        server = cls(bindir, folder, run_as)
        try:
            server._init()
            server._launch()
        except BaseException:
            server.stop()
            raise
        return server

    def _run(self, *command: str) -> None:
        done = subprocess.run(
            [*self.run_as, *command], cwd=self.folder, capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise PostgreSQLUnavailable(f"{Path(command[0]).name} failed: {(done.stderr or done.stdout).strip()}")

    def _init(self) -> None:
        password_file = self.folder / "password"
        password_file.write_text(self.password)
        if self.run_as:
            shutil.chown(password_file, "postgres", "postgres")
        self._run(
            str(self.bindir / "initdb"),
            *("-D", str(self.folder / "data"), "-U", self.USER, f"--pwfile={password_file}"),
            *("--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync"),
        )
        password_file.unlink()

    def _launch(self) -> None:
        for attempt in range(3):  # a free port may be taken between choosing it and listening on it
            self.port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.folder} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
            )
            try:
                self._run(
                    str(self.pg_ctl),
                    "start",
                    "-w",
                    "-t",
                    "60",
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.log),
                    "-o",
                    options,
                )
                break
            except PostgreSQLUnavailable:
                if attempt == 2:
                    raise PostgreSQLUnavailable(f"pg_ctl start failed: {self.log.read_text()[-2000:]}") from None
        stop = [*self.run_as, str(self.pg_ctl), "stop", "-D", str(self.data), "-m", "immediate"]
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", WATCHDOG, str(os.getpid()), str(self.folder), *stop],
            start_new_session=True,  # outlives pytest's process group, to clean up after it
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def pg_ctl(self) -> Path:
        return self.bindir / "pg_ctl"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.USER, password=self.password, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(statement)  # type: ignore[arg-type]  # names made here, not user input

    def create_database(self) -> str:
        self.made += 1
        name = f"memplan_test_{self.made}"
        self._admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # FORCE: apps a test left open

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run(
                [*self.run_as, str(self.pg_ctl), "stop", "-D", str(self.data), "-m", "fast", "-w"],
                cwd=self.folder,
                capture_output=True,
                timeout=60,
                check=False,
            )
        if self.watchdog is not None:
            self.watchdog.terminate()
            self.watchdog.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _postgresql_bindir() -> Path:
    """Where initdb and pg_ctl are: `pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin."""
    candidates = []
    if shutil.which("pg_config"):
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
        candidates.append(Path(found))
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0
    )
    candidates.extend(reversed(versions))
    for bindir in candidates:
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            return bindir
    raise PostgreSQLUnavailable("no initdb/pg_ctl (Debian's postgresql package is not installed)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
