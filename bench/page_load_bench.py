"""Page latency under load while slow jobs run: 20 clients read model and plan pages while 4
`optimal` planning jobs run, against a real `memplan serve` on loopback (with its own local cluster).

The server is started from this checkout and, with `--before`, first from an older one, so both
are measured side by side in one run (`git worktree add ../old <commit>`, then `--before ../old`);
each row names the commit it ran. Besides the latencies, each row gives the server process's CPU
time per request (its own process only, not the cluster's), a figure that other load on the machine
moves much less than latency, and how many of the jobs were running when the loaded phase ended.

    python bench/page_load_bench.py --clients 20 --seconds 30 --jobs 4 --docs docs/RELIABILITY.md
    python bench/page_load_bench.py --before ../old --docs docs/RELIABILITY.md

It stops by itself: bounded client loops, a server and cluster it started and ends.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbours, when loaded by file path

from serving import free_port, wait_until_up  # noqa: E402

from app.services.docsections import replace_section  # noqa: E402
from planner.problem import Buffer, Problem  # noqa: E402

SECTION = "page-load-with-jobs"
EXAMPLES = ("squeezenet", "resnet50")


def serve(tree: Path, data: Path) -> tuple[subprocess.Popen, str]:
    """`memplan serve` from `tree` on a free loopback port (with its own local cluster when it has one)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree), "MEMPLAN_DATA": str(data)}
    env.pop("MEMPLAN_SCHEDULER", None)
    cmd = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--data", str(data)]
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    wait_until_up(proc, f"{base}/api/v1/examples", 120)
    return proc, base


def pages(base: str) -> list[str]:
    """Model and plan pages of the gallery's examples, planned with two fast strategies."""
    paths = []
    with httpx.Client(base_url=base, timeout=60) as http:
        for name in EXAMPLES:
            model = http.post(f"/api/v1/examples/{name}").raise_for_status().json()
            made = http.post(f"/api/v1/models/{model['id']}/plans", json={"strategies": ["greedy_by_size", "best_fit"]})
            plan_id = made.raise_for_status().json()["plans"][0]["id"]
            paths += [f"/models/{model['id']}", f"/plans/{plan_id}"]
        for path in paths:  # warm: the first read of a model loads its graph and hashes its weights
            http.get(path, headers={"accept": "text/html"}).raise_for_status()
    return paths


def start_jobs(base: str, jobs: int, seconds: float) -> list[str]:
    """`jobs` exact planning jobs on a problem optimal keeps searching for the whole time limit: 3,000
    buffers of random sizes and lifetimes (seeded), far from LOAD (a network_like trace it proves
    optimal in about 0.1 s)."""
    problem = random_problem(3000, steps=2000, span=200, seed=7)
    body = _csv(problem)
    started = []
    with httpx.Client(base_url=base, timeout=60) as http:
        for _ in range(jobs):
            r = http.post(
                "/api/v1/problems/plan",
                params={"strategies": "optimal", "time_limit": seconds, "background": "true"},
                content=body,
                headers={"content-type": "text/csv"},
            )
            r.raise_for_status()
            started.append(r.json()["job"]["id"])
    return started


def random_problem(n: int, steps: int, span: int, seed: int) -> Problem:
    rng = random.Random(seed)
    buffers = []
    for k in range(n):
        first = rng.randrange(steps)
        last = min(steps - 1, first + rng.randrange(span))
        buffers.append(Buffer(id=f"b{k}", size=64 * rng.randrange(1, 5000), first=first, last=last))
    return Problem(buffers=tuple(buffers), steps=steps)


def _csv(problem) -> str:
    rows = ["id,lower,upper,size"] + [f"{b.id},{b.first},{b.last + 1},{b.size}" for b in problem.buffers]
    return "\n".join(rows) + "\n"


