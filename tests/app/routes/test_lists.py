"""Lists of earlier work through the real app: a model's plans and runs, every plan, pipelines and
sweeps, newest first and paged; a plan's record and page say the input shapes and memory options it
was planned with. Oracles: the ids the creating requests answered, in the order they were made."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import memory_models
from tests.patience import JOB_SECONDS


def conv_nchw() -> onnx.ModelProto:
    """x [N, 3, H, W] -> Conv 3x3 (4 channels, padded) -> Relu: a model whose spatial dims are open."""
    import numpy as np

    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_nchw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _upload(client, model, name: str) -> str:
    r = client.post("/api/v1/models", files={"file": (f"{name}.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _plan(client, model_id: str, **body) -> dict:
    r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size"], **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_models_plans_are_listed_newest_first_and_paged(client):
    model = _upload(client, conv_nchw(), "conv")
    made = [_plan(client, model, dims={"N": 1, "H": h, "W": h})["plans"][0]["id"] for h in (8, 16, 32)]
    page = client.get(f"/api/v1/models/{model}/plans?limit=2").json()
    assert [p["id"] for p in page["items"]] == made[::-1][:2]
    assert page["total"] == 3 and page["next"] == f"/api/v1/models/{model}/plans?limit=2&offset=2"
    rest = client.get(page["next"]).json()
    assert [p["id"] for p in rest["items"]] == made[:1] and rest["next"] is None
    assert rest["items"][0]["dims"] == {"N": 1, "H": 8, "W": 8}
    everything = client.get("/api/v1/plans").json()
    assert {p["id"] for p in everything["items"]} >= set(made)
    assert client.get("/plans").status_code == 200


@pytest.mark.parametrize(
    "query, field",
    [("limit=0", "limit"), ("limit=201", "limit"), ("offset=-1", "offset"), (f"offset={2**63}", "offset")],
)
@pytest.mark.parametrize("listing", ["plans", "sweeps", "notes"])
def test_bad_paging_is_422_naming_the_field_and_the_range(client, query, field, listing):
    r = client.get(f"/api/v1/{listing}?{query}")
    assert r.status_code == 422 and field in r.json()["detail"] and "accepted" in r.json()["detail"]


def test_a_plan_page_says_the_shapes_and_options_it_was_planned_with(client):
    model = _upload(client, conv_nchw(), "conv")
    plan = _plan(client, model, dims={"N": 2, "H": 40, "W": 24}, alignment=128, inplace=False)["plans"][0]
    context = client.get(f"/plans/{plan['id']}?format=json").json()["planned_with"]
    assert context["inputs"] == [{"name": "x", "shape": [2, 3, 40, 24], "how": "declared, N = 2, H = 40, W = 24"}]
    options = {o["name"]: o["value"] for o in context["options"]}
    assert options["alignment"] == "128" and options["inplace"] == "off" and options["fuse"] == "on"
    html = client.get(f"/plans/{plan['id']}").text
    assert "2 × 3 × 40 × 24" in html and "Planned with" in html


def test_the_model_page_asks_for_spatial_dims_and_prefills_only_the_batch(client):
    model = _upload(client, conv_nchw(), "conv")
    html = client.get(f"/models/{model}").text
    assert 'name="dim:N" value="1"' in html
    assert 'name="dim:H" placeholder="size?"' in html and 'name="dim:H" value' not in html
    # Left open, the server asks for it naming the input and the axis, and plans nothing.
    r = client.post(f"/api/v1/models/{model}/plans", json={"strategies": ["greedy_by_size"], "dims": {"N": 1}})
    assert r.status_code == 422 and "H" in r.json()["detail"]


def test_a_models_runs_are_listed_with_their_verdicts(client):
    model = _upload(client, memory_models.mlp(features=8, hidden=16, classes=4, seed=3), "mlp")
    r = client.post(f"/api/v1/models/{model}/runs", json={"strategy": "greedy_by_size", "dims": {"N": 2}})
    assert r.status_code == 202, r.text
    job = r.json()
    assert client.app.state.jobs.wait(job["id"], JOB_SECONDS)
    listed = client.get(f"/api/v1/models/{model}/runs").json()
    assert [run["id"] for run in listed["items"]] == [job["id"]] and listed["total"] == 1
    assert listed["items"][0]["verdict"] == "passed"  # the run's own page says the same (onnxruntime)
    assert job["id"] in client.get(f"/models/{model}").text


def test_pipelines_and_sweeps_are_listed(client):
    first = _upload(client, memory_models.mlp(features=32, hidden=64, classes=16, seed=1), "first")
    second = _upload(client, memory_models.mlp(features=16, hidden=48, classes=10, seed=2), "second")
    body = {"models": {"a": first, "b": second}, "connections": {"a:y": "b:x"}, "dims": {"a": {"N": 4}, "b": {"N": 4}}}
    made = client.post("/api/v1/pipelines", json=body).json()
    listed = client.get("/api/v1/pipelines").json()
    assert [p["id"] for p in listed["items"]] == [made["id"]]
    assert listed["items"][0]["joint_arena_bytes"] == made["joint_arena_bytes"]
    assert made["links"]["page"] in client.get("/pipelines").text
    sweep = client.post("/api/v1/sweeps", json={"models": [first], "strategies": ["naive"], "dims": [{"N": 1}]})
    assert sweep.status_code == 202, sweep.text
    sweeps = client.get("/api/v1/sweeps").json()
    assert [s["id"] for s in sweeps["items"]] == [sweep.json()["id"]]
    assert f"/sweeps/{sweep.json()['id']}" in client.get("/sweeps").text


def test_recent_notes_are_listed_on_the_home_page_and_over_rest(client):
    model = _upload(client, conv_nchw(), "conv")
    plan = _plan(client, model, dims={"N": 1, "H": 8, "W": 8})["plans"][0]
    first = client.post(f"/api/v1/plans/{plan['id']}/notes", json={"text": "why so big?"}).json()
    second = client.post(f"/api/v1/plans/{plan['id']}/notes", json={"text": "ask for H=640"}).json()
    listed = client.get("/api/v1/notes?limit=1").json()
    assert [n["id"] for n in listed["items"]] == [second["id"]] and listed["total"] == 2
    assert client.get(listed["next"]).json()["items"][0]["id"] == first["id"]
    html = client.get("/").text
    assert "ask for H=640" in html and f"/plans/{plan['id']}" in html
