"""Models through the real app: uploads (good, bad, oversize, concurrent, zipped with external
data), the example gallery, planning a model and running it inside its plan.

Oracles: SHA-256 of the bytes sent; plans re-checked with `planner.check_plan` against the
runtime's own problem; runs verified by the app against onnxruntime, and here again
against onnx.reference on the same inputs.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import runtime
from app.services.library import EXAMPLES_DIR
from planner import Placement, Plan, check_plan, names
from tests.patience import JOB_SECONDS

SQUEEZENET = EXAMPLES_DIR / "light_squeezenet.onnx"
RESNET = EXAMPLES_DIR / "light_resnet50.onnx"
FAST = ["bump", "first_fit", "greedy_by_size", "best_fit"]


def _upload(client: TestClient, data: bytes, name: str = "model.onnx"):
    return client.post("/api/v1/models", files={"file": (name, data, "application/octet-stream")})


def _blobs(app) -> list[Path]:
    return sorted(p for p in (app.state.settings.data_dir / "blobs").rglob("*") if p.is_file())


def _matmul_model(dim: int | str = 2, ir_version: int = 8) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")  # raw bytes: can go external
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "mm", [x], [y], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir_version)


# ---- uploads --------------------------------------------------------------------------------


def test_upload_stores_by_sha256_and_summarises(app, client):
    data = SQUEEZENET.read_bytes()
    r = _upload(client, data, "light_squeezenet.onnx")
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["sha256"] == hashlib.sha256(data).hexdigest() and body["name"] == "light_squeezenet" and body["new"]
    summary = body["summary"]
    assert summary["inputs"][0]["dims"] == [1, 3, 224, 224] and summary["outputs"]
    ops = {o["op_type"]: o["count"] for o in summary["ops"]}
    assert ops["Conv"] == sum(1 for n in onnx.load(str(SQUEEZENET)).graph.node if n.op_type == "Conv")
    assert [p.read_bytes() for p in _blobs(app)] == [data]
    assert client.get(f"/api/v1/models/{body['id']}").json()["sha256"] == body["sha256"]
    assert [m["id"] for m in client.get("/api/v1/models").json()["models"]] == [body["id"]]


def test_raw_body_upload_and_duplicates_are_stored_once(app, client):
    data = SQUEEZENET.read_bytes()
    first = client.post("/api/v1/models", content=data, params={"name": "sq.onnx"})
    second = _upload(client, data)
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] == second.json()["id"] and second.json()["new"] is False
    assert len(_blobs(app)) == 1


def test_concurrent_uploads_of_one_file_store_it_once(app, client):
    data = RESNET.read_bytes()

    def send(_: int) -> dict:
        r = TestClient(app).post("/api/v1/models", files={"file": ("r.onnx", data)})
        assert r.status_code == 201, r.text
        return r.json()

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(send, range(6)))
    assert len({r["id"] for r in results}) == 1
    assert sum(1 for r in results if r["new"]) == 1
    assert len(_blobs(app)) == 1 and len(client.get("/api/v1/models").json()["models"]) == 1
    assert not list((app.state.settings.data_dir / "incoming").iterdir())


def test_oversize_upload_is_413_and_leaves_nothing(make_app, tmp_path):
    app = make_app(data_dir=tmp_path / "small", max_upload_bytes=10_000)
    with TestClient(app) as client:
        r = _upload(client, RESNET.read_bytes())
        assert r.status_code == 413 and "10,000" in r.json()["detail"]
        assert not _blobs(app) and not list((tmp_path / "small" / "incoming").iterdir())
        assert client.get("/api/v1/models").json()["models"] == []
        # Without a Content-Length the limit is enforced while streaming.
        data = RESNET.read_bytes()
        head = b'--B\r\nContent-Disposition: form-data; name="file"; filename="r.onnx"\r\n\r\n'

        def chunks():
            yield head
            for start in range(0, len(data), 4096):
                yield data[start : start + 4096]
            yield b"\r\n--B--\r\n"

        r = client.post("/api/v1/models", content=chunks(), headers={"content-type": "multipart/form-data; boundary=B"})
        assert r.status_code == 413 and "limit" in r.json()["detail"]
        assert not _blobs(app) and not list((tmp_path / "small" / "incoming").iterdir())


@pytest.mark.parametrize(
    ("data", "status", "words"),
    [
        (b"hello, this is a text file\n", 415, "not an ONNX model"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, 415, "not an ONNX model"),
        (SQUEEZENET.read_bytes()[:4000], 415, "truncated"),
        (SQUEEZENET.read_bytes()[: len(SQUEEZENET.read_bytes()) // 2], 415, "truncated"),
        (b"", 422, "empty"),
        (b"PK\x03\x04 not really a zip", 422, "damaged or truncated"),
    ],
)
def test_bad_files_are_4xx_with_a_reason(app, client, data, status, words):
    r = _upload(client, data)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert words in r.json()["detail"]
    assert not _blobs(app)


def test_missing_file_field_and_bad_page_upload_reason(client):
    r = client.post("/api/v1/models", files={"model": ("m.onnx", b"x")})
    assert r.status_code == 422 and "'file'" in r.json()["detail"]


def _zip(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return out.getvalue()


def test_zip_with_external_data_is_planned_and_run(tmp_path, client):
    folder = tmp_path / "ext"
    folder.mkdir()
    onnx.save_model(
        _matmul_model(), str(folder / "mm.onnx"), save_as_external_data=True, location="mm.bin", size_threshold=0
    )
    archive = _zip({"mm/mm.onnx": (folder / "mm.onnx").read_bytes(), "mm/mm.bin": (folder / "mm.bin").read_bytes()})
    r = _upload(client, archive, "mm.zip")
    assert r.status_code == 201, r.text
    model = r.json()
    assert model["format"] == "zip" and model["summary"]["external_data"] and model["name"] == "mm"
    plans = client.post(f"/api/v1/models/{model['id']}/plans", json={"strategies": ["greedy_by_size"]}).json()["plans"]
    assert plans[0]["valid"]
    job = client.post(f"/api/v1/models/{model['id']}/runs", json={"plan_id": plans[0]["id"], "seed": 3}).json()
    client.app.state.jobs.wait(job["id"], JOB_SECONDS)
    result = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert result["state"] == "done", result["error"]
    assert result["result"]["verdict"]["passed"] is True


def test_zip_must_hold_exactly_one_model(client):
    r = _upload(client, _zip({"a.onnx": SQUEEZENET.read_bytes(), "b.onnx": SQUEEZENET.read_bytes()}), "two.zip")
    assert r.status_code == 422 and "exactly one .onnx" in r.json()["detail"]
    r = _upload(client, _zip({"../evil.onnx": b"x"}), "evil.zip")
    assert r.status_code == 422 and "outside" in r.json()["detail"]


def test_delete_removes_record_and_file(app, client):
    model_id = _upload(client, SQUEEZENET.read_bytes()).json()["id"]
    assert client.delete(f"/api/v1/models/{model_id}").status_code == 204
    assert client.get(f"/api/v1/models/{model_id}").status_code == 404
    assert client.delete(f"/api/v1/models/{model_id}").status_code == 404
    assert not _blobs(app)


# ---- gallery and pages ------------------------------------------------------------------------


def test_every_example_opens_in_one_click(client):
    examples = client.get("/api/v1/examples").json()["examples"]
    assert len(examples) == 9
    for example in examples:
        r = client.post(f"/examples/{example['name']}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/models/")
        page = client.get(r.headers["location"] + "?format=json").json()
        assert page["model"]["name"] == f"light_{example['name']}" and page["model"]["summary"]["ops"]
    assert len(client.get("/api/v1/models").json()["models"]) == 9
    assert client.post("/api/v1/examples/resnet50").json()["new"] is False
    r = client.post("/examples/alexnet2", headers={"accept": "text/html"})
    assert r.status_code == 404 and "bvlc_alexnet" in r.text


def test_model_page_shows_io_ops_and_tensor_count(client):
    model_id = client.post("/api/v1/examples/squeezenet").json()["id"]
    html = client.get(f"/models/{model_id}").text
    assert "data_0" in html and "Conv" in html and "plan-form" in html
    for name in names():  # every registered strategy can be chosen in the form
        assert f'name="strategy" value="{name}"' in html
    twin = client.get(f"/models/{model_id}?format=json").json()
    graph = runtime.load_model(SQUEEZENET)
    assert twin["graph"]["tensor_count"] == len(graph.tensors)


# ---- planning a model ----------------------------------------------------------------------------


def test_model_plans_check_against_the_runtimes_own_problem(client):
    model_id = client.post("/api/v1/examples/squeezenet").json()["id"]
    r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": FAST, "alignment": 128, "workspace": False})
    assert r.status_code == 200, r.text
    problem = runtime.memory_problem(
        runtime.load_model(SQUEEZENET), runtime.MemoryOptions(io="arena", workspace=False, alignment=128)
    )
    for summary in r.json()["plans"]:
        doc = client.get(f"/api/v1/plans/{summary['id']}").json()
        offsets = {b["id"]: Placement(b["pool"], b["offset"]) for b in doc["buffers"]}
        plan = Plan(doc["strategy"], offsets, doc["pool_sizes"], doc["lower_bound"], doc["naive_bytes"])
        assert check_plan(problem, plan).ok, summary["strategy"]
        assert all(b["offset"] % 128 == 0 for b in doc["buffers"])
    page = client.get(f"/plans/{r.json()['plans'][0]['id']}?format=json").json()
    assert page["model"]["id"] == model_id and page["runnable"]
    tensor = page["view"]["buffers"]
    i = tensor["id"].index(graph_output := "softmaxout_1")
    assert tensor["dtype"][i] == "float32" and tensor["producer"][i] and graph_output in tensor["id"]


def test_pools_with_capacities_report_fits(client):
    model_id = client.post("/api/v1/examples/squeezenet").json()["id"]
    body = {"strategies": ["greedy_by_size"], "pools": [{"name": "arena", "capacity": 1000}]}
    plan = client.post(f"/api/v1/models/{model_id}/plans", json=body).json()["plans"][0]
    assert not plan["valid"] and plan["pools"][0]["fits"] is False and "too small" in plan["error"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"dims": {"batch": 2}}, "no symbolic dim 'batch'"),
        ({"dims": {"N": 0}}, "positive"),
        ({"alignment": 0}, "alignment"),
        ({"strategies": ["fastest"]}, "unknown strategy 'fastest'"),
        ({"io": "disk"}, "io"),
        ({"pools": [{"name": "a"}, {"name": "a"}]}, "unique"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_plan_forms_are_422_naming_the_field(client, body, words):
    model_id = client.post("/api/v1/examples/squeezenet").json()["id"]
    r = client.post(f"/api/v1/models/{model_id}/plans", json=body)
    assert r.status_code == 422, r.text
    assert words in r.json()["detail"]


def test_symbolic_dims_are_bound_from_the_form(client):
    model_id = _upload(client, _matmul_model("N").SerializeToString(), "sym.onnx").json()["id"]
    unbound = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["best_fit"]})
    assert unbound.status_code == 422 and "N" in unbound.json()["detail"]
    bound = client.post(
        f"/api/v1/models/{model_id}/plans", json={"strategies": ["best_fit"], "dims": {"N": 5}, "alignment": 1}
    )
    assert bound.status_code == 200, bound.text
    doc = client.get(f"/api/v1/plans/{bound.json()['plans'][0]['id']}").json()
    sizes = {b["id"]: b["size"] for b in doc["buffers"]}
    assert sizes["x"] == 5 * 3 * 4 and sizes["y"] == 5 * 4 * 4


# ---- runs ------------------------------------------------------------------------------------------


def _run(client: TestClient, model_id: str, **kwargs) -> dict:
    r = client.post(f"/api/v1/models/{model_id}/runs", **kwargs)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert client.app.state.jobs.wait(job_id, JOB_SECONDS)
    return client.get(f"/api/v1/jobs/{job_id}").json()


def test_run_in_the_plan_matches_onnx_reference(client):
    model_id = _upload(client, _matmul_model(4).SerializeToString(), "mm.onnx").json()["id"]
    plan_id = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["first_fit"]}).json()["plans"][0][
        "id"
    ]
    job = _run(client, model_id, json={"plan_id": plan_id, "seed": 7})
    assert job["state"] == "done", job["error"]
    result = job["result"]
    assert result["verdict"] == {**result["verdict"], "passed": True, "oracle": "onnxruntime"}
    assert [s["name"] for s in result["steps"]] == ["mm", "relu"]
    assert result["stats"]["arena_bytes"] == result["arena_bytes"] > 0 and "outside_arena_bytes" in result["stats"]
    # Independently: the same seeded inputs through onnx.reference give the reported summary.
    x = np.random.default_rng(7).standard_normal((4, 3)).astype(np.float32)
    (expected,) = ReferenceEvaluator(_matmul_model(4)).run(None, {"x": x})
    out = result["outputs"][0]
    assert out["shape"] == [4, 4] and out["max"] == pytest.approx(float(expected.max()), rel=1e-5)
    page = client.get(f"/runs/{job['id']}?format=json").json()
    assert page["result"]["verdict"]["passed"] is True
    # The run page draws the plan it ran in: that plan's buffers and offsets, as the plan's own JSON says.
    buffers = client.get(f"/api/v1/plans/{plan_id}").json()["buffers"]
    view = page["view"]
    assert view["selected"] == plan_id and view["steps"] == 2
    assert dict(zip(view["buffers"]["id"], view["offsets"][plan_id], strict=True)) == {
        b["id"]: b["offset"] for b in buffers
    }


def _onnxruntime_loads(model: onnx.ModelProto) -> bool:
    """Ask the oracle itself: whether this onnxruntime (if any) opens the model."""
    try:
        import onnxruntime

        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


def test_run_with_uploaded_npz_and_its_errors(client):
    # A model of a new IR version: the verdict comes from onnxruntime if it reads it, else onnx.reference.
    model = _matmul_model(2, ir_version=14)
    model_id = _upload(client, model.SerializeToString(), "mm.onnx").json()["id"]
    x = np.array([[1, -2, 3], [-4, 5, -6]], dtype=np.float32)
    buffer = io.BytesIO()
    np.savez(buffer, x=x)
    job = _run(
        client, model_id, files={"inputs": ("in.npz", buffer.getvalue())}, data={"options": '{"strategy": "best_fit"}'}
    )
    assert job["state"] == "done", job["error"]
    expected = np.maximum(x @ np.arange(12, dtype=np.float32).reshape(3, 4), 0)
    assert job["result"]["outputs"][0]["first"] == expected.reshape(-1)[:6].tolist()
    assert job["result"]["inputs"] == "uploaded .npz"
    oracle = "onnxruntime" if _onnxruntime_loads(model) else "onnx.reference"
    assert job["result"]["verdict"]["oracle"] == oracle and job["result"]["verdict"]["passed"] is True
    wrong = io.BytesIO()
    np.savez(wrong, z=x)
    failed = _run(client, model_id, files={"inputs": ("in.npz", wrong.getvalue())})
    assert failed["state"] == "failed" and "lacks ['x']" in failed["error"]["detail"]
    r = client.post(f"/api/v1/models/{model_id}/runs", files={"inputs": ("in.npz", b"not a zip")})
    assert r.status_code == 422 and ".npz" in r.json()["detail"]
    r = client.post(f"/api/v1/models/{model_id}/runs", json={"plan_id": "nope"})
    assert r.status_code == 404 and "plan_id" in r.json()["detail"]


def test_run_progress_streams_one_event_per_op(client):
    model_id = client.post("/api/v1/examples/squeezenet").json()["id"]
    r = client.post(f"/api/v1/models/{model_id}/runs", json={"strategy": "greedy_by_size"})
    job_id = r.json()["id"]
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events") as stream:
        lines = [line for line in stream.iter_lines() if line.startswith("event: ")]
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "done", job["error"]
    steps = len(job["result"]["steps"])
    assert steps == len(runtime.load_model(SQUEEZENET).nodes)
    assert lines.count("event: progress") >= steps and lines[-1] == "event: done"
    assert job["result"]["verdict"]["passed"] is True
