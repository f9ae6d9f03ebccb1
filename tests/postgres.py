"""A real, throwaway PostgreSQL server for tests: Debian's package, initdb into a temporary folder,
listening on 127.0.0.1 and a free port only, stopped at the end (or by a watchdog process if the
test process dies first)."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
            self.port = free_port()
            try:
                self._pg_start()
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

    def _pg_start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.folder} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(str(self.pg_ctl), "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log), "-o", options)

    def pause(self) -> None:
        """Stop the server (fast shutdown: connections are cut), keeping its data and port."""
        self._run(str(self.pg_ctl), "stop", "-D", str(self.data), "-m", "fast", "-w")

    def resume(self) -> None:
        """Start it again on the same port, as a database coming back after an outage."""
        self._pg_start()

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_postgresql() -> Iterator[PostgreSQL]:
    """A server for a fixture: without PostgreSQL the test fails in CI (CI=true) and is skipped,
    saying why, elsewhere; the server stops when the fixture ends."""
    import pytest

    try:
        server = PostgreSQL.start()
    except PostgreSQLUnavailable as e:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"PostgreSQL is required in CI: {e}", pytrace=False)
        pytest.skip(f"no PostgreSQL here: {e} (scripts/test.sh installs it)")
    try:
        yield server
    finally:
        server.stop()
