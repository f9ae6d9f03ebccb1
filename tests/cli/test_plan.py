"""The `memplan plan` and `memplan bench` commands, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import planner
from app.cli import app
from planner import Plan, check_plan
from planner.csvio import read_csv
from tests.planner.test_io import MINIMALLOC_README

runner = CliRunner()


@pytest.fixture
def example(tmp_path):
    path = tmp_path / "input.12.csv"
    path.write_text(MINIMALLOC_README)
    return path


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_json_has_one_object_per_strategy(example):
    result = invoke("plan", example, "--strategy", "all", "--json", "--time-limit", "0.5")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["strategy"] for r in rows] == planner.names()
    for row in rows:
        assert set(row) >= {"strategy", "arena_bytes", "lower_bound", "naive_bytes", "seconds", "valid"}
        assert row["valid"] is True and row["lower_bound"] == 12 and row["naive_bytes"] == 20
        assert row["arena_bytes"] >= 12


def test_output_csv_and_json_hold_a_valid_plan(example, tmp_path):
    out_csv, out_json = tmp_path / "plan.csv", tmp_path / "plan.json"
    assert invoke("plan", example, "-s", "greedy_by_size", "--capacity", "12", "--output", out_csv).exit_code == 0
    problem, offsets = read_csv(out_csv.read_text())
    assert offsets and max(offsets[b.id] + b.size for b in problem.buffers) == 12
    assert invoke("plan", example, "-s", "best_fit", "--output", out_json).exit_code == 0
    saved = Plan.loads(out_json.read_text())
    assert saved.strategy == "best_fit" and check_plan(read_csv(MINIMALLOC_README)[0], saved).ok


def test_help_lists_every_registered_strategy():
    text = invoke("plan", "--help").output.replace("\n", " ")
    for name in planner.names():
        assert name in text


def test_table_output(example):
    result = invoke("plan", example, "-s", "first_fit,wic")
    assert result.exit_code == 0
    assert "first_fit" in result.output and "wic" in result.output and "LOAD (lower bound) 12" in result.output


@pytest.mark.parametrize(
    "args, words",
    [
        (["plan", "missing.csv"], "missing.csv: no such file"),
        (["plan", "{example}", "-s", "magic"], "unknown strategy 'magic'; accepted: naive, bump"),
        (["plan", "{example}", "--alignment", "0"], "--alignment must be a positive number"),
        (["plan", "{example}", "--time-limit", "0"], "--time-limit must be > 0"),
        (["plan", "{example}", "--output", "x.txt"], "accepted: .csv, .json"),
        (["plan", "{bad}"], "line 2: size 'big' is not an integer"),
        (["plan", "{weird}"], "unknown file type '.txt'"),
        (["plan", "{badjson}"], "not valid JSON"),
        (["plan", "{example}", "--io", "disk"], "--io must be 'arena' or 'external'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words, example, tmp_path):
    (tmp_path / "bad.csv").write_text("id,lower,upper,size\na,0,1,big\n")
    (tmp_path / "weird.txt").write_text("hello")
    (tmp_path / "bad.json").write_text("{nope")
    paths = {
        "example": example,
        "bad": tmp_path / "bad.csv",
        "weird": tmp_path / "weird.txt",
        "badjson": tmp_path / "bad.json",
    }
    result = invoke(*[a.format(**paths) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memplan: error:") and words in lines[0]
    assert "Traceback" not in result.output


def test_capacity_too_small_exits_1_with_the_shortfall(example):
    result = invoke("plan", example, "-s", "greedy_by_size", "--capacity", "10")
    assert result.exit_code == 1
    assert "short by 2 bytes" in result.stderr


def test_console_script_runs_without_traceback(example):
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "plan", str(example) + ".nope"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "no such file" in done.stderr and "Traceback" not in done.stderr


def test_bench_writes_its_section_and_keeps_the_rest(example, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.csv").write_text(MINIMALLOC_README)
    (folder / "b.json").write_text(read_csv(MINIMALLOC_README)[0].dumps())
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\nHand-written notes stay.\n")
    for _ in range(2):  # a second run replaces the section instead of adding one
        result = invoke("bench", folder, "--output", doc, "--synthetic", "500", "--time-limit", "0.2")
        assert result.exit_code == 0, result.output
    text = doc.read_text()
    assert "Hand-written notes stay." in text and text.count("begin planner-traces") == 1
    for name in planner.names():
        assert name in text
    assert "| a.csv | 5 | 12 |" in text and "| b.json | 5 | 12 |" in text and "network_like(500)" in text


def test_output_csv_escapes_ids_minimalloc_cannot_read(tmp_path):
    """An ONNX-style name with a comma: quoted CSV in, a MiniMalloc-readable id out, the same id read back."""
    source = tmp_path / "names.csv"
    source.write_text('id,lower,upper,size\n"concat,0",0,2,64\nplain,1,3,32\n')
    out = tmp_path / "plan.csv"
    result = invoke("plan", source, "-s", "greedy_by_size", "--json", "--output", out)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["valid"] is True
    lines = out.read_text().splitlines()
    assert lines[1].startswith("concat%2C0,0,2,64,") and lines[2].startswith("plain,1,3,32,")
    assert all(line.count(",") == 4 for line in lines)  # MiniMalloc splits at every comma
    problem, offsets = read_csv(out.read_text())
    assert [b.id for b in problem.buffers] == ["concat,0", "plain"] and set(offsets or {}) == {"concat,0", "plain"}


def test_output_csv_of_a_plan_in_two_pools_is_refused_naming_them(tmp_path):
    source = tmp_path / "pools.json"
    source.write_text(
        json.dumps(
            {
                "steps": 2,
                "pools": [{"name": "sram"}, {"name": "dram"}],
                "buffers": [
                    {"id": "w", "size": 64, "first": 0, "last": 1, "pool_candidates": ["sram"]},
                    {"id": "x", "size": 64, "first": 0, "last": 1, "pool_candidates": ["dram"]},
                ],
            }
        )
    )
    result = invoke("plan", source, "-s", "greedy_by_size", "--output", tmp_path / "plan.csv")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memplan: error: MiniMalloc CSV has one address space")
    assert "2 pools ('dram': 1 buffer, 'sram': 1 buffer)" in lines[0] and "Plan JSON (.json)" in lines[0]
    assert "Traceback" not in result.output and not (tmp_path / "plan.csv").exists()
    assert invoke("plan", source, "-s", "greedy_by_size", "--output", tmp_path / "plan.json").exit_code == 0
