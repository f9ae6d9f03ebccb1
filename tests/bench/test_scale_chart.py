"""The planner-scale chart: drawn from the saved results, one line per strategy on log-log axes,
and the committed chart and section in step with the committed results."""

from __future__ import annotations

import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def scale_bench(bench_module):
    return bench_module("scale_bench")


def column(runs: dict[str, float], check: float) -> dict:
    return {
        "runs": {name: {"seconds": s, "ratio": 1.0, "valid": True, "check_seconds": check} for name, s in runs.items()},
        "skipped": {},
        "slowest_check_seconds": check,
        "generate_seconds": 0.1,
        "peak_rss_mb": 100.0,
        "machine_load": [0.1, 0.2],
    }


def small_record(scale_bench) -> dict:
    """`fast` grows tenfold per tenfold size, `slow` doubles; `slow` is not run at the largest size."""
    return {
        "schema": scale_bench.SCHEMA,
        "machine": "x86_64",
        "python": "3.11.7",
        "date": "2026-01-01",
        "commit": None,
        "budget": 130.0,
        "sizes": [100, 1000, 10000],
        "strategies": ["fast", "slow"],
        "results": {
            "network_like": {
                100: column({"fast": 0.01, "slow": 1.0}, 0.001),
                1000: column({"fast": 0.1, "slow": 2.0}, 0.01),
                10000: {**column({"fast": 1.0}, 0.1), "skipped": {"slow": 400.0}},
            }
        },
    }


def polylines(svg: ET.Element) -> dict[str, list[tuple[float, float]]]:
    found = {}
    for line in svg.iter(f"{SVG}polyline"):
        points = [tuple(float(v) for v in pair.split(",")) for pair in line.get("points").split()]
        found[line.get("data-name")] = points
    return found


def test_the_chart_only_command_draws_one_line_per_strategy_on_log_axes(scale_bench, tmp_path):
    scale_bench.save_record(small_record(scale_bench), tmp_path / scale_bench.RESULTS)
    output = tmp_path / "BENCHMARKS.md"
    done = subprocess.run(
        [sys.executable, str(BENCH / "scale_bench.py"), "--chart-only", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr

    svg = ET.parse(tmp_path / scale_bench.CHART).getroot()
    lines = polylines(svg)
    assert set(lines) == {"fast", "slow", "check_plan (slowest)"}
    fast, slow, check = lines["fast"], lines["slow"], lines["check_plan (slowest)"]
    assert len(fast) == 3 and len(check) == 3 and len(slow) == 2  # `slow` was not run at 10^4
    # Sizes left to right, a decade apart: equal steps on a log axis.
    xs = [x for x, _ in fast]
    assert xs[0] < xs[1] < xs[2]
    assert xs[2] - xs[1] == pytest.approx(xs[1] - xs[0], abs=0.2)
    assert [x for x, _ in slow] == xs[:2]
    # More seconds higher up (smaller y), a decade per step for `fast`.
    ys = [y for _, y in fast]
    assert ys[0] > ys[1] > ys[2]
    decade = ys[1] - ys[2]
    assert ys[0] - ys[1] == pytest.approx(decade, abs=0.2)
    # `slow`'s 1 s sits level with `fast`'s 1 s, and its 2 s log10(2) of a decade above it (not a fifth of it).
    assert slow[0][1] == pytest.approx(ys[2], abs=0.2)
    assert slow[0][1] - slow[1][1] == pytest.approx(decade * math.log10(2), abs=0.2)

    goals = [line for line in svg.iter(f"{SVG}line") if line.get("class") == "goal"]
    heights = {line.find(f"{SVG}title").text: float(line.get("y1")) for line in goals}
    assert heights["30 s goal, each heuristic"] < heights["10 s goal, check_plan"]
    assert heights["10 s goal, check_plan"] == pytest.approx(ys[2] - decade, abs=0.2)

    section = output.read_text()
    assert f"]({scale_bench.CHART})" in section
    assert "| slow | 1.00 s · 1.0000 | 2.00 s · 1.0000 | not run (~400 s projected) |" in section


def test_results_read_back_as_saved(scale_bench, tmp_path):
    record = small_record(scale_bench)
    scale_bench.save_record(record, tmp_path / scale_bench.RESULTS)
    assert scale_bench.load_record(tmp_path / scale_bench.RESULTS) == record


def test_the_committed_chart_and_section_are_drawn_from_the_committed_results(scale_bench):
    record = scale_bench.load_record(ROOT / "docs" / scale_bench.RESULTS)
    assert (ROOT / "docs" / scale_bench.CHART).read_text() == scale_bench.chart(record)
    assert scale_bench.markdown(record) in (ROOT / "docs" / "BENCHMARKS.md").read_text()
