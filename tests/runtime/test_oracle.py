"""runtime.oracle.verify: a verdict made of JSON types only, whether it passes, fails (different
values, NaN where the oracle has a number, a wrong shape, a missing output) or falls back."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from runtime.oracle import verify
from tests.runtime.paddle_models import classifier

FEEDS = {"x": np.ones((2, 8), np.float32), "extra": np.zeros((2, 4), np.float32)}


def json_only(value) -> bool:
    """True when `value` is made of JSON's types alone (no numpy scalars), floats finite."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(json_only(v) for v in value)
    if isinstance(value, float):
        return type(value) is float and math.isfinite(value)
    return value is None or type(value) in (str, int, bool)


def expected() -> np.ndarray:
    from runtime.oracle import oracle_outputs

    _, outputs, _ = oracle_outputs(classifier().SerializeToString(), FEEDS)
    assert outputs is not None
    return outputs["y"]


def test_a_passing_verdict():
    verdict = verify(classifier().SerializeToString(), FEEDS, {"y": expected()})
    assert json_only(verdict) and json.loads(json.dumps(verdict, allow_nan=False)) == verdict
    assert verdict["passed"] is True and verdict["tolerances"] == {"rtol": 1e-3, "atol": 1e-4}
    (row,) = verdict["outputs"]
    assert row["close"] is True and row["mismatched"] == 0 and row["shape"] == [2, 4]


@pytest.mark.parametrize(
    ("outputs", "mismatched", "nonfinite"),
    [
        (lambda y: {"y": y + 1}, 8, 0),
        (lambda y: {"y": np.where(np.arange(8).reshape(2, 4) == 3, np.nan, y).astype(np.float32)}, 1, 1),
        (lambda y: {"y": y[:1]}, 8, 0),
        (lambda y: {"y": y, "z": y}, 8, 0),
    ],
    ids=["values", "nan", "shape", "unknown output"],
)
def test_a_failing_verdict_is_json_too(outputs, mismatched, nonfinite):
    verdict = verify(classifier().SerializeToString(), FEEDS, outputs(expected()))
    assert json_only(verdict), verdict
    assert verdict["passed"] is False
    bad = [row for row in verdict["outputs"] if not row["close"]]
    assert len(bad) == 1 and bad[0]["mismatched"] == mismatched and bad[0]["nonfinite_mismatched"] == nonfinite


def test_falling_back_to_onnx_reference_and_finding_no_oracle(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now fails
    verdict = verify(classifier().SerializeToString(), FEEDS, {"y": expected()})
    assert verdict["oracle"] == "onnx.reference" and verdict["passed"] is True and json_only(verdict)
    assert verdict["notes"][0].startswith("onnxruntime: ")
    none = verify(b"not a model", FEEDS, {"y": expected()})
    assert none["oracle"] is None and none["passed"] is None and json_only(none)
    assert json_only(verify(b"", FEEDS, {}, prefer="none"))
