"""A big plan's page opened in any app process without reading its problem: the head written beside
the chart columns at planning time, and the page of a real second Python process on the same data
folder and database (where reading the problem's content or parsing a Problem raises) has the same
figures as the page built from the whole problem. Oracle: the page built the old way, from the
parsed problem and every plan's JSON, in this process."""

from __future__ import annotations

import json

from app.services import chart_windows, column_store, plan_heads, reports
from planner.generate import network_like
from tests.app.routes.test_column_store import in_another_process

# Another app process: the page's context (the JSON twin's content) and its title, with every way of
# reading the whole problem refused.
OTHER_PROCESS = """
import json, sys
from pathlib import Path
import planner
from app.services import chart_windows, reports
from app.storage import Storage
chart_windows.AGGREGATE_ABOVE = 100
def refuse(*args, **kwargs):
    raise AssertionError("the page parsed the whole problem")
planner.Problem.from_json = staticmethod(refuse)
read = Storage.get_problem
def get_problem(self, problem_id, *, content=True):
    assert not content, "the page read the whole problem"
    return read(self, problem_id, content=False)
Storage.get_problem = get_problem
root, url, plan_id, compare = sys.argv[1:5]
storage = Storage(Path(root), url, owns_jobs=False)
record = storage.get_plan(plan_id, placements=False)
title = reports.plan_title(storage, record, compare)
context = reports.plan_page_context(storage, record, compare, 2.0, 40.0, "t1")
print(json.dumps({"title": title, "context": context}, default=str))
storage.close()
"""


def _same(value) -> object:
    return json.loads(json.dumps(value, default=str))


def test_another_process_opens_a_big_plan_from_its_head_and_columns_with_the_same_figures(client, monkeypatch):
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 100)
    problem = network_like(300, seed=5)
    r = client.post(
        "/api/v1/problems/plan?strategies=first_fit,greedy_by_size",
        content=problem.dumps(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    problem_id = r.json()["problem_id"]
    plan_id, other_id = (p["id"] for p in r.json()["plans"])
    storage = client.app.state.storage
    head = column_store.load_head(storage, problem_id)
    assert head is not None and head["buffers"] == len(problem.buffers) and head["steps"] == problem.steps
    tensor = max(problem.buffers, key=lambda b: (b.size, b.id))
    note = {"text": "the largest", "tensor": tensor.id, "step": tensor.first}
    assert client.post(f"/api/v1/plans/{plan_id}/notes", json=note).status_code == 201
    other = in_another_process(OTHER_PROCESS, storage, plan_id, "greedy_by_size")
    # The oracle: the page built the old way, from the whole problem, without the head.
    column_store.path(storage, problem_id, column_store.HEAD, ".json").unlink()
    monkeypatch.setattr(plan_heads, "_heads", type(plan_heads._heads)(8))
    record = storage.get_plan(plan_id, placements=False)
    assert plan_heads.stored(storage, problem_id) is None
    full = reports.plan_page_context(storage, record, "greedy_by_size", 2.0, 40.0, "t1")
    assert other["title"] == reports.plan_title(storage, record, "greedy_by_size")
    assert other["context"] == _same(full)
    ctx = other["context"]
    assert ctx["compare"]["id"] == other_id and ctx["problem"]["buffers"] == len(problem.buffers)
    assert ctx["view"]["aggregate"]["tensors"] == len(problem.buffers) and ctx["peak"]
    plan = client.get(f"/api/v1/plans/{plan_id}").json()
    placed = {b["id"]: b["offset"] for b in plan["buffers"]}
    (noted,) = ctx["notes"]
    assert noted["at"] == [placed[tensor.id], tensor.size]
    # The planning process, with the head written again, shows the same page as its JSON twin.
    chart_windows.store_columns(storage, problem_id, problem, [storage.get_plan(plan_id)])
    assert plan_heads.stored(storage, problem_id) is not None
    twin = client.get(
        f"/plans/{plan_id}", params={"format": "json", "compare": "greedy_by_size", "x0": 2, "x1": 40, "q": "t1"}
    )
    assert twin.status_code == 200
    assert {k: twin.json()[k] for k in ctx} == ctx
    bad = client.get(f"/plans/{plan_id}", params={"compare": "nope"})
    assert bad.status_code == 422 and "greedy_by_size" in bad.text


def test_a_small_plan_has_no_head(client, monkeypatch):
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 100_000)
    r = client.post(
        "/api/v1/problems/plan?strategies=first_fit",
        content=network_like(300, seed=5).dumps(),
        headers={"content-type": "application/json"},
    )
    assert column_store.load_head(client.app.state.storage, r.json()["problem_id"]) is None


def test_the_light_reads_leave_out_the_content(client):
    r = client.post(
        "/api/v1/problems/plan?strategies=first_fit",
        content=network_like(50, seed=1).dumps(),
        headers={"content-type": "application/json"},
    )
    storage = client.app.state.storage
    light = storage.get_problem(r.json()["problem_id"], content=False)
    full = storage.get_problem(r.json()["problem_id"])
    assert light.problem is None and light.tensors is None and full.problem["buffers"]
    assert (light.id, light.model_id, light.options) == (full.id, full.model_id, full.options)
    (plan,) = storage.plans_of(r.json()["problem_id"], placements=False)
    assert plan.plan == {} and storage.plans_of(r.json()["problem_id"])[0].plan["placements"]
