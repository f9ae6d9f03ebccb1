"""`memplan sweep` through the real CLI and a real local Dask cluster of worker processes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

import runtime
from app.cli import app
from planner import load
from tests.app.routes.test_diffs import mlp_model

runner = CliRunner()


def batched_mlp(hidden: int) -> onnx.ModelProto:
    model = mlp_model(hidden, extra_layer=True)
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


@pytest.fixture()
def models(tmp_path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    onnx.save(batched_mlp(16), folder / "small.onnx")
    onnx.save(batched_mlp(48), folder / "wide.onnx")
    return folder


def test_a_sweep_plans_every_combination_once(models, tmp_path):
    out = tmp_path / "sweep.csv"
    result = runner.invoke(
        app,
        [
            "sweep",
            str(models),
            "--strategy",
            "greedy_by_size,naive",
            "--dims",
            "batch=1,4,8",
            "--workers",
            "1",
            "--json",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    combos = {(r["model"], r["strategy"], r["dims"]["batch"]) for r in rows}
    assert len(rows) == len(combos) == 2 * 2 * 3
    for row in rows:
        # LOAD of each combination, from the model loaded here with the same dims.
        graph = runtime.load_model(models / f"{row['model']}.onnx", dims=row["dims"])
        assert row["lower_bound"] == load(runtime.memory_problem(graph))
        assert row["valid"] and row["arena_bytes"] >= row["lower_bound"]
    by = {(r["model"], r["strategy"], r["dims"]["batch"]): r["arena_bytes"] for r in rows}
    assert by[("wide", "greedy_by_size", 8)] > by[("wide", "greedy_by_size", 1)]
    assert by[("small", "naive", 4)] >= by[("small", "greedy_by_size", 4)]
    with out.open() as f:
        written = list(csv.DictReader(f))
    assert len(written) == len(rows) and written[0].keys() >= {
        "model",
        "strategy",
        "dims",
        "arena_bytes",
        "lower_bound",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "fastest"], "unknown strategy 'fastest'"),
        (["--dims", "seq=4"], "has no symbolic dim 'seq'"),
        ([], "leaves 'batch' unbound"),
        (["--dims", "batch=0"], "batch must be a positive size"),
    ],
)
def test_bad_sweeps_are_refused_before_any_task(models, args, message):
    result = runner.invoke(
        app, ["sweep", str(models), "--workers", "1", *(args or []), *([] if "--dims" in args else [])]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_folder_without_models_is_refused(tmp_path):
    result = runner.invoke(app, ["sweep", str(tmp_path)])
    assert result.exit_code == 2 and "no .onnx model" in result.output


def test_an_unreachable_scheduler_is_one_line_and_exit_2(models):
    result = runner.invoke(app, ["sweep", str(models), "--dims", "batch=1", "--scheduler", "tcp://127.0.0.1:9"])
    assert result.exit_code == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in result.output
    assert "Traceback" not in result.output


def test_whole_input_shapes_hold_at_every_point_of_a_sweep(tmp_path):
    """A Paddle-style model (x [-1, 3, '?', '?'], bias [0, 2, '', 1]) binds only through --shape."""
    from tests.runtime.paddle_models import detector, save

    folder = tmp_path / "paddle"
    folder.mkdir()
    path = save(detector(), folder, "detector")
    shapes = {"x": [2, 3, 16, 24], "bias": [2, 2, 8, 1]}
    out = tmp_path / "sweep.csv"
    args = ["sweep", str(path), "-s", "greedy_by_size,naive", "--workers", "1", "--json", "--output", str(out)]
    result = runner.invoke(app, [*args, "--shape", "x=2x3x16x24", "--shape", "bias=2x2x8x1"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert sorted(r["strategy"] for r in rows) == ["greedy_by_size", "naive"]
    expected = load(runtime.memory_problem(runtime.load_model(path, shapes=shapes)))
    for row in rows:
        assert row["shapes"] == shapes and row["valid"] and row["lower_bound"] == expected
    with out.open() as f:
        assert {r["shapes"] for r in csv.DictReader(f)} == {"bias=2x2x8x1 x=2x3x16x24"}


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("y=1x3", "has no input 'y'"),
        ("x=1x3x16", "rank 4"),
        ("x=1x4x16x16", "axis 1 of input 'x' is fixed at 3"),
    ],
)
def test_bad_shapes_in_a_sweep_are_refused_before_any_task(tmp_path, shape, message):
    from tests.runtime.paddle_models import detector, save

    path = save(detector(), tmp_path, "detector")
    result = runner.invoke(app, ["sweep", str(path), "--workers", "1", "--shape", shape])
    assert result.exit_code == 2, result.output
    assert message in result.output and "detector" in result.output
