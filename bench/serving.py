"""Servers the benchmarks start: a free loopback port, and waiting until a started server answers."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(proc: subprocess.Popen, url: str, seconds: float) -> None:
    """Poll `url` until it answers 200; the server process killed and RuntimeError (with the end of its
    stderr when piped) if it exits or `seconds` pass first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise RuntimeError(f"the server stopped (exit {proc.returncode}): {said}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the server did not answer {url} in {seconds:.0f} s")
