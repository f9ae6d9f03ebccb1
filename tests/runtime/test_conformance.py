"""The ONNX backend and the conformance runner: a fast sample of onnx's own suite.

The full run (every node test of every supported op, all nine light models) is the
command ``python -m runtime.conformance --markdown docs/CONFORMANCE.md``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.backend import MemplanBackend
from runtime.conformance import EXCEPTIONS, run_conformance
from runtime.kernels import get_kernel


def test_backend_runs_positional_inputs_on_cpu_only():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"])], "add", [x, z], [y]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    a, b = np.ones((2, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = MemplanBackend.prepare(model, "CPU").run([a, b])
    np.testing.assert_array_equal(out, ReferenceEvaluator(model).run(None, {"x": a, "z": b})[0])
    assert MemplanBackend.supports_device("CPU") and not MemplanBackend.supports_device("CUDA")
    with pytest.raises(ValueError, match="CPU"):
        MemplanBackend.prepare(model, "CUDA")


@pytest.fixture(scope="module")
def sample():
    no_kernel = next(op for op in ("Shrink", "SpaceToDepth", "Det", "Hardmax", "TopK") if get_kernel(op) is None)
    seen = []
    report = run_conformance(
        ["Relu", "Reshape", "Dropout", no_kernel], ["squeezenet"], progress=lambda t, s: seen.append((t, s))
    )
    return report, no_kernel, seen


def test_sample_passes_every_supported_node_test_and_the_light_model(sample):
    report, no_kernel, seen = sample
    totals = report.totals()
    assert totals["failed"] == 0, [o for o in report.node if o.status == "failed"]
    assert totals["passed"] >= 12
    assert [(o.test, o.status) for o in report.models] == [("squeezenet", "passed")]
    assert ("test_squeezenet_cpu", "passed") in seen and ("test_relu_cpu", "passed") in seen


def test_listed_exceptions_are_skipped_with_their_reason(sample):
    report, _, _ = sample
    skipped = {o.test: o.reason for o in report.node if o.status == "skipped"}
    assert skipped["test_training_dropout"] == EXCEPTIONS["test_training_dropout"]


def test_ops_without_kernels_are_counted_unsupported_not_run(sample):
    report, no_kernel, seen = sample
    # Its own tests need its kernel; its "_expanded" variants (the op written as a function
    # of other ops) run when memplan has kernels for all of those.
    mine = [o for o in report.node if o.op == no_kernel and "_expanded" not in o.test]
    assert mine and all(o.status == "unsupported" and no_kernel in o.reason for o in mine)
    ran = {test.removesuffix("_cpu") for test, _ in seen}
    assert not ran & {o.test for o in mine}


def test_report_renders_as_markdown_and_json(sample):
    report, no_kernel, _ = sample
    text = report.to_markdown()
    assert "| squeezenet | passed |" in text and "| Relu |" in text and f"{no_kernel} (" in text
    data = json.loads(json.dumps(report.to_json()))
    assert data["schema"] == "memplan.conformance/1"
    assert data["by_op"]["Relu"]["passed"] >= 1
