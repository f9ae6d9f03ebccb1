"""`--reorder` says which method found the order (exact, divided, heuristic) and whether it is proven."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from app.cli import app
from planner.reorder import EXACT_LIMIT

runner = CliRunner()


def fan_model(path: Path, branches: int) -> Path:
    """x -> `branches` parallel Relu -> ReduceMax pairs -> one Sum: a single segment of
    2 * branches + 1 steps, since no step but the Sum precedes or follows all others. Each Relu
    makes 256 bytes that its ReduceMax shrinks to 4: run branch by branch, one waits at a time."""
    nodes = []
    for i in range(branches):
        nodes.append(helper.make_node("Relu", ["x"], [f"r{i}"], name=f"relu{i}"))
    for i in range(branches):
        nodes.append(helper.make_node("ReduceMax", [f"r{i}"], [f"s{i}"], name=f"max{i}", axes=[1]))
    nodes.append(helper.make_node("Sum", [f"s{i}" for i in range(branches)], ["y"], name="sum"))
    graph = helper.make_graph(
        nodes,
        "fan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def small_fan(tmp_path) -> Path:
    return fan_model(tmp_path / "small_fan.onnx", 4)


@pytest.fixture
def wide_fan(tmp_path) -> Path:
    return fan_model(tmp_path / "wide_fan.onnx", EXACT_LIMIT // 2 + 1)


def test_plan_reorder_names_the_exact_method(small_fan):
    result = runner.invoke(app, ["plan", str(small_fan), "--reorder", "-s", "greedy_by_size"])
    assert result.exit_code == 0, result.output
    assert "reorder method exact: proven optimal" in result.stdout
    rows = json.loads(runner.invoke(app, ["plan", str(small_fan), "--reorder", "--json", "-s", "bump"]).stdout)
    assert rows[0]["reorder"]["method"] == "exact" and rows[0]["reorder"]["proven"] is True
    assert rows[0]["reorder"]["load_after"] < rows[0]["reorder"]["load_before"]


def test_a_graph_over_the_exact_limit_says_it_used_the_heuristic(wide_fan):
    result = runner.invoke(app, ["plan", str(wide_fan), "--reorder", "-s", "greedy_by_size"])
    assert result.exit_code == 0, result.output
    assert "reorder method heuristic" in result.stdout
    rows = json.loads(runner.invoke(app, ["plan", str(wide_fan), "--reorder", "--json", "-s", "bump"]).stdout)
    assert rows[0]["reorder"]["method"] == "heuristic" and rows[0]["reorder"]["exact_segments"] == 0
    assert rows[0]["valid"]


def test_run_reorder_reports_the_method_and_keeps_outputs(small_fan):
    result = runner.invoke(app, ["run", str(small_fan), "--reorder", "--verify", "--repeat", "1"])
    assert result.exit_code == 0, result.output
    assert "reorder method exact: proven optimal" in result.stdout and "PASSED" in result.stdout
    report = json.loads(
        runner.invoke(app, ["run", str(small_fan), "--reorder", "--json", "--verify", "--repeat", "1"]).stdout
    )
    assert report["reorder"]["method"] == "exact" and report["verification"]["passed"]
    plain = json.loads(runner.invoke(app, ["run", str(small_fan), "--json", "--repeat", "1"]).stdout)
    assert "reorder" not in plain and plain["order"] == "model"
