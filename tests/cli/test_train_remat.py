"""`memplan train-plan --remat` and `memplan train --remat`: recomputation chosen by the placed arena.

Oracles: the step rebuilt here and rematerialized with the tensors the answer names, planned with
`plan_categories` directly; the demo's losses without recomputation (they must be the same numbers)."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from app.cli import app
from runtime.training import build_training_step, models, plan_categories, training_problem
from runtime.training.remat import rematerialize

runner = CliRunner()
FIELDS = {
    "recomputed",
    "extra_flops",
    "arena_bytes",
    "arena_bytes_without",
    "activation_bytes",
    "activation_bytes_without",
    "budget_met",
    "curve",
}


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    model = models.transformer_encoder(batch=2, tokens=4, features=8, heads=2, layers=2, classes=3)
    path = tmp_path_factory.mktemp("remat") / "encoder.onnx"
    onnx.save(model, path)
    return path, model


def _json(*args: str) -> dict:
    result = runner.invoke(app, ["train-plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_train_plan_remat_auto_reports_the_placed_arena_of_what_it_recomputes(encoder):
    path, model = encoder
    out = _json(str(path), "--remat", "auto", "--remat-overhead", "0.3")
    remat = out["remat"]
    assert set(remat) == FIELDS
    assert remat["recomputed"] and remat["budget_met"] is True
    assert 0 < remat["extra_flops"] <= 0.3
    step = build_training_step(model, recompute=False)
    without = plan_categories(training_problem(step), "greedy_by_size").unified.arena_bytes
    again = plan_categories(training_problem(rematerialize(step, remat["recomputed"])), "greedy_by_size")
    assert remat["arena_bytes_without"] == without
    assert remat["arena_bytes"] == again.unified.arena_bytes == out["unified"] < without
    assert remat["activation_bytes"] < remat["activation_bytes_without"]
    curve = remat["curve"]
    assert curve[0] == {"extra_flops": 0.0, "arena_bytes": without}
    assert all(a["arena_bytes"] > b["arena_bytes"] for a, b in zip(curve, curve[1:], strict=False))
    assert "remat" not in _json(str(path))  # off by default: the answer is as it was


def test_a_budget_below_reach_gets_the_closest_point_and_says_so(encoder):
    path, _ = encoder
    smallest = _json(str(path), "--remat", "auto")["remat"]
    out = _json(str(path), "--remat", "1000")["remat"]
    assert out["budget_met"] is False and out["arena_bytes"] == smallest["arena_bytes"]
    generous = _json(str(path), "--remat", "1")["remat"]  # the whole arena without recomputation
    assert generous["budget_met"] is True and generous["recomputed"] == []
    half_way = (smallest["arena_bytes"] + smallest["arena_bytes_without"]) // 2
    met = _json(str(path), "--remat", str(half_way))["remat"]
    assert met["budget_met"] is True and smallest["arena_bytes"] <= met["arena_bytes"] <= half_way
    assert met["extra_flops"] <= smallest["extra_flops"]


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--remat", "-5"), ("--remat", "lots"), ("--remat", "0"), ("--remat-overhead", "-0.1"), ("--remat-overhead", "x")],
)
def test_bad_remat_values_exit_2_naming_the_flag(encoder, flag, value):
    extra = ["--remat", "auto"] if flag == "--remat-overhead" else []
    for args in (["train-plan", str(encoder[0])], ["train", "--steps", "1"]):
        result = runner.invoke(app, [*args, *extra, f"{flag}={value}"])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"memplan: error: {flag}={value!r}: "), result.stderr


def _losses(*flags: str) -> tuple[list[float], str]:
    result = runner.invoke(app, ["train", "--model", "cnn", "--steps", "4", "--batch", "8", "--every", "1", *flags])
    assert result.exit_code == 0, result.output
    losses = [float(x) for x in re.findall(r"^step +\d+ +loss (\S+)$", result.stdout, flags=re.MULTILINE)]
    return losses, result.stdout


def test_train_with_recomputation_takes_the_same_steps():
    plain, _ = _losses()
    again, out = _losses("--remat", "auto", "--remat-overhead", "0.5")
    assert again == plain and len(plain) == 4 and np.isfinite(plain).all()
    line = re.search(r"^remat: (\d+) tensors recomputed, .*arena (\d+) bytes \(without: (\d+)\)", out, re.MULTILINE)
    assert line and int(line[1]) > 0 and int(line[2]) < int(line[3]), out
