"""The service's training memory: a stored model's training step by category, and the demo job.

Oracles: capacities against `runtime.training.plan_categories` called directly, the stored unified
plan through `planner.check_plan`, the demo's losses against its own SSE events, and the loss falling.
"""

from __future__ import annotations

import json
import re

import pytest

from planner import Plan, Problem, check_plan
from runtime import MemoryOptions
from runtime.training import CATEGORIES, build_training_step, plan_categories, training_problem
from runtime.training import models as training_models
from tests.patience import JOB_SECONDS

PROBLEM_JSON = "application/problem+json"


@pytest.fixture()
def cnn(client):
    model = training_models.small_cnn(batch=4, size=8, channels=(4, 8), classes=10, seed=0)
    r = client.post("/api/v1/models", files={"file": ("cnn.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"], model


def test_training_plan_matches_the_runtime_and_stores_a_checked_unified_plan(client, cnn):
    model_id, proto = cnn
    r = client.post(f"/api/v1/models/{model_id}/training-plans", json={"optimizer": "adam", "strategy": "best_fit"})
    assert r.status_code == 201, r.text
    out = r.json()
    direct = plan_categories(training_problem(build_training_step(proto, optimizer="adam")), "best_fit")
    assert out["capacities"] == direct.capacities
    assert out["unified_bytes"] == direct.unified.arena_bytes < out["per_category_total"]
    assert [c["category"] for c in out["categories"]] == list(CATEGORIES.values())
    # The unified bar: what each category holds at the peak step plus what is unused there is the arena.
    held = sum(c["unified_peak_bytes"] for c in out["categories"])
    assert held + out["unused_at_peak_bytes"] == out["unified_bytes"]
    stored = client.get(f"/api/v1/problems/{out['problem_id']}").json()
    problem = Problem.from_json(stored["problem"])
    plan = Plan.from_json(client.app.state.storage.get_plan(out["plan_id"]).plan)
    assert check_plan(problem, plan).ok and plan.arena_bytes == out["unified_bytes"]
    assert {b.kind for b in problem.buffers} <= set(CATEGORIES)
    page = client.get(out["links"]["plan"], params={"format": "json"}).json()
    assert page["plan"]["id"] == out["plan_id"] and page["runnable"] is False


def test_training_plan_errors_say_what_is_accepted(client, cnn):
    model_id, _ = cnn
    r = client.post(f"/api/v1/models/{model_id}/training-plans", json={"trainable": ["nope"]})
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM_JSON)
    assert "trainable 'nope'" in r.json()["detail"] and "float initializers" in r.json()["detail"]
    r = client.post(f"/api/v1/models/{model_id}/training-plans", json={"optimizer": "rmsprop"})
    assert r.status_code == 422 and "optimizer" in r.json()["detail"]
    r = client.post(f"/api/v1/models/{model_id}/training-plans", json={"dims": {"batch": 2}})
    assert r.status_code == 422 and "no symbolic dim 'batch'" in r.json()["detail"]
    assert client.post("/api/v1/models/missing/training-plans", json={}).status_code == 404


def _winograd_convs(client):
    """A stored model whose 3x3 convolutions Winograd takes, and its ONNX."""
    from tests.memory_models import winograd_convs

    model, _ = winograd_convs(channels=32, size=16)
    r = client.post("/api/v1/models", files={"file": ("convs.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"], model


def test_training_plan_takes_the_memory_options_of_a_training_step(client):
    """Oracle: the capacities `plan_categories` gives for the same step and options, called directly."""
    from runtime.kernels.conv import jit_winograd

    model_id, proto = _winograd_convs(client)
    step = build_training_step(proto, loss="mse", optimizer="sgd")
    outs = {}
    for key, options in (
        ("default", {}),
        ("prepared_off", {"prepared_weights": False}),
        ("no_workspace", {"workspace": False}),
        ("aligned", {"alignment": 256}),
    ):
        r = client.post(f"/api/v1/models/{model_id}/training-plans", json={"loss": "mse", **options})
        assert r.status_code == 201, r.text
        out = outs[key] = r.json()
        direct = plan_categories(training_problem(step, MemoryOptions(**options)), "greedy_by_size")
        assert out["capacities"] == direct.capacities and out["unified_bytes"] == direct.unified.arena_bytes, key
        assert {k: out["options"][k] for k in options} == options
        stored = client.get(f"/api/v1/problems/{out['problem_id']}").json()
        assert stored["options"]["training"] is True
        assert {k: stored["options"][k] for k in options} == options
        assert stored["problem"]["alignment"] == options.get("alignment", MemoryOptions().alignment)
    disposable = {key: out["capacities"]["disposable"] for key, out in outs.items()}
    assert disposable["no_workspace"] == 0 < disposable["default"]
    if jit_winograd.inputs is not None:  # Winograd's per-call weight transform is planned only where its loops run
        assert disposable["prepared_off"] < disposable["default"]


@pytest.mark.parametrize("field", ["io", "inplace", "concat_inplace", "fuse"])
def test_training_bodies_refuse_memory_options_a_training_step_does_not_take(client, cnn, field):
    model_id, _ = cnn
    value = "arena" if field == "io" else True
    for url in (f"/api/v1/models/{model_id}/training-plans", "/api/v1/training/demo"):
        r = client.post(url, json={field: value})
        assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM_JSON), r.text
        detail = r.json()["detail"]
        assert detail.startswith(f"request: {field}: a training step does not take this memory option"), detail
        assert "its memory options are alignment, workspace, prepared_weights" in detail
    r = client.post(f"/api/v1/models/{model_id}/training-plans", json={"prepared_weights": "sometimes"})
    assert r.status_code == 422 and "prepared_weights" in r.json()["detail"]
    r = client.post("/api/v1/training/demo", json={"alignment": 0})
    assert r.status_code == 422 and "alignment" in r.json()["detail"]


def test_training_demo_runs_with_the_memory_options_it_was_given(client):
    options = {"alignment": 256, "workspace": False, "prepared_weights": False}
    r = client.post("/api/v1/training/demo", json={"model": "cnn", "steps": 2, "batch": 8, **options})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert client.app.state.jobs.wait(job_id, JOB_SECONDS)
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "done", job.get("error")
    result = job["result"]
    assert {k: result["demo"][k] for k in options} == options
    # The first loss in the arena still matches onnx.reference's: the options change the memory, not the maths.
    assert abs(result["first_loss"] - result["verdict"]["reference_loss"]) <= 1e-4 * max(1.0, result["first_loss"])
    stored = client.get(f"/api/v1/problems/{result['problem_id']}").json()
    assert {k: stored["options"][k] for k in options} == options
    problem = Problem.from_json(stored["problem"])
    assert problem.alignment == 256 and not [b for b in problem.buffers if b.kind == "disposable"]
    assert result["capacities"]["disposable"] == 0
    # Oracle: `plan_categories` on the demo's step (its network rebuilt as the demo builds it), called
    # directly with the same options and with the defaults: the options shrink the arena by the scratch
    # left out. prepared_weights cannot show here: a trained network has no constant weight to prepare.
    demo = result["demo"]
    proto = training_models.small_cnn(batch=8, size=8, channels=(8, 16), classes=10, seed=demo["seed"])
    step = build_training_step(proto, optimizer=demo["optimizer"], hyper={"lr": 0.01})
    given, default = (
        plan_categories(training_problem(step, o), demo["strategy"]) for o in (MemoryOptions(**options), None)
    )
    assert result["capacities"] == given.capacities and result["arena_bytes"] == given.unified.arena_bytes
    assert default.capacities["disposable"] > 0 and result["arena_bytes"] < default.unified.arena_bytes
    plan = Plan.from_json(client.app.state.storage.get_plan(result["plan_id"]).plan)
    assert check_plan(problem, plan).ok  # alignment included: the problem's 256 bytes
    # The demo's page shows them, and its form offers them again (its JSON twin: `memory`).
    assert client.get(f"/training/demo/{job_id}", params={"format": "json"}).json()["memory"] == options
    page = client.get(f"/training/demo/{job_id}").text
    assert '<dd id="training-memory">alignment 256 bytes, workspace off, prepared weights off</dd>' in page
    form = _form(page, "training-form")
    assert 'name="alignment" value="256"' in form and _checked(form) == {"workspace": False, "prepared_weights": False}


def _form(page: str, form_id: str) -> str:
    """The HTML of the form `form_id` on `page`."""
    start = page.index(f'<form id="{form_id}"')
    return page[start : page.index("</form>", start)]


def _checked(form: str) -> dict[str, bool]:
    """Whether the form's workspace and prepared_weights boxes are checked."""
    boxes = dict(re.findall(r'<input type="checkbox" name="(workspace|prepared_weights)"( checked)?>', form))
    assert set(boxes) == {"workspace", "prepared_weights"}, form
    return {name: bool(checked) for name, checked in boxes.items()}


def test_training_forms_offer_the_memory_options_with_their_defaults(client, cnn):
    """The demo's form and the model page's training-plan form: the fields of the model page's plan form."""
    defaults = MemoryOptions()
    expected = {"alignment": defaults.alignment, "workspace": defaults.workspace}
    expected["prepared_weights"] = defaults.prepared_weights
    assert client.get("/training", params={"format": "json"}).json()["memory"] == expected
    model_id, _ = cnn
    pages = {"training-form": client.get("/training").text}
    pages["training-plan-form"] = pages["plan-form"] = client.get(f"/models/{model_id}").text
    for form_id, page in pages.items():
        form = _form(page, form_id)
        assert f'name="alignment" value="{defaults.alignment}"' in form, form_id
        assert _checked(form) == {"workspace": defaults.workspace, "prepared_weights": defaults.prepared_weights}


# Steps for the loss to halve on the 8x8 digits (scikit-learn's copy, in the test extra): the CNN learns slower.
STEPS = {"mlp": 30, "cnn": 100}


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_training_demo_streams_a_falling_loss(client, model):
    steps = STEPS[model]
    r = client.post("/api/v1/training/demo", json={"model": model, "steps": steps, "batch": 16})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["kind"] == "training" and job["links"]["page"] == f"/training/demo/{job['id']}"
    assert client.app.state.jobs.wait(job["id"], JOB_SECONDS)
    losses = []
    with client.stream("GET", f"/api/v1/jobs/{job['id']}/events") as stream:
        event = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "progress":
                data = json.loads(line[6:])
                if "loss" in data:
                    losses.append(data["loss"])
    result = client.get(f"/api/v1/jobs/{job['id']}").json()["result"]
    assert losses == result["losses"] and len(losses) == steps
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    assert result["unified_bytes"] <= result["per_category_total"]
    page = client.get(f"/training/demo/{job['id']}", params={"format": "json"}).json()
    assert page["page"] == "training" and page["job"]["result"]["losses"] == losses
    # The page draws the unified plan with the last step's time per node, one node per plan step.
    view = page["view"]
    assert view["selected"] == result["plan_id"] and view["plans"][0]["arena_bytes"] == result["unified_bytes"]
    assert [s["name"] for s in result["steps"]] == view["step_names"] and len(result["steps"]) == view["steps"]
    assert all(s["seconds"] > 0 for s in result["steps"])
    assert client.get(f"/jobs/{job['id']}", follow_redirects=False).headers["location"] == f"/training/demo/{job['id']}"
    assert client.get(result["links"]["plan"]).status_code == 200


def test_training_demo_refuses_bad_options(client):
    r = client.post("/api/v1/training/demo", json={"model": "resnet"})
    assert r.status_code == 422 and "model" in r.json()["detail"]
    r = client.post("/api/v1/training/demo", json={"steps": 0})
    assert r.status_code == 422 and "steps" in r.json()["detail"]
    assert client.get("/training", params={"format": "json"}).json()["page"] == "training"
    assert client.get("/training").status_code == 200
    assert client.get("/training/demo/nothing").status_code == 404
