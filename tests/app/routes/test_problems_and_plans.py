"""The REST API and pages for problems and plans, through the real app on a real SQLite file.

Oracles: every plan the API returns is re-checked with `planner.check_plan` and against
LOAD; the CSV export is read back with `planner.csvio.read_csv`.
"""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from planner import Placement, Plan, Problem, check_plan, get, load, names
from planner.csvio import read_csv
from tests.patience import JOB_SECONDS

CSV = "id,lower,upper,size\na,0,2,64\nb,1,3,64\nc,2,4,64\nd,0,4,32\n"


def _plan_csv(client: TestClient, text: str = CSV, **params: str) -> dict:
    r = client.post("/api/v1/problems/plan", content=text, headers={"content-type": "text/csv"}, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def _as_plan(doc: dict) -> tuple[Problem, Plan]:
    """Rebuild the problem and plan from GET /api/v1/plans/{id} alone, for the checker."""
    problem = Problem.from_json(
        {
            "steps": doc["steps"],
            "alignment": doc["alignment"],
            "buffers": [{k: b[k] for k in ("id", "size", "first", "last", "kind")} for b in doc["buffers"]],
        }
    )
    offsets = {b["id"]: Placement(b["pool"], b["offset"]) for b in doc["buffers"]}
    return problem, Plan(doc["strategy"], offsets, doc["pool_sizes"], doc["lower_bound"], doc["naive_bytes"])


def test_csv_problem_is_planned_by_every_strategy_and_each_plan_checks(client):
    result = _plan_csv(client)
    fast = [n for n in names() if not get(n).slow]
    assert [p["strategy"] for p in result["plans"]] == fast  # slow ones, if any, run as a job
    if result["job"] is not None:
        assert client.app.state.jobs.wait(result["job"]["id"], JOB_SECONDS)
    stored = client.get(f"/api/v1/problems/{result['problem_id']}").json()["plans"]
    assert sorted(p["strategy"] for p in stored) == sorted(names())
    problem, _ = read_csv(CSV)
    for summary in stored:
        assert summary["valid"] and summary["lower_bound"] == load(problem) == 160
        assert summary["arena_bytes"] >= summary["lower_bound"]
        doc = client.get(f"/api/v1/plans/{summary['id']}").json()
        assert {b["id"] for b in doc["buffers"]} == {"a", "b", "c", "d"}
        assert set(doc["buffers"][0]) >= {"id", "name", "size", "first", "last", "kind", "offset"}
        rebuilt, plan = _as_plan(doc)
        assert check_plan(rebuilt, plan).ok
        assert plan.arena_bytes == summary["arena_bytes"]
    assert result["links"]["page"].startswith("/plans/")


def test_json_problem_with_capacity_reports_what_does_not_fit(client):
    problem = {
        "steps": 2,
        "buffers": [{"id": "x", "size": 100, "first": 0, "last": 1}, {"id": "y", "size": 100, "first": 0, "last": 1}],
    }
    r = client.post(
        "/api/v1/problems/plan", json=problem, params={"capacity": 150, "strategies": "greedy_by_size,naive"}
    )
    assert r.status_code == 200, r.text
    plans = r.json()["plans"]
    assert [p["valid"] for p in plans] == [False, False]
    assert all(p["arena_bytes"] is None and "too small" in p["error"] for p in plans)
    assert plans[0]["pools"] == [{"name": "arena", "bytes": None, "capacity": 150, "fits": False}]
    fits = client.post("/api/v1/problems/plan", json=problem, params={"capacity": 200, "strategies": "best_fit"}).json()
    assert fits["plans"][0]["pools"][0] == {"name": "arena", "bytes": 200, "capacity": 200, "fits": True}


def test_csv_export_round_trips_with_offsets(client):
    plan_id = _plan_csv(client, strategies="greedy_by_size")["plans"][0]["id"]
    r = client.get(f"/api/v1/plans/{plan_id}/export.csv")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    problem, offsets = read_csv(r.text)
    doc = client.get(f"/api/v1/plans/{plan_id}").json()
    assert offsets == {b["id"]: b["offset"] for b in doc["buffers"]}
    assert [(b.id, b.first, b.last, b.size) for b in problem.buffers] == [
        (b["id"], b["first"], b["last"], b["size"]) for b in doc["buffers"]
    ]


def test_csv_export_escapes_commas_and_refuses_two_pools(client):
    plan_id = _plan_csv(client, 'id,lower,upper,size\n"a,b",0,2,64\nc,1,3,8\n', strategies="best_fit")["plans"][0]["id"]
    text = client.get(f"/api/v1/plans/{plan_id}/export.csv").text
    assert [line.split(",")[0] for line in text.splitlines()] == ["id", "a%2Cb", "c"]
    assert [b["id"] for b in client.get(f"/api/v1/plans/{plan_id}").json()["buffers"]] == ["a,b", "c"]
    assert [b.id for b in read_csv(text)[0].buffers] == ["a,b", "c"]
    two_pools = {
        "steps": 2,
        "pools": [{"name": "sram"}, {"name": "dram"}],
        "buffers": [
            {"id": "w", "size": 64, "first": 0, "last": 1, "pool_candidates": ["sram"]},
            {"id": "x", "size": 64, "first": 0, "last": 1, "pool_candidates": ["dram"]},
        ],
    }
    r = client.post("/api/v1/problems/plan", json=two_pools, params={"strategies": "greedy_by_size"})
    plan_id = r.json()["plans"][0]["id"]
    r = client.get(f"/api/v1/plans/{plan_id}/export.csv")
    assert r.status_code == 409 and r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["title"] == "Not exportable as MiniMalloc CSV"
    assert "2 pools ('dram': 1 buffer, 'sram': 1 buffer)" in r.json()["detail"]
    assert f"GET /api/v1/plans/{plan_id}" in r.json()["detail"]


def test_offline_report_embeds_plotly_and_loads_nothing_remote(client):
    plan_id = _plan_csv(client, strategies="best_fit")["plans"][0]["id"]
    html = client.get(f"/api/v1/plans/{plan_id}/export.html").text
    assert "plotly.js v" in html and "Memplan.planPage" in html
    assert not re.findall(r"<(?:script|link|img)[^>]*(?:src|href)=\"(?!data:)", html)  # nothing fetched: all inline
    assert '"load": 160' in html or '"load":160' in html


def test_netron_attachment_has_offset_size_and_lifetime_per_tensor(client):
    plan_id = _plan_csv(client, strategies="first_fit")["plans"][0]["id"]
    doc = client.get(f"/api/v1/plans/{plan_id}/netron.json").json()
    assert doc["schema"] == "memplan.netron/1" and set(doc["tensors"]) == {"a", "b", "c", "d"}
    entries = {e["name"]: e["value"] for e in doc["tensors"]["d"]}
    assert entries["memplan.size"] == 32 and entries["memplan.lifetime"].startswith("steps 0..3")
    assert isinstance(entries["memplan.offset"], int)


@pytest.mark.parametrize(
    ("body", "content_type", "params", "status", "words"),
    [
        ("id,lower,upper,size\na,0,0,8\n", "text/csv", {}, 422, "line 2"),
        ("nonsense header\n1,2\n", "text/csv", {}, 422, "header"),
        ('{"buffers": [{"id": "a", "size": -1, "first": 0, "last": 0}]}', "application/json", {}, 422, "size"),
        ("{not json", "application/json", {}, 422, "not valid JSON"),
        ("", "text/csv", {}, 422, "empty"),
        (CSV, "text/csv", {"strategies": "fastest"}, 422, "unknown strategy 'fastest'"),
        (CSV, "text/csv", {"alignment": "0"}, 422, "alignment"),
    ],
)
def test_bad_problems_are_4xx_problem_json_naming_the_fault(client, body, content_type, params, status, words):
    r = client.post("/api/v1/problems/plan", content=body, headers={"content-type": content_type}, params=params)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert words in r.json()["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/plans/nope",
        "/api/v1/plans/nope/export.csv",
        "/api/v1/jobs/nope",
        "/api/v1/problems/nope",
        "/api/v1/models/nope",
    ],
)
def test_unknown_ids_are_404_problem_json(client, path):
    r = client.get(path)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "nope" in r.json()["detail"]


