"""The REST API switches every memory option the CLI can (in place, concat in place, fusion,
prepared weights), and the plan page's yardsticks agree with the plans' own figures whatever the options."""

from __future__ import annotations

import onnx
import pytest

from app.services.library import EXAMPLES_DIR
from tests.patience import JOB_SECONDS


@pytest.fixture()
def resnet(client) -> str:
    r = client.post("/api/v1/examples/resnet50")
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _plan(client, model_id: str, **options) -> dict:
    r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size", "naive"], **options})
    assert r.status_code == 200, r.text
    return r.json()


def _buffers(client, problem_id: str) -> list[dict]:
    return client.get(f"/api/v1/problems/{problem_id}").json()["problem"]["buffers"]


def test_in_place_on_makes_aliases_and_the_chart_counts_them_once_like_the_table(client, resnet):
    made = _plan(client, resnet)
    buffers = _buffers(client, made["problem_id"])
    aliased = [b for b in buffers if b.get("alias_of")]
    assert aliased, "ResNet-50's Relu and Add write over their input with in place on"
    page = client.get(made["plans"][0]["links"]["page"] + "?format=json").json()
    view = page["view"]
    # The naive sum counts an alias group once: below the plain sum of the buffers' sizes.
    assert view["naive"] < sum(b["size"] for b in buffers)
    assert {p["naive_bytes"] for p in page["plans"]} == {view["naive"]}
    assert {p["lower_bound"] for p in page["plans"]} == {view["load"]}
    # The naive plan stacks every group: the naive sum plus at most alignment - 1 bytes of padding per group.
    naive_plan = next(p for p in page["plans"] if p["strategy"] == "naive")
    groups = len(buffers) - len(aliased)
    assert view["naive"] <= naive_plan["arena_bytes"] <= view["naive"] + (view["alignment"] - 1) * groups


def test_in_place_and_concat_in_place_off_leave_only_the_view_aliases(client, resnet):
    model = onnx.load(EXAMPLES_DIR / "light_resnet50.onnx")
    views = [n for n in model.graph.node if n.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze")]
    on = [b for b in _buffers(client, _plan(client, resnet)["problem_id"]) if b.get("alias_of")]
    made = _plan(client, resnet, inplace=False, concat_inplace=False)
    buffers = _buffers(client, made["problem_id"])
    off = [b for b in buffers if b.get("alias_of")]
    assert len(off) <= len(views) < len(on)  # a view shares its input's bytes whatever the switches
    aliased = sum(b["size"] for b in off)
    naive_plan = next(p for p in made["plans"] if p["strategy"] == "naive")
    assert naive_plan["naive_bytes"] == sum(b["size"] for b in buffers) - aliased
    stored = client.get(f"/api/v1/problems/{made['problem_id']}").json()["options"]
    assert (stored["inplace"], stored["concat_inplace"], stored["fuse"]) == (False, False, True)


def test_fusion_off_keeps_every_batch_norm_as_a_step(client, resnet):
    model = onnx.load(EXAMPLES_DIR / "light_resnet50.onnx")
    batch_norms = sum(n.op_type == "BatchNormalization" for n in model.graph.node)
    assert batch_norms > 0
    fused = client.get(f"/api/v1/problems/{_plan(client, resnet)['problem_id']}").json()["problem"]
    kept = client.get(f"/api/v1/problems/{_plan(client, resnet, fuse=False)['problem_id']}").json()["problem"]
    assert kept["steps"] - fused["steps"] >= batch_norms


def test_a_run_follows_the_options_it_was_given(client, resnet):
    r = client.post(f"/api/v1/models/{resnet}/runs", json={"strategy": "greedy_by_size", "inplace": False})
    assert r.status_code == 202, r.text
    job = _finished(client, r.json()["id"])
    assert job["result"]["options"]["inplace"] is False and job["result"]["verdict"]["passed"] is True
    assert job["result"]["rerun"]["body"]["inplace"] is False


def test_unknown_memory_fields_and_bad_values_are_422(client, resnet):
    r = client.post(f"/api/v1/models/{resnet}/plans", json={"inplace": "sometimes"})
    assert r.status_code == 422 and "inplace" in r.json()["detail"]
    r = client.post(f"/api/v1/models/{resnet}/plans", json={"alignment": 0})
    assert r.status_code == 422 and "alignment" in r.json()["detail"]
    r = client.post(f"/api/v1/models/{resnet}/plans", json={"prepared_weights": "sometimes"})
    assert r.status_code == 422 and "prepared_weights" in r.json()["detail"]


def test_prepared_weights_off_is_planned_stored_and_run_with_fewer_parameter_bytes(client):
    """Winograd's scratch leaves the plan, the stored options say so, and a run holds only the stored weights."""
    from onnx import numpy_helper

    from runtime.kernels.conv import jit_winograd
    from tests.memory_models import winograd_convs

    model, _ = winograd_convs()
    r = client.post("/api/v1/models", files={"file": ("convs.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    model_id = r.json()["id"]
    on, off = _plan(client, model_id), _plan(client, model_id, prepared_weights=False)
    stored = client.get(f"/api/v1/problems/{off['problem_id']}").json()["options"]
    assert stored["prepared_weights"] is False
    assert client.get(f"/api/v1/problems/{on['problem_id']}").json()["options"]["prepared_weights"] is True
    scratch = [sum(b["size"] for b in _buffers(client, m["problem_id"]) if b["kind"] == "workspace") for m in (on, off)]
    if jit_winograd.inputs is not None:  # Winograd's scratch is planned only where its loops run
        assert scratch[1] < scratch[0]
    weights = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    held = {}
    for key, switch in (("on", True), ("off", False)):
        r = client.post(
            f"/api/v1/models/{model_id}/runs", json={"strategy": "greedy_by_size", "prepared_weights": switch}
        )
        assert r.status_code == 202, r.text
        job = _finished(client, r.json()["id"])
        assert job["result"]["verdict"]["passed"] is True
        assert job["result"]["options"]["prepared_weights"] is switch
        assert job["result"]["rerun"]["body"]["prepared_weights"] is switch
        held[key] = job["result"]["stats"]["constant_bytes"]
    assert held["off"] == weights
    if jit_winograd.inputs is not None:
        assert held["on"] > weights


def _finished(client, job_id: str) -> dict:
    assert client.app.state.jobs.wait(job_id, JOB_SECONDS), f"job {job_id} did not finish"
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "done", job.get("error")
    return job
