"""Runs followed from the plan page: per-step progress events, and the canary catching a broken
plan at the step and tensor where it corrupts data, with the bytes it clobbered."""

from __future__ import annotations

from app.storage import PlanRecord, new_id
from planner import Placement, Plan
from tests.patience import JOB_SECONDS
from tests.runtime.test_session import small_cnn


def _finished(client, job_id: str, timeout: float = JOB_SECONDS) -> dict:
    assert client.app.state.jobs.wait(job_id, timeout), f"job {job_id} did not finish"
    return client.get(f"/api/v1/jobs/{job_id}").json()


def _planned(client) -> tuple[str, dict]:
    r = client.post("/api/v1/models", files={"file": ("cnn.onnx", small_cnn().SerializeToString())})
    model_id = r.json()["id"]
    made = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size"], "dims": {"N": 2}})
    assert made.status_code == 200, made.text
    return model_id, made.json()


def store_broken_plan(storage, plan_doc: dict) -> tuple[str, int, int]:
    """A plan of the same problem as `plan_doc` with tensor h placed on top of r, which is still
    live, stored as is (invalid); its id, r's offset and how many bytes of r h covers."""
    plan = Plan.from_json(plan_doc)
    sizes = {b["id"]: b["size"] for b in plan_doc["buffers"]}
    offsets = dict(plan.offsets)
    offsets["h"] = Placement(plan.offsets["r"].pool, plan.offsets["r"].offset)
    broken = Plan("broken", offsets, plan.pool_sizes, plan.lower_bound, plan.naive)
    record = PlanRecord(
        id=new_id(),
        problem_id=plan_doc["problem_id"],
        strategy="broken",
        arena_bytes=broken.arena_bytes,
        lower_bound=broken.lower_bound,
        naive_bytes=broken.naive,
        seconds=0.0,
        valid=False,
        violations=["h overlaps r"],
        plan=broken.to_json(),
    )
    storage.add_plans(problem_id=plan_doc["problem_id"], plans=[record])
    return record.id, plan.offsets["r"].offset, min(sizes["r"], sizes["h"])


def test_a_run_reports_every_step_with_its_time(client):
    model_id, made = _planned(client)
    r = client.post(f"/api/v1/models/{model_id}/runs", json={"plan_id": made["plans"][0]["id"], "canary": True})
    assert r.status_code == 202, r.text
    job = _finished(client, r.json()["id"])
    assert job["state"] == "done", job["error"]
    events = [
        line for line in client.get(f"/api/v1/jobs/{job['id']}/events").text.split("\n\n") if "event: progress" in line
    ]
    steps = [s["step"] for s in job["result"]["steps"]]
    assert steps == list(range(len(steps))) and all(s["seconds"] >= 0 for s in job["result"]["steps"])
    assert sum('"step"' in e for e in events) == len(steps)  # one progress event per step, each with its step


def test_the_canary_catches_a_broken_plan_at_its_step_and_tensor(app, client):
    model_id, made = _planned(client)
    doc = client.get(f"/api/v1/plans/{made['plans'][0]['id']}").json()
    broken, start, overlap = store_broken_plan(app.state.storage, doc)
    refused = client.post(f"/api/v1/models/{model_id}/runs", json={"plan_id": broken})
    assert refused.status_code == 409 and "canary" in refused.json()["detail"]
    r = client.post(f"/api/v1/models/{model_id}/runs", json={"plan_id": broken, "canary": True})
    assert r.status_code == 202, r.text
    job = _finished(client, r.json()["id"])
    assert job["state"] == "failed"
    hit = job["error"]["canary"]
    # 'halve' writes h over r, which 'add' still needs (step 2).
    assert (hit["step"], hit["node"]) == (2, "halve")
    assert hit["tensors"] == [{"name": "r", "first_byte": start, "end": start + overlap, "bytes": overlap}]
    assert "canary" in job["error"]["detail"]