def load(base: str, paths: list[str], clients: int, seconds: float, server: int) -> dict[str, float]:
    latencies: list[float] = []
    cpu = psutil.Process(server).cpu_times()
    errors: list[str] = []
    until = time.monotonic() + seconds

    def loop(index: int) -> None:
        with httpx.Client(base_url=base, timeout=60, headers={"accept": "text/html"}) as http:
            k = index
            while time.monotonic() < until:
                path = paths[k % len(paths)]
                k += 1
                started = time.perf_counter()
                try:
                    http.get(path).raise_for_status()
                except httpx.HTTPError as e:
                    errors.append(f"{path}: {type(e).__name__}: {e}")
                    continue
                latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    elapsed = time.perf_counter() - started
    after = psutil.Process(server).cpu_times()
    cpu_s = (after.user + after.system) - (cpu.user + cpu.system)
    ordered = sorted(latencies)
    pick = lambda q: 1000 * ordered[int(q * (len(ordered) - 1))] if ordered else 0.0  # noqa: E731
    return {
        "requests": len(ordered),
        "seconds": elapsed,
        "errors": len(errors),
        "p50_ms": 1000 * statistics.median(ordered) if ordered else 0.0,
        "p95_ms": pick(0.95),
        "p99_ms": pick(0.99),
        "max_ms": 1000 * ordered[-1] if ordered else 0.0,
        "cpu_ms": 1000 * cpu_s / len(ordered) if ordered else 0.0,
    }


def measure(tree: Path, clients: int, seconds: float, jobs: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as data:
        started = time.perf_counter()
        proc, base = serve(tree, Path(data))
        startup = time.perf_counter() - started
        try:
            paths = pages(base)
            quiet = load(base, paths, clients, seconds, proc.pid)
            started_jobs = start_jobs(base, jobs, seconds + 30)
            time.sleep(2)  # the jobs are running, not queued
            busy = load(base, paths, clients, seconds, proc.pid)
            busy["running"] = running(base, started_jobs)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {"startup": {"seconds": startup}, "quiet": quiet, "busy": busy}


def running(base: str, job_ids: list[str]) -> int:
    """How many of the jobs are running (not queued, not finished) now."""
    with httpx.Client(base_url=base, timeout=60) as http:
        return sum(http.get(f"/api/v1/jobs/{j}").raise_for_status().json()["state"] == "running" for j in job_ids)


def commit_of(tree: Path) -> str:
    """The tree's commit (short hash), '+ changes' when its files differ from it."""
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"], capture_output=True
    )
    name = head.stdout.strip() or "unknown commit"
    return f"{name} + changes" if dirty.stdout.strip() else name


def markdown(rows: list[tuple[str, dict[str, dict[str, float]]]], clients: int, seconds: float, jobs: int) -> str:
    lines = [
        f"Page latency (`python bench/page_load_bench.py --clients {clients} --seconds {seconds:g} --jobs {jobs}`): "
        f"{clients} clients reading two model pages and two plan pages (HTML) for {seconds:g} s, without jobs and "
        f"while {jobs} `optimal` jobs run; `memplan serve` on loopback ({platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores), the trees measured one after the other in one run. Server CPU: the web "
        "server process's CPU time per request (not its cluster's); jobs running: of the jobs started, how many "
        "were running when the loaded phase ended.",
        "",
        "| server | start-up s | requests quiet | p50 / p99 ms quiet | requests with jobs | p50 / p95 / p99 ms with jobs "
        "| server CPU ms per request quiet / with jobs | jobs running | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, f in rows:
        q, b = f["quiet"], f["busy"]
        lines.append(
            f"| {label} | {f['startup']['seconds']:.1f} | {q['requests']:,} | {q['p50_ms']:.0f} / {q['p99_ms']:.0f} | "
            f"{b['requests']:,} | {b['p50_ms']:.0f} / {b['p95_ms']:.0f} / {b['p99_ms']:.0f} | "
            f"{q['cpu_ms']:.1f} / {b['cpu_ms']:.1f} | {b['running']} of {jobs} | {q['errors'] + b['errors']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--before", type=Path, default=None, help="an older checkout to measure first, side by side")
    parser.add_argument("--docs", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    if args.before is not None:
        before = args.before.resolve()
        rows.append((f"before ({commit_of(before)})", measure(before, args.clients, args.seconds, args.jobs)))
    rows.append((f"now ({commit_of(ROOT)})", measure(ROOT, args.clients, args.seconds, args.jobs)))
    text = markdown(rows, args.clients, args.seconds, args.jobs)
    print(text)
    if args.docs is not None:
        replace_section(args.docs, SECTION, text, title="memplan reliability")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
