"""`--shape NAME=1x3x48x320` on `memplan plan`, `memplan run` and `memplan train-plan`, as a user
types it, on models declared the Paddle way (-1, 0, '?' reused, unnamed dims); every refusal is
one line on stderr and exit status 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.cli import app
from tests.runtime.paddle_models import classifier, detector, save, trainable

runner = CliRunner()
SHAPES = ["--shape", "x=1x3x48x320", "--shape", "bias=1x2x1x1"]


@pytest.fixture
def paddle(tmp_path):
    return save(detector(), tmp_path, "detector")


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    return lines[0]


def test_plan_binds_whole_shapes(paddle):
    result = runner.invoke(app, ["plan", str(paddle), *SHAPES, "-s", "greedy_by_size,best_fit", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["strategy"] for r in rows] == ["greedy_by_size", "best_fit"] and all(r["valid"] for r in rows)
    # x (1x3x48x320 floats) is read while conv1's output (1x4x48x320) is written.
    assert rows[0]["lower_bound"] >= (3 + 4) * 48 * 320 * 4


def test_run_with_shapes_matches_onnxruntime(paddle):
    result = runner.invoke(app, ["run", str(paddle), *SHAPES, "--verify", "--json", "--repeat", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["outputs"] == {"y": [1, 2, 24, 160]}
    assert report["input_shapes"] == {"x": [1, 3, 48, 320], "bias": [1, 2, 1, 1]}
    verification = report["verification"]
    assert verification["oracle"] == "onnxruntime" and verification["passed"] is True, verification


def test_shape_and_dims_combine(tmp_path):
    path = save(classifier(), tmp_path, "classifier")
    result = runner.invoke(app, ["run", str(path), "--shape", "x=6x8", "--dims", "N=6", "--verify", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["input_shapes"] == {"x": [6, 8], "extra": [6, 4]} and report["verification"]["passed"] is True


def test_train_plan_takes_shapes(tmp_path):
    path = save(trainable(), tmp_path, "mlp")
    result = runner.invoke(app, ["train-plan", str(path), "--shape", "x=16x8", "--loss", "mse", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["unified"] > 16 * 16 * 4  # at least the hidden activations of the batch of 16
    unbound = one_line_error(runner.invoke(app, ["train-plan", str(path), "--loss", "mse"]))
    assert "input 'x' [-1, 8]: axis 0 (-1) unbound; bind it with --shape x=1x8" in unbound


def test_an_unbound_dim_names_the_input_the_axis_and_both_ways(paddle):
    line = one_line_error(runner.invoke(app, ["plan", str(paddle), "--shape", "bias=1x2x1x1"]))
    assert "input 'x' [-1, 3, '?', '?']: axis 0 (-1), axis 2 ('?'), axis 3 ('?') unbound" in line
    assert "--shape x=1x3x224x224" in line and "--dims ?=value" in line
    line = one_line_error(runner.invoke(app, ["run", str(paddle), "--shape", "x=1x3x48x320"]))
    assert "input 'bias' [0, 2, ?, 1]: axis 2 (unnamed) unbound; bind it with --shape bias=1x2x224x1" in line


@pytest.mark.parametrize("command", ["plan", "run", "train-plan"])
@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("z=1x3x8x8", "shape of 'z': the model has no input 'z'; its inputs are 'x' [-1, 3, '?', '?'], 'bias'"),
        ("x=1x3x8", "shape of 'x': 3 size(s) given, but input 'x' [-1, 3, '?', '?'] has rank 4; give 4 sizes"),
        ("x=1x3x0x8", "--shape x=1x3x0x8: input 'x' takes positive sizes, got 0 at axis 2"),
        ("x=1x3x-8x8", "--shape x=1x3x-8x8: input 'x' takes positive sizes, got -8 at axis 2"),
        ("x=1x3xHx8", "--shape x=1x3xHx8: 'H' (axis 2) is not a whole number; write e.g. --shape x=1x3x640x640"),
        ("1x3x8x8", "--shape '1x3x8x8' is not NAME=sizes; write e.g. --shape x=1x3x640x640"),
        ("x=1x4x8x8", "shape of 'x': axis 1 of input 'x' is fixed at 3 in the model, got 4"),
    ],
)
def test_bad_shapes_are_one_line_and_exit_2(paddle, command, shape, message):
    line = one_line_error(runner.invoke(app, [command, str(paddle), "--shape", shape, "--shape", "bias=1x2x1x1"]))
    assert message in line


def test_a_shape_given_twice_or_for_a_bare_problem_is_refused(paddle, tmp_path):
    line = one_line_error(runner.invoke(app, ["plan", str(paddle), "--shape", "x=1x3x8x8", "--shape", "x=1x3x9x9"]))
    assert "--shape x: given twice" in line
    problem = tmp_path / "problem.csv"
    problem.write_text("id,lower,upper,size\n0,0,2,64\n")
    line = one_line_error(runner.invoke(app, ["plan", str(problem), "--shape", "x=1"]))
    assert "--shape binds a model's inputs; a bare problem has none" in line


def test_a_shape_too_large_is_refused_naming_the_bytes(paddle):
    line = one_line_error(runner.invoke(app, ["run", str(paddle), "--shape", "x=1x3x100000x100000", *SHAPES[2:]]))
    assert "graph input 'x' of shape [1, 3, 100000, 100000] (float32) would take 120,000,000,000 bytes" in line
    assert "refused before allocating" in line