def test_unknown_ids_on_pages_show_the_reason_on_the_page(client):
    r = client.get("/plans/nope", headers={"accept": "text/html"})
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]
    assert "no plan with id &#39;nope&#39;" in r.text


def test_background_planning_is_a_job_with_progress_and_sse(client):
    result = _plan_csv(client, strategies="greedy_by_size,hill_climb", background="true")
    assert result["plans"] == [] and result["job"]["state"] in ("queued", "running", "done")
    job_id = result["job"]["id"]
    events = []
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events") as stream:
        kind = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
    kinds = [k for k, _ in events]
    assert kinds[-1] == "done" and kinds.count("progress") >= 2
    progress = [d["progress"] for k, d in events if k == "progress"]
    assert progress == sorted(progress) and progress[-1] == 1.0
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "done" and len(job["result"]["plans"]) == 2
    stored = client.get(f"/api/v1/problems/{result['problem_id']}").json()
    assert sorted(p["strategy"] for p in stored["plans"]) == ["greedy_by_size", "hill_climb"]
    page = client.get(f"/jobs/{job_id}?format=json").json()
    assert page["job"]["state"] == "done"


def test_plan_page_json_twin_and_permalink_parameters(client):
    result = _plan_csv(client)
    by_name = {p["strategy"]: p["id"] for p in result["plans"]}
    plan_id = by_name["greedy_by_size"]
    r = client.get(f"/plans/{plan_id}", params={"compare": "naive", "x0": "0.5", "x1": "2.5", "q": "b"})
    assert r.status_code == 200 and "chart-offsets-a" in r.text
    twin = client.get(
        f"/plans/{plan_id}", params={"compare": "naive", "x0": "0.5", "x1": "2.5", "q": "b", "format": "json"}
    ).json()
    view = twin["view"]
    assert view["selected"] == plan_id and view["compare"] == by_name["naive"]
    assert view["x_range"] == [0.5, 2.5] and view["query"] == "b"
    assert view["load"] == 160 and view["live"] == [96, 160, 160, 96]
    assert [row["id"] for row in twin["peak"]] == ["a", "b", "d"]  # largest first, ties by id
    assert set(view["offsets"]) >= set(by_name.values())  # slow strategies' plans arrive by job
    bad = client.get(f"/plans/{plan_id}", params={"compare": "fastest"}, headers={"accept": "application/json"})
    assert bad.status_code == 422 and "compare" in bad.json()["detail"]


