"""A pipeline's verdict follows the arithmetic as a run's does: an output of the chain that the last
model's oracle cannot reproduce itself is ill-conditioned (yellow, undecided), not a failure; a wrong
output where the oracle is sure of itself is a failure."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from app.services.pipelines import chained_verdict
from tests.runtime.test_oracle import matmul_softmax, softmax, sums_in_another_order

K, N = 512, 1000


def _scale(path):
    """x[1, K] -> Mul by 3e7: the first model of the chain."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["y"])],
        "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, K])],
        [numpy_helper.from_array(np.array(3e7, np.float32), "s")],
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def _chain(tmp_path):
    first = _scale(tmp_path / "scale.onnx")
    second = tmp_path / "tied.onnx"
    second.write_bytes(matmul_softmax(K, N, 0.37))
    return {"a": first, "b": second}, {"a:y": "b:x"}


def test_an_ill_conditioned_chain_output_is_undecided_not_failed(tmp_path):
    paths, connections = _chain(tmp_path)
    x = np.random.default_rng(0).standard_normal((1, K)).astype(np.float32)
    logits = sums_in_another_order(x * np.float32(3e7), np.full((K, N), 0.37, np.float32))
    verdict = chained_verdict(paths, connections, {"a:x": x}, {"b:y": softmax(logits)}, "auto")
    (row,) = verdict["outputs"]
    assert verdict["verdict"] == "ill-conditioned" and verdict["passed"] is None, verdict
    assert row["ill_conditioned"] > 0 and "move by up to" in row["evidence"]


def test_a_wrong_output_of_a_well_conditioned_chain_fails(tmp_path):
    paths, connections = _chain(tmp_path)
    x = (np.random.default_rng(0).standard_normal((1, K)) * 1e-9).astype(np.float32)  # logits near 0: a soft softmax
    right = softmax(sums_in_another_order(x * np.float32(3e7), np.full((K, N), 0.37, np.float32)))
    assert chained_verdict(paths, connections, {"a:x": x}, {"b:y": right}, "auto")["passed"] is True
    wrong = chained_verdict(paths, connections, {"a:x": x}, {"b:y": right * np.float32(1.5)}, "auto")
    assert wrong["verdict"] == "failed" and wrong["passed"] is False
