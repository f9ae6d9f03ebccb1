"""bench/interchange_bench.py on one light model, without MiniMalloc's validator (which is
built outside the repository): every check passes, and each check fails on what it guards."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import onnx

import planner
import runtime
from planner.csvio import write_csv

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "interchange_bench.py"
SQUEEZENET = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def load_bench():
    spec = importlib.util.spec_from_file_location("interchange_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_export_of_squeezenet_passes_memplan_checks(tmp_path):
    doc = tmp_path / "CONFORMANCE.md"
    done = bench("--models", "squeezenet", "--time-limit", "0.2", "--output", str(doc))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    section = doc.read_text()
    assert "<!-- begin interchange (generated) -->" in section and "<!-- end interchange -->" in section
    plans = 2 * len(planner.names())
    assert f"{plans} plans exported, plan: {plans} PASS / 0 FAIL" in section
    assert "MiniMalloc's validator was not run" in section
    strategies = len(planner.names())
    for form in ("like for like", "inclusive"):
        line = next(x for x in section.splitlines() if x.startswith(f"| squeezenet | {form} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert int(cells[4]) > 0 and int(cells[5]) > 0, "squeezenet's export has alias groups split into pieces"
        assert cells[7:] == [f"{strategies}/{strategies}"] * 4
    assert "FAIL" not in done.stdout.replace("0 FAIL", "")


def test_a_validator_that_is_not_an_executable_is_refused(tmp_path):
    for path in (tmp_path / "missing", tmp_path):
        done = bench("--models", "squeezenet", "--validator", str(path), "--output", str(tmp_path / "x.md"))
        assert done.returncode == 2
        assert f"--validator: {path} is not an executable file" in done.stderr
    assert not (tmp_path / "x.md").exists()


def test_the_checks_find_what_a_one_row_per_buffer_export_gets_wrong():
    """An in-place plan written a row per buffer (the export before alias groups) has rows
    that overlap; an export missing a piece, or with a piece moved, leaves bytes in no row."""
    checks = load_bench()
    problem = runtime.memory_problem(runtime.load_model(SQUEEZENET), runtime.MemoryOptions())
    plan = planner.plan(problem, "greedy_by_size")
    per_buffer = [(b.id, b.first, b.last + 1, b.size, plan.offset(b.id)) for b in problem.buffers]
    assert checks.first_overlap(per_buffer) is not None

    reread, rows = checks.csv_rows(write_csv(problem, plan), problem.alignment)
    assert checks.first_overlap(rows) is None and checks.first_uncovered(problem, plan, rows) is None
    assert checks.reread_verdict(reread, rows) is None
    piece = next(r for r in rows if "#" in r[0])
    assert checks.first_uncovered(problem, plan, [r for r in rows if r != piece]) is not None
    shifted = [(i, lo, up, size, offset + 1 if (i, lo) == piece[:2] else offset) for i, lo, up, size, offset in rows]
    assert checks.first_uncovered(problem, plan, shifted) is not None
