"""A 5-second sample of the load test: 20 clients against a real server, no errors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "load_test.py"


def test_twenty_clients_for_five_seconds_see_no_errors(tmp_path, dask_scheduler):
    spec = importlib.util.spec_from_file_location("load_test", SCRIPT)
    load_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load_test)
    proc, base = load_test.serve(tmp_path, dask_scheduler)
    try:
        figures = load_test.run(base, clients=20, seconds=5.0)
    finally:
        proc.kill()
        proc.wait(10)
    assert figures["errors"] == 0, figures["first_error"]
    assert figures["requests"] >= 20 and figures["p99_ms"] > 0