def test_home_page_and_openapi(client):
    assert client.get("/").status_code == 200
    home = client.get("/?format=json").json()
    assert len(home["examples"]) == 9 and [s["name"] for s in home["strategies"]] == names()
    spec = client.get("/openapi.json").json()
    for path in (
        "/api/v1/models",
        "/api/v1/models/{model_id}/plans",
        "/api/v1/plans/{plan_id}",
        "/api/v1/problems/plan",
        "/api/v1/jobs/{job_id}/events",
        "/api/v1/models/{model_id}/runs",
    ):
        assert path in spec["paths"], path
    assert client.get("/docs").status_code == 200
    js = client.get("/static/vendor/plotly.min.js")
    assert js.status_code == 200 and b"plotly.js v" in js.content[:200]


def test_a_problem_over_the_byte_limit_is_413_naming_the_limit(make_app):
    with TestClient(make_app(max_problem_bytes=200)) as small:
        rows = "".join(f"b{i},{i},{i + 1},64\n" for i in range(40))
        r = small.post(
            "/api/v1/problems/plan", content="id,lower,upper,size\n" + rows, headers={"content-type": "text/csv"}
        )
        assert r.status_code == 413 and "200 bytes" in r.json()["detail"]
        assert "MEMPLAN_MAX_PROBLEM_BYTES" in r.json()["detail"]
        fits = small.post(
            "/api/v1/problems/plan?strategies=first_fit", content=CSV, headers={"content-type": "text/csv"}
        )
        assert fits.status_code == 200, fits.text
