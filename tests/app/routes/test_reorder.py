"""A memory-aware order through REST: planned in it, stored with the plans, and run in it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import runtime
from planner import load
from tests.patience import JOB_SECONDS


def upload(client, model: onnx.ModelProto) -> str:
    r = client.post("/api/v1/models", files={"file": ("branches.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def run(client, model_id: str, body: dict) -> dict:
    r = client.post(f"/api/v1/models/{model_id}/runs", json=body)
    assert r.status_code == 202, r.text
    assert client.app.state.jobs.wait(r.json()["id"], JOB_SECONDS)
    return client.get(f"/api/v1/jobs/{r.json()['id']}").json()


def two_branches() -> onnx.ModelProto:
    """x -> x@W1 (wide) -> @V1 (narrow) and the same on a second branch, summed; the file runs both
    wide products first, so both are alive together, where branch by branch only one would be."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.standard_normal((64, 2048)),
        "w2": rng.standard_normal((64, 2048)),
        "v1": rng.standard_normal((2048, 1)),
        "v2": rng.standard_normal((2048, 1)),
    }
    inits = [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="wide1"),
        helper.make_node("MatMul", ["x", "w2"], ["m2"], name="wide2"),
        helper.make_node("MatMul", ["m1", "v1"], ["r1"], name="narrow1"),
        helper.make_node("MatMul", ["m2", "v2"], ["r2"], name="narrow2"),
        helper.make_node("Add", ["r1", "r2"], ["y"], name="sum"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_branches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_plan_in_a_memory_aware_order_is_lower_and_runs_in_that_order(client):
    model = two_branches()
    model_id = upload(client, model)
    r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size"], "reorder": True})
    assert r.status_code == 200, r.text
    made = r.json()
    assert made["reorder"]["method"] == "exact" and made["reorder"]["proven"] is True
    # Independently of the search: LOAD in the file's order, and with one wide product alive at a time.
    in_file_order = load(runtime.memory_problem(runtime.load_model(model)))
    plan = made["plans"][0]
    assert plan["lower_bound"] < in_file_order
    assert plan["lower_bound"] <= in_file_order - 2048 * 4 + 64
    page = client.get(f"/plans/{plan['id']}?format=json").json()
    names = page["view"]["step_names"]
    assert names.index("narrow1") < names.index("wide2") or names.index("narrow2") < names.index("wide1")
    # The run executes the nodes in the stored order (the plan's lifetimes hold only there).
    job = run(client, model_id, {"plan_id": plan["id"], "seed": 1})
    assert job["state"] == "done", job["error"]
    assert job["result"]["verdict"]["passed"] is True
    steps = [s["name"] for s in job["result"]["steps"]]
    assert steps == [n for n in names if n in steps]


def test_reorder_is_off_unless_asked(client):
    model_id = upload(client, two_branches())
    made = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size"]}).json()
    assert made["reorder"] is None
    page = client.get(f"/plans/{made['plans'][0]['id']}?format=json").json()
    assert page["view"]["step_names"][:2] == ["wide1", "wide2"]
