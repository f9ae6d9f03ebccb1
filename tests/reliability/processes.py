"""Real memplan processes for the fault tests: `memplan serve` and `memplan worker` on loopback ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
MEMPLAN = [sys.executable, "-c", "from app.cli import main; main()"]  # `memplan`, installed or not


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memplan(*args: str, env: dict[str, str] | None = None, **popen: object) -> subprocess.Popen:
    """`memplan ARGS...` as a child process, with this checkout importable."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen([*MEMPLAN, *args], env=full_env, cwd=ROOT, **popen)  # type: ignore[arg-type]


def serve(data: Path, scheduler: str, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """`memplan serve` on a free port with the data folder and the Dask scheduler given; (process, URL)."""
    port = port or free_port()
    proc = memplan("serve", "--port", str(port), "--data", str(data), "--scheduler", scheduler)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"memplan serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/api/v1/models", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.1)
    stop(proc)
    raise RuntimeError("memplan serve did not answer in 30 s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def wait_for(check, seconds: float, what: str):
    """Poll `check()` until it returns something truthy; that value (AssertionError naming `what` on time-out)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {seconds} s")
