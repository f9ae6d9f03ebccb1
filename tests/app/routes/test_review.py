"""Review tools behind the plan page: every tensor as CSV, and pages named by the model's name."""

from __future__ import annotations

import csv
import io

from tests.app.routes.test_diffs import mlp_model


def _upload_and_plan(client, model, name: str) -> dict:
    r = client.post("/api/v1/models", files={"file": (f"{name}.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    made = client.post(f"/api/v1/models/{r.json()['id']}/plans", json={"strategies": ["greedy_by_size"]})
    assert made.status_code == 200, made.text
    return made.json()["plans"][0]


def test_tensors_csv_has_every_tensor_with_its_offset_and_facts(client):
    plan = _upload_and_plan(client, mlp_model(32, extra_layer=True), "mlp")
    r = client.get(f"/api/v1/plans/{plan['id']}/tensors.csv")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    doc = client.get(f"/api/v1/plans/{plan['id']}").json()
    assert [row["name"] for row in rows] == [b["name"] for b in doc["buffers"]]
    for row, b in zip(rows, doc["buffers"], strict=True):
        assert (int(row["bytes"]), int(row["first"]), int(row["last"]), int(row["offset"])) == (
            b["size"],
            b["first"],
            b["last"],
            b["offset"],
        )
    by_name = {row["name"]: row for row in rows}
    # The MLP's hidden tensor: [8, 32] float32, made by mm1, read by relu1.
    assert (by_name["h"]["shape"], by_name["h"]["dtype"], by_name["h"]["producer"]) == ("8x32", "float32", "mm1")
    assert "relu1" in by_name["h"]["consumers"]


def test_a_plan_page_is_titled_with_the_models_name_not_the_graphs(client):
    model = mlp_model(32, extra_layer=False)
    model.graph.name = "Model from PaddlePaddle."
    plan = _upload_and_plan(client, model, "ocr-det")
    page = client.get(f"/plans/{plan['id']}?format=json").json()
    assert page["page_title"].startswith("ocr-det") and page["problem"]["name"] == "ocr-det"
    html = client.get(f"/plans/{plan['id']}", headers={"accept": "text/html"}).text
    assert "<title>ocr-det" in html and "PaddlePaddle" not in html.split("</title>")[0]
