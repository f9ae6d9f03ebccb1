"""`memplan run` through the real CLI: its `--json` is strict JSON (the verification object too,
when it passes, fails or falls back to onnx.reference), and no timed run is traced."""

from __future__ import annotations

import json
import math
import sys
import tracemalloc

import numpy as np
import pytest
from typer.testing import CliRunner

import runtime
import runtime.oracle
from app.cli import app
from tests.runtime.paddle_models import classifier, save

runner = CliRunner()
ARGS = ["--shape", "x=3x8", "--dims", "N=3", "--json", "--repeat", "2"]


@pytest.fixture
def model(tmp_path):
    return save(classifier(), tmp_path, "classifier")


def strict_json(text: str):
    """Parsed with NaN and Infinity refused: only what JSON allows."""

    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def check_verification(v: dict) -> None:
    """The verification object's shape, with JSON types only."""
    assert set(v) >= {"oracle", "passed", "tolerances", "outputs", "notes"}
    assert v["tolerances"] == {"rtol": runtime.oracle.RTOL, "atol": runtime.oracle.ATOL}
    assert isinstance(v["notes"], list) and all(isinstance(n, str) for n in v["notes"])
    for row in v["outputs"]:
        assert type(row["max_abs_diff"]) is float and math.isfinite(row["max_abs_diff"])
        assert type(row["mismatched"]) is int and type(row["close"]) is bool and type(row["shape_matches"]) is bool
        assert all(type(d) is int for d in row["shape"])


def test_verification_passes_as_a_json_object(model):
    result = runner.invoke(app, ["run", str(model), *ARGS, "--verify"])
    assert result.exit_code == 0, result.output
    report = strict_json(result.stdout)
    v = report["verification"]
    check_verification(v)
    assert v["oracle"] == "onnxruntime" and v["passed"] is True
    assert [row["name"] for row in v["outputs"]] == ["y"] and v["outputs"][0]["mismatched"] == 0
    assert type(report["seconds"]) is float and type(report["outside_arena_bytes"]) is int
    assert report["timed_runs"] == 2


def test_verification_that_fails_is_still_a_json_object(model, monkeypatch):
    real = runtime.oracle.oracle_outputs

    def off_by_one(*args, **kwargs):
        name, outputs, notes = real(*args, **kwargs)
        return name, {k: v + np.float32(1) for k, v in outputs.items()}, notes

    monkeypatch.setattr(runtime.oracle, "oracle_outputs", off_by_one)
    result = runner.invoke(app, ["run", str(model), *ARGS, "--verify"])
    assert result.exit_code == 1, result.output  # the outputs differ: exit 1, after the report
    v = strict_json(result.stdout)["verification"]
    check_verification(v)
    assert v["passed"] is False and v["outputs"][0]["close"] is False and v["outputs"][0]["mismatched"] == 12
    assert v["outputs"][0]["max_abs_diff"] == pytest.approx(1.0)


def test_verification_falling_back_to_onnx_reference(model, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails: not installed
    result = runner.invoke(app, ["run", str(model), *ARGS, "--verify"])
    assert result.exit_code == 0, result.output
    v = strict_json(result.stdout)["verification"]
    check_verification(v)
    assert v["oracle"] == "onnx.reference" and v["passed"] is True
    assert v["notes"][0].startswith("onnxruntime: ")


def test_timed_runs_are_never_traced(model, monkeypatch):
    """An on_step hook sees tracemalloc off in every timed run and on in the one memory run."""
    seen: list[tuple[str, set[bool]]] = []
    real_run = runtime.Session.run

    def observed(self, inputs=None, on_step=None, *, measure=None):
        tracing: set[bool] = set()
        seen.append((measure or self.measure, tracing))
        return real_run(self, inputs, lambda *step: tracing.add(tracemalloc.is_tracing()), measure=measure)

    monkeypatch.setattr(runtime.Session, "run", observed)
    result = runner.invoke(app, ["run", str(model), *ARGS[:-1], "3"])
    assert result.exit_code == 0, result.output
    assert seen == [("memory", {True}), ("time", {False}), ("time", {False}), ("time", {False})]
    report = strict_json(result.stdout)
    assert report["timed_runs"] == 3 and report["outside_arena_bytes"] is not None


def test_prepared_weights_off_reads_weights_as_stored(tmp_path):
    """--prepared-weights off: the same verified outputs, with only the stored parameter bytes held."""
    from onnx import numpy_helper

    from tests.memory_models import recurrent

    model, _ = recurrent("GRU")
    path = tmp_path / "gru.onnx"
    path.write_bytes(model.SerializeToString())
    stored = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    reports = {}
    for switch in ("on", "off"):
        result = runner.invoke(
            app, ["run", str(path), "--json", "--repeat", "1", "--verify", "--prepared-weights", switch]
        )
        assert result.exit_code == 0, result.output
        reports[switch] = strict_json(result.stdout)
        assert reports[switch]["verification"]["passed"] is True
    assert reports["off"]["prepared_weights"] is False and reports["off"]["parameter_bytes"] == stored
    assert reports["on"]["prepared_weights"] is True and reports["on"]["parameter_bytes"] > stored


def test_prepared_weights_takes_on_or_off(model):
    result = runner.invoke(app, ["run", str(model), *ARGS, "--prepared-weights", "no"])
    assert result.exit_code == 2
    assert "--prepared-weights takes on|off, got 'no'" in result.output
