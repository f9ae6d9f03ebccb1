"""Load test: N clients upload, plan and read plans against a real server on loopback.

Each client loops until the duration is over (bounded: it stops by itself): upload a model
(distinct content per client and round), plan it with two fast strategies, read the plan
and the model list. Every request's latency is kept; any non-2xx or transport error is an
error. ``python bench/load_test.py --clients 20 --seconds 60 --docs docs/RELIABILITY.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbours, when loaded by file path

from serving import free_port, wait_until_up  # noqa: E402

from app.jobs import local_cluster  # noqa: E402
from reliability.malformed import base_model  # noqa: E402


def _model(client: int, round_: int) -> bytes:
    model = base_model()
    model.doc_string = f"load client {client} round {round_}"  # distinct content, distinct record
    return model.SerializeToString()


def client_loop(base: str, index: int, until: float, latencies: list[float], errors: list[str]) -> None:
    with httpx.Client(base_url=base, timeout=30) as http:
        round_ = 0
        while time.monotonic() < until:
            try:
                started = time.perf_counter()
                r = http.post("/api/v1/models", files={"file": ("m.onnx", _model(index, round_))})
                latencies.append(time.perf_counter() - started)
                r.raise_for_status()
                model_id = r.json()["id"]
                started = time.perf_counter()
                r = http.post(
                    f"/api/v1/models/{model_id}/plans",
                    json={"strategies": ["greedy_by_size", "first_fit"], "dims": {"batch": 1 + round_ % 4}},
                )
                latencies.append(time.perf_counter() - started)
                r.raise_for_status()
                for path in (f"/api/v1/plans/{r.json()['plans'][0]['id']}", "/api/v1/models"):
                    started = time.perf_counter()
                    r = http.get(path)
                    latencies.append(time.perf_counter() - started)
                    r.raise_for_status()
            except httpx.HTTPError as e:
                errors.append(f"client {index}: {type(e).__name__}: {e}")
            round_ += 1


def run(base: str, clients: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    errors: list[str] = []
    until = time.monotonic() + seconds
    threads = [
        threading.Thread(target=client_loop, args=(base, k, until, latencies, errors), daemon=True)
        for k in range(clients)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "clients": clients,
        "asked_seconds": seconds,
        "seconds": elapsed,
        "requests": len(ordered),
        "errors": len(errors),
        "p50_ms": 1000 * statistics.median(ordered) if ordered else 0.0,
        "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0,
        "max_ms": 1000 * ordered[-1] if ordered else 0.0,
        "first_error": errors[0] if errors else "",
    }


def serve(data: Path, scheduler: str) -> tuple[subprocess.Popen, str]:
    """One uvicorn process serving the app (jobs on the Dask cluster at `scheduler`); (process, URL)."""
    port = free_port()
    env = {**os.environ, "MEMPLAN_DATA": str(data), "MEMPLAN_SCHEDULER": scheduler, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--log-level", "warning"], env=env, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    wait_until_up(proc, f"{base}/api/v1/models", 30)
    return proc, base


def markdown(figures: dict[str, float]) -> str:
    return "\n".join(
        [
            f"Load (`python bench/load_test.py --clients {figures['clients']} --seconds "
            f"{figures['asked_seconds']:g}`), one uvicorn worker on loopback, each client looping "
            "upload -> plan (2 strategies) -> read plan -> list models:",
            "",
            f"- requests: {figures['requests']:,} in {figures['seconds']:.1f} s "
            f"({figures['requests'] / figures['seconds']:.1f} per second); errors: {figures['errors']}",
            f"- latency p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, max {figures['max_ms']:.1f} ms",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--docs", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as data, local_cluster() as scheduler:
        proc, base = serve(Path(data), scheduler)
        try:
            figures = run(base, args.clients, args.seconds)
        finally:
            proc.kill()
            proc.wait(10)
    text = markdown(figures)
    print(text)
    if figures["first_error"]:
        print("first error:", figures["first_error"])
    if args.docs:
        from app.services.docsections import replace_section

        replace_section(args.docs, "reliability-load", text, title="memplan reliability")
    return 1 if figures["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
