"""`shapes` in the REST plan, run and training-plan bodies: whole input shapes for models declared
the Paddle way (-1, 0, '?' reused, unnamed dims), through the real app. Bad shapes are 422 naming
the input before any work; runs are judged by onnxruntime; the graph cache keys on shapes."""

from __future__ import annotations

import pytest

from app.services import graphs
from tests.patience import JOB_SECONDS
from tests.runtime.paddle_models import detector, trainable

SHAPES = {"x": [1, 3, 48, 320], "bias": [1, 2, 1, 1]}


def _upload(client, model, name: str) -> str:
    r = client.post("/api/v1/models", files={"file": (f"{name}.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"]


@pytest.fixture()
def paddle(client) -> str:
    return _upload(client, detector(), "detector")


def test_plan_with_shapes_binds_paddle_inputs(client, paddle):
    r = client.post(f"/api/v1/models/{paddle}/plans", json={"strategies": ["greedy_by_size"], "shapes": SHAPES})
    assert r.status_code == 200, r.text
    made = r.json()
    assert made["plans"][0]["valid"] and made["plans"][0]["arena_bytes"] >= (3 + 4) * 48 * 320 * 4
    stored = client.get(f"/api/v1/problems/{made['problem_id']}").json()["options"]
    assert stored["shapes"] == SHAPES
    # The CLI's spelling is accepted too, and a different shape is a different graph (the cache keys on it).
    small = {"x": "1x3x16x16", "bias": "1x2x1x1"}
    r = client.post(f"/api/v1/models/{paddle}/plans", json={"strategies": ["greedy_by_size"], "shapes": small})
    assert r.status_code == 200, r.text
    assert r.json()["plans"][0]["arena_bytes"] < made["plans"][0]["arena_bytes"]


def test_without_shapes_the_answer_names_the_input_the_axis_and_both_fields(client, paddle):
    r = client.post(f"/api/v1/models/{paddle}/plans", json={"strategies": ["greedy_by_size"]})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "input 'x' [-1, 3, '?', '?']: axis 0 (-1), axis 2 ('?'), axis 3 ('?') unbound" in detail
    assert 'shapes {"x": [1, 3, 224, 224]}' in detail and 'dims {"?": size}' in detail


def test_run_with_shapes_matches_onnxruntime(client, paddle):
    r = client.post(f"/api/v1/models/{paddle}/runs", json={"shapes": SHAPES, "seed": 3})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert client.app.state.jobs.wait(job_id, JOB_SECONDS)
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "done", job["error"]
    result = job["result"]
    assert result["verdict"]["oracle"] == "onnxruntime" and result["verdict"]["passed"] is True, result["verdict"]
    assert result["outputs"][0]["shape"] == [1, 2, 24, 160]
    assert result["stats"]["outside_arena_bytes"] is not None  # from a traced run of its own
    assert result["rerun"]["body"]["shapes"] == SHAPES


def test_training_plan_with_shapes(client):
    model_id = _upload(client, trainable(), "mlp")
    body = {"loss": "mse", "shapes": {"x": [16, 8]}}
    r = client.post(f"/api/v1/models/{model_id}/training-plans", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["unified_bytes"] > 16 * 16 * 4


@pytest.mark.parametrize(
    ("shapes", "words"),
    [
        ({"z": [1, 3, 8, 8]}, "shape of 'z': the model has no input 'z'; its inputs are 'x' [-1, 3, '?', '?']"),
        ({"x": [1, 3, 8]}, "shape of 'x': 3 size(s) given, but input 'x' [-1, 3, '?', '?'] has rank 4"),
        ({"x": [1, 3, 0, 8]}, "shape of 'x': sizes must be positive whole numbers, got 0 at axis 2"),
        ({"x": [1, -3, 8, 8]}, "shape of 'x': sizes must be positive whole numbers, got -3 at axis 1"),
        ({"x": "1x3xHx8"}, "shape of 'x': '1x3xHx8' is not sizes like '1x3x640x640'"),
        ({"x": [1, 4, 8, 8]}, "shape of 'x': axis 1 of input 'x' is fixed at 3 in the model, got 4"),
    ],
)
@pytest.mark.parametrize("endpoint", ["plans", "runs", "training-plans"])
def test_bad_shapes_are_422_naming_the_input_before_any_work(client, paddle, endpoint, shapes, words, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the model was loaded for a request refused by its shapes")

    monkeypatch.setattr(graphs.runtime, "load_model", no_work)
    monkeypatch.setattr("app.services.training.build_training_step", no_work)
    r = client.post(f"/api/v1/models/{paddle}/{endpoint}", json={"shapes": {**SHAPES, **shapes}})
    assert r.status_code == 422, r.text
    assert words in r.json()["detail"]


def test_a_shape_too_large_is_refused_naming_the_bytes(client, paddle):
    shapes = {**SHAPES, "x": [1, 3, 100_000, 100_000]}
    r = client.post(f"/api/v1/models/{paddle}/plans", json={"strategies": ["greedy_by_size"], "shapes": shapes})
    assert r.status_code == 422
    assert (
        "graph input 'x' of shape [1, 3, 100000, 100000] (float32) would take 120,000,000,000 bytes"
        in r.json()["detail"]
    )


def test_the_model_page_has_a_shape_field_per_input_not_all_fixed(client, paddle):
    page = client.get(f"/models/{paddle}")
    assert page.status_code == 200, page.text
    html = page.text
    # The placeholder says what the model declares; it invents no size that could pass for a default.
    assert 'name="shape:x" placeholder="declared -1x3x?x?: type every size"' in html
    assert "224" not in html
    assert 'name="dim:?"' not in html  # '?' also stands for unnamed dims: those inputs take a shape
    fixed = client.post("/api/v1/examples/squeezenet").json()["id"]
    assert 'id="input-shapes"' not in client.get(f"/models/{fixed}").text
