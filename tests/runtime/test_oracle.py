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


# ---- tolerances that follow the arithmetic ------------------------------------------------------


def matmul_softmax(k: int, n: int, weight: float) -> bytes:
    """x[1, k] @ W[k, n] -> Softmax, every column of W equal: in exact arithmetic every logit is the
    same, so the softmax is uniform, and whether float32 keeps them tied depends on summation order."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((k, n), weight, np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["logits"]), helper.make_node("Softmax", ["logits"], ["y"])],
        "tied",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def sums_in_another_order(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w in float32, each column summed sequentially from a different starting term: what
    another correct implementation (another BLAS kernel, another tile size) may do."""
    terms = (x.reshape(-1, 1) * w).astype(np.float32)
    cols = [np.add.accumulate(np.roll(terms[:, j], j))[-1] for j in range(w.shape[1])]
    return np.asarray(cols, dtype=np.float32).reshape(1, -1)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z.astype(np.float64) - z.max())
    return (e / e.sum()).astype(np.float32)


def test_an_element_near_zero_is_judged_on_its_outputs_scale():
    """A long dot product summed in another order: elements that cancel to near zero differ by more
    than atol from onnxruntime, by far less than the size of what was summed."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    k, n = 4096, 256
    x = (10 * rng.standard_normal((1, k))).astype(np.float32)
    w = rng.standard_normal((k, n))
    w[:, :8] -= np.outer(x[0], x[0] @ w[:, :8]) / (x[0] @ x[0])  # eight columns that cancel to near zero
    w = w.astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "dot",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    other = sums_in_another_order(x, w)
    want = expected_of(model, {"x": x})["y"]
    # A per-element rtol/atol check calls this correct result wrong somewhere...
    assert not np.allclose(other, want, rtol=1e-3, atol=1e-4)
    verdict = verify(model, {"x": x}, {"y": other})
    assert verdict["verdict"] == "passed" and verdict["passed"] is True, verdict
    assert "rms" in verdict["check"]
    # ...while a result 1% off is still caught.
    wrong = verify(model, {"x": x}, {"y": other * np.float32(1.01)})
    assert wrong["verdict"] == "failed" and wrong["passed"] is False and wrong["outputs"][0]["mismatched"] > n // 2


def expected_of(model: bytes, feeds) -> dict[str, np.ndarray]:
    from runtime.oracle import oracle_outputs

    _, outputs, _ = oracle_outputs(model, feeds)
    assert outputs is not None
    return outputs


def test_an_ill_conditioned_output_is_reported_and_judged_by_its_witnesses():
    k, n = 512, 1000
    model = matmul_softmax(k, n, 0.37)
    x = (np.random.default_rng(0).standard_normal((1, k)) * 3e7).astype(np.float32)
    logits = sums_in_another_order(x, np.full((k, n), 0.37, np.float32))
    assert len(np.unique(logits)) > 1  # another order breaks the ties that onnxruntime keeps
    outputs = {"y": softmax(logits)}
    seen: list[list[str]] = []

    def capture(names):
        seen.append(list(names))
        return {"logits": logits}

    verdict = verify(model, {"x": x}, outputs, capture=capture)
    assert json_only(verdict), verdict
    assert verdict["verdict"] == "ill-conditioned" and verdict["passed"] is True, verdict
    (row,) = verdict["outputs"]
    assert row["ill_conditioned"] > 0 and row["close"] is False
    assert "logits" in seen[0] and [w["name"] for w in row["witnesses"]] == ["logits"]
    assert row["witnesses"][0]["close"] is True and "judged by 'logits'" in row["evidence"]
    assert "spread" in verdict["check"]
    # Without memplan's intermediate values nothing decides: not a pass, not a failure.
    undecided = verify(model, {"x": x}, outputs)
    assert undecided["verdict"] == "ill-conditioned" and undecided["passed"] is None
    # A wrong witness is a failure, whatever the output.
    wrong = verify(model, {"x": x}, outputs, capture=lambda names: {"logits": logits * np.float32(1.01)})
    assert wrong["verdict"] == "failed" and wrong["passed"] is False


def test_a_deliberately_wrong_plan_fails_on_an_ill_conditioned_model():
    """The light squeezenet's softmax is ill-conditioned (constant weights, logits near 6.8e9): its
    verdict rests on witnesses, which a plan that overlaps two live tensors corrupts."""
    import os

    import onnx

    import planner
    from runtime import Session, load_model, memory_problem
    from runtime.oracle import random_inputs
    from tests.runtime.test_session import put_on_top

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
    graph = load_model(path)
    feeds = random_inputs(graph, 0)
    problem = memory_problem(graph)
    plan = planner.plan(problem, "greedy_by_size")
    right = Session(graph, plan)
    good = verify(path, feeds, right.run(feeds), capture=lambda names: right.capture(feeds, names))
    assert good["passed"] is True and good["verdict"] in ("passed", "ill-conditioned"), good
    # Two tensors the checker says must not share bytes, put on the same ones; of those pairs, the
    # last one whose overlap changes what memplan computes (some overlaps happen to be harmless).
    logits = [n for n in graph.tensors if graph.tensors[n].producer == graph.nodes[-2].name]
    own = [b for b in problem.buffers if b.alias_of is None and b.kind == "activation"]
    for a, b in ((a, b) for b in reversed(own) for a in reversed(own) if a.id != b.id and a.overlaps_in_time(b)):
        wrong = put_on_top(problem, plan, a.id, b.id)
        if planner.check_plan(problem, wrong).ok:
            continue
        broken = Session(graph, wrong, check=False)
        if not np.array_equal(broken.capture(feeds, logits)[logits[0]], right.capture(feeds, logits)[logits[0]]):
            break
    else:
        raise AssertionError("no overlap of two live tensors changed squeezenet's logits")
    bad = verify(path, feeds, broken.run(feeds), capture=lambda names: broken.capture(feeds, names))
    assert bad["verdict"] == "failed" and bad["passed"] is False, bad
