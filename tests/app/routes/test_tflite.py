"""`.tflite` models through the real app: upload, summary, planning, and the plan exported back as TensorFlow
Lite Micro's offline plan, run in its real interpreter (the `tflite-micro` wheel) against its own plan."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.runtime.tflite.shared import model_bytes

FOR_TFLM = {"inplace": False, "concat_inplace": False, "workspace": False, "alignment": 16}


def upload(client, data: bytes, name: str):
    return client.post("/api/v1/models", files={"file": (name, data, "application/octet-stream")})


def plan_of(client, model_id: str, **options) -> dict:
    r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size"], **options})
    assert r.status_code == 200, r.text
    return r.json()["plans"][0]


def test_a_tflite_upload_is_summarised_from_the_file_whatever_its_name(client):
    data = model_bytes("micro_speech_quantized")
    r = upload(client, data, "speech.bin")
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["format"] == "tflite"
    summary = body["summary"]
    assert summary["format"] == "tflite" and summary["quantized"] is True
    assert summary["inputs"] == [{"name": "Reshape_1", "dtype": "int8", "dims": [1, 1960]}]
    assert summary["outputs"] == [{"name": "labels_softmax", "dtype": "int8", "dims": [1, 4]}]
    assert {o["op_type"] for o in summary["ops"]} == {"DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "RESHAPE", "SOFTMAX"}


def test_the_model_page_and_its_json_twin_show_each_tensors_dtype_and_quantization(client):
    import runtime

    data = model_bytes("person_detect")
    graph = runtime.load_model(data)
    model = upload(client, data, "person_detect.tflite").json()
    listed = client.get(f"/api/v1/models/{model['id']}/tensors", params={"limit": 200}).json()
    assert listed["total"] == len(graph.tensors)
    assert (
        listed["quantized"] == sum(1 for t in graph.tensors.values() if t.quant is not None) == len(graph.tensors) - 1
    )
    for row in listed["items"]:
        t = graph.tensors[row["name"]]
        assert (row["dtype"], row["shape"], row["bytes"]) == (str(t.dtype), list(t.shape), t.nbytes)
        assert row["quantization"] == (t.quant.describe() if t.quant is not None else None)
    conv_weights = graph.tensors[graph.nodes[0].inputs[1]]
    row = next(r for r in listed["items"] if r["name"] == conv_weights.name)
    assert row["quantization"]["axis"] == 3 and row["quantization"]["channels"] == 8
    page = client.get(f"/models/{model['id']}").text
    assert 'id="tensor-table"' in page and "per channel (axis 3, 8)" in page
    assert "TFLite schema 3, quantized" in page
    assert "scale 0.00784314 · zero point -1" in page  # the input's
    made = plan_of(client, model["id"], **FOR_TFLM)
    assert 'id="export-tflite"' in client.get(f"/plans/{made['id']}").text


def test_an_onnx_models_tensors_are_float_without_quantization(client):
    from app.services.library import EXAMPLES_DIR

    model = upload(client, (EXAMPLES_DIR / "light_squeezenet.onnx").read_bytes(), "sq.onnx").json()
    listed = client.get(f"/api/v1/models/{model['id']}/tensors").json()
    assert listed["quantized"] == 0 and all(r["quantization"] is None for r in listed["items"])
    assert client.get(f"/api/v1/models/{model['id']}/tensors", params={"limit": 1000}).status_code == 422
    made = plan_of(client, model["id"])
    assert 'id="export-tflite"' not in client.get(f"/plans/{made['id']}").text


def test_the_exported_plan_runs_in_tflite_micro_like_its_own(client, capfd):
    tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime", reason="tflite-micro is not installed")
    data = model_bytes("hello_world_int8")
    model = upload(client, data, "hello.tflite").json()
    made = plan_of(client, model["id"], **FOR_TFLM)
    r = client.get(f"/api/v1/plans/{made['id']}/export.tflite")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    assert 'filename="hello-greedy_by_size.tflite"' in r.headers["content-disposition"]
    assert json.loads(r.headers["x-memplan-left-out"]) == {}
    assert int(r.headers["x-memplan-head"]) == made["arena_bytes"]
    outputs, heads = [], []
    for model_data in (data, r.content):
        interpreter = tflm.Interpreter.from_bytes(model_data, arena_size=100_000)
        interpreter.set_input(np.array([[77]], dtype=np.int8), 0)
        interpreter.invoke()
        outputs.append(interpreter.get_output(0).copy())
        capfd.readouterr()
        interpreter.print_allocations()
        heads.append(int(re.search(r"allocation head (\d+)", "".join(capfd.readouterr())).group(1)))
    assert np.array_equal(*outputs)
    assert heads[1] == made["arena_bytes"] == heads[0]


def test_an_onnx_plan_has_no_tflite_export(client):
    from app.services.library import EXAMPLES_DIR

    model = upload(client, (EXAMPLES_DIR / "light_squeezenet.onnx").read_bytes(), "sq.onnx").json()
    made = plan_of(client, model["id"])
    r = client.get(f"/api/v1/plans/{made['id']}/export.tflite")
    assert r.status_code == 409 and "only plans of .tflite models" in r.json()["detail"]


def test_a_reordered_tflite_plan_is_not_exported(client):
    model = upload(client, model_bytes("micro_speech_quantized"), "m.tflite").json()
    made = plan_of(client, model["id"], reorder=True)
    r = client.get(f"/api/v1/plans/{made['id']}/export.tflite")
    assert r.status_code == 409 and "file's operator order" in r.json()["detail"]


@pytest.mark.parametrize("length", [20, 9400])
def test_a_damaged_tflite_upload_is_refused_naming_the_field(client, length):
    r = upload(client, model_bytes("micro_speech_quantized")[:length], "m.tflite")
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("not a valid .tflite model: model"), detail
    assert any(w in detail for w in ("past the end", "outside the file", "fit in the file")), detail
