"""Comparing two plans: two versions of a model (upload the new one next to the old), two
strategies of one problem; the JSON figures checked against each plan's own document."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_model(hidden: int, *, extra_layer: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, hidden)).astype(np.float32), "w1")]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["a"], name="relu1"),
    ]
    last = "a"
    if extra_layer:
        inits.append(numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), "w2"))
        nodes += [
            helper.make_node("MatMul", ["a", "w2"], ["h2"], name="mm2"),
            helper.make_node("Relu", ["h2"], ["a2"], name="relu2"),
        ]
        last = "a2"
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, hidden])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _plan(client, model: onnx.ModelProto, name: str, strategies=("greedy_by_size",)) -> list[dict]:
    r = client.post("/api/v1/models", files={"file": (f"{name}.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    made = client.post(f"/api/v1/models/{r.json()['id']}/plans", json={"strategies": list(strategies)})
    assert made.status_code == 200, made.text
    return made.json()["plans"]


def _live(buffers: list[dict], steps: int) -> list[int]:
    by_id = {b["id"]: b for b in buffers}

    def root(b: dict) -> tuple[str, int]:
        offset = 0
        while b.get("alias_of"):
            offset += b.get("alias_offset", 0)
            b = by_id[b["alias_of"]]
        return b["id"], offset

    groups: dict[str, list[int]] = {}
    for b in buffers:
        top, offset = root(b)
        first, last, extent = groups.get(top, [b["first"], b["last"], 0])
        groups[top] = [min(first, b["first"]), max(last, b["last"]), max(extent, offset + b["size"])]
    return [sum(size for lo, hi, size in groups.values() if lo <= s <= hi) for s in range(steps)]


def _document(client, plan_id: str) -> dict:
    return client.get(f"/api/v1/plans/{plan_id}").json()


def test_diff_of_two_versions_of_a_model(client):
    (old,) = _plan(client, mlp_model(32, extra_layer=False), "mlp")
    (new,) = _plan(client, mlp_model(64, extra_layer=True), "mlp-v2")
    r = client.get(f"/api/v1/plans/{old['id']}/diff/{new['id']}")
    assert r.status_code == 200, r.text
    diff = r.json()
    doc_a, doc_b = _document(client, old["id"]), _document(client, new["id"])
    assert diff["a"]["arena_bytes"] == doc_a["arena_bytes"] and diff["b"]["arena_bytes"] == doc_b["arena_bytes"]
    assert diff["a"]["lower_bound"] == doc_a["lower_bound"] and diff["b"]["lower_bound"] == doc_b["lower_bound"]
    assert diff["delta_bytes"] == doc_b["arena_bytes"] - doc_a["arena_bytes"] > 0
    # The peak step is where the most bytes are live, recomputed here from the problem's buffers:
    # an alias group (in place) holds its extent from its first member's first step to its last's last.
    for side, doc in (("a", doc_a), ("b", doc_b)):
        buffers = client.get(f"/api/v1/problems/{doc['problem_id']}").json()["problem"]["buffers"]
        assert _live(buffers, doc["steps"])[diff[side]["peak_step"]] == max(_live(buffers, doc["steps"]))
    names_a = {b["name"] for b in doc_a["buffers"]}
    names_b = {b["name"] for b in doc_b["buffers"]}
    assert set(diff["only_in_b"]) == names_b - names_a and {"h2", "a2"} <= set(diff["only_in_b"])
    assert set(diff["only_in_a"]) == names_a - names_b
    sizes_a = {b["name"]: b["size"] for b in doc_a["buffers"]}
    sizes_b = {b["name"]: b["size"] for b in doc_b["buffers"]}
    expected = {n for n in names_a & names_b if sizes_a[n] != sizes_b[n]}
    assert {row["name"] for row in diff["changed"]} == expected and "h" in expected
    row = next(r for r in diff["changed"] if r["name"] == "h")
    assert (row["bytes_a"], row["bytes_b"]) == (8 * 32 * 4, 8 * 64 * 4)
    assert [abs(r["delta"]) for r in diff["changed"]] == sorted(
        (abs(r["delta"]) for r in diff["changed"]), reverse=True
    )


def test_diff_of_two_strategies_of_one_problem_and_its_page(client):
    plans = _plan(client, mlp_model(32, extra_layer=True), "mlp", strategies=("naive", "greedy_by_size"))
    naive, greedy = (next(p for p in plans if p["strategy"] == s) for s in ("naive", "greedy_by_size"))
    diff = client.get(f"/api/v1/plans/{naive['id']}/diff/{greedy['id']}").json()
    assert diff["same_problem"] is True and diff["only_in_a"] == diff["only_in_b"] == diff["changed"] == []
    assert diff["delta_bytes"] == greedy["arena_bytes"] - naive["arena_bytes"] < 0
    page = client.get(f"/plans/{naive['id']}/diff/{greedy['id']}?format=json&x0=1&x1=3").json()
    assert page["page"] == "diff" and page["diff"] == diff
    assert page["views"]["a"]["x_range"] == [1, 3] and page["views"]["b"]["offsets"][greedy["id"]]
    html = client.get(f"/plans/{naive['id']}/diff/{greedy['id']}", headers={"accept": "text/html"}).text
    assert 'id="diff-table"' in html and "Memplan.diffPage" in html


def test_a_diff_of_missing_plans_is_404_naming_which(client):
    (plan,) = _plan(client, mlp_model(32, extra_layer=False), "mlp")
    r = client.get(f"/api/v1/plans/{plan['id']}/diff/nope")
    assert r.status_code == 404 and "b: no plan with id 'nope'" in r.json()["detail"]
    r = client.get(f"/api/v1/plans/gone/diff/{plan['id']}")
    assert r.status_code == 404 and "a: no plan with id 'gone'" in r.json()["detail"]
    assert client.get(f"/plans/gone/diff/{plan['id']}?format=json").status_code == 404
