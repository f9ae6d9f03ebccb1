"""GET /api/v1/plans/{id}/chart and the big-plan page, through the real app on a real SQLite file.

Oracle: the rectangles of a window are recomputed here, one by one, from the plan's own JSON
(`GET /api/v1/plans/{id}`: every buffer with its offset), not from the service's columns.
"""

from __future__ import annotations

import base64

import pytest

from app.services import chart_windows
from planner.generate import network_like


def _planned(client, n: int = 300, strategy: str = "first_fit") -> tuple[str, dict]:
    r = client.post(
        f"/api/v1/problems/plan?strategies={strategy}",
        content=network_like(n, seed=3).dumps(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    plan_id = r.json()["plans"][0]["id"]
    doc = client.get(f"/api/v1/plans/{plan_id}").json()
    return plan_id, doc


def _expected(doc: dict, x0: float, x1: float, y0: float, y1: float) -> list[dict]:
    """Buffers meeting [x0, x1) x [y0, y1), largest first, ties in problem order (one pool: offsets as placed)."""
    hits = [
        (b, k)
        for k, b in enumerate(doc["buffers"])
        if b["offset"] is not None
        and b["size"] > 0
        and b["first"] < x1
        and b["last"] + 1 > x0
        and b["offset"] < y1
        and b["offset"] + b["size"] > y0
    ]
    hits.sort(key=lambda hit: (-hit[0]["size"], hit[1]))
    return [b for b, _ in hits]


def _window(client, plan_id: str, **params) -> dict:
    r = client.get(f"/api/v1/plans/{plan_id}/chart", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_chart_whole_plan_has_every_rectangle_largest_first(client):
    plan_id, doc = _planned(client)
    win = _window(client, plan_id, max=100_000)
    expected = _expected(doc, 0, doc["steps"], 0, 10**15)
    assert win["total"] == win["count"] == len(expected) == len(doc["buffers"])
    assert not win["truncated"] and win["raster"] is None
    rects = win["rects"]
    assert rects["id"] == [b["id"] for b in expected]
    by_id = {b["id"]: b for b in doc["buffers"]}
    for k, name in enumerate(rects["id"]):
        b = by_id[name]
        assert (rects["first"][k], rects["last"][k], rects["size"][k], rects["offset"][k]) == (
            b["first"],
            b["last"],
            b["size"],
            b["offset"],
        )
        assert win["kinds"][rects["kind"][k]] == b["kind"]
        assert doc["buffers"][rects["index"][k]]["id"] == name
    # the default window is the whole schedule and the arena with the page's headroom
    assert win["window"]["x0"] == 0 and win["window"]["x1"] == doc["steps"]
    assert win["window"]["y1"] == pytest.approx(doc["arena_bytes"] * 1.05)


@pytest.mark.parametrize("window", [(10, 40, 0, 2e6), (0.5, 1.5, 1e5, 3e6), (100, 101, 0, 1e9), (1e6, 2e6, 0, 1e6)])
def test_chart_window_holds_exactly_the_rectangles_meeting_it(client, window):
    plan_id, doc = _planned(client)
    x0, x1, y0, y1 = window
    win = _window(client, plan_id, x0=x0, x1=x1, y0=y0, y1=y1)
    expected = _expected(doc, *window)
    assert win["rects"]["id"] == [b["id"] for b in expected]
    assert win["total"] == len(expected) and not win["truncated"]
    assert win["window"] == {"x0": x0, "x1": x1, "y0": y0, "y1": y1}


def test_chart_window_truncated_to_the_largest_with_a_raster_of_the_rest(client):
    plan_id, doc = _planned(client)
    y1 = doc["arena_bytes"] * 2
    expected = _expected(doc, 0, 50, 0, y1)
    assert len(expected) > 10
    win = _window(client, plan_id, x0=0, x1=50, y0=0, y1=y1, max=10)
    assert win["truncated"] and win["count"] == 10 and win["total"] == len(expected)
    assert win["rects"]["id"] == [b["id"] for b in expected[:10]]
    raster = win["raster"]
    cells = base64.b64decode(raster["cells"])
    assert len(cells) == raster["nx"] * raster["ny"]
    assert any(cells)  # the rest is there, shaded
    # Above the arena nothing is used: those cells are empty (row 0 is the window's lowest bytes).
    top_row = int(doc["arena_bytes"] / (y1 / raster["ny"])) + 1
    assert not any(cells[top_row * raster["nx"] :])


def test_chart_raster_of_a_full_window_is_full_and_of_an_empty_one_empty(client):
    # One buffer alive over the whole schedule, first in size: max=1 rasters the others only.
    csv = "id,lower,upper,size\nbig,0,8,4096\nlow,0,8,1024\n"
    r = client.post("/api/v1/problems/plan?strategies=first_fit", content=csv, headers={"content-type": "text/csv"})
    plan_id = r.json()["plans"][0]["id"]
    doc = client.get(f"/api/v1/plans/{plan_id}").json()
    low = next(b for b in doc["buffers"] if b["id"] == "low")
    win = _window(client, plan_id, x0=0, x1=8, y0=low["offset"], y1=low["offset"] + 1024, max=1)
    if win["rects"]["id"] == ["low"]:  # only `low` meets that window: nothing left to shade
        assert not win["truncated"]
    inside = _window(client, plan_id, x0=2, x1=6, y0=low["offset"] + 256, y1=low["offset"] + 768, max=1)
    assert inside["rects"]["id"] == ["low"] and not inside["truncated"]
    both = _window(client, plan_id, x0=0, x1=8, y0=0, y1=5120, max=1)
    assert both["rects"]["id"] == ["big"] and both["truncated"] and both["total"] == 2
    raster = both["raster"]
    cells = base64.b64decode(raster["cells"])
    row_bytes = 5120 / raster["ny"]
    for row in range(raster["ny"]):
        lo, hi = row * row_bytes, (row + 1) * row_bytes
        values = set(cells[row * raster["nx"] : (row + 1) * raster["nx"]])
        if low["offset"] <= lo and hi <= low["offset"] + 1024:
            assert values == {255}, row  # wholly inside `low`
        elif hi <= low["offset"] or lo >= low["offset"] + 1024:
            assert values == {0}, row  # outside it (`big` is drawn, not shaded)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"x0": 5, "x1": 5}, "x1"),
        ({"x0": 9, "x1": 2}, "x0"),
        ({"y0": 100, "y1": 50}, "y1"),
        ({"max": 0}, "max"),
        ({"max": chart_windows.MAX_WINDOW_RECTS + 1}, "max"),
        ({"x0": "left"}, "x0"),
        ({"y1": "nan"}, "y1"),
        ({"x1": "inf"}, "x1"),
    ],
)
def test_chart_bad_parameters_are_422_naming_them(client, params, named):
    plan_id, _ = _planned(client, 50)
    r = client.get(f"/api/v1/plans/{plan_id}/chart", params=params)
    assert r.status_code == 422, r.text
    assert named in r.json()["detail"]
    assert "Traceback" not in r.text


def test_chart_of_an_unknown_plan_is_404(client):
    r = client.get("/api/v1/plans/nope/chart")
    assert r.status_code == 404 and "nope" in r.json()["detail"]


def test_chart_plan_page_of_a_big_plan_carries_an_aggregate(client, monkeypatch):
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 100)
    monkeypatch.setattr(chart_windows, "PAGE_RECTS", 40)
    monkeypatch.setattr(chart_windows, "PAGE_TENSORS", 30)
    plan_id, doc = _planned(client, 300)
    r = client.get(f"/plans/{plan_id}", headers={"accept": "application/json"})
    assert r.status_code == 200, r.text
    view = r.json()["view"]
    agg = view["aggregate"]
    assert agg["tensors"] == 300 and agg["listed"] == 30
    whole = agg["windows"][plan_id]
    expected = _expected(doc, 0, doc["steps"], 0, doc["arena_bytes"] * 1.05)
    assert whole["rects"]["id"] == [b["id"] for b in expected[:40]] and whole["truncated"]
    # the tensors listed are the 30 largest, in problem order, with this plan's offsets
    largest = sorted(range(300), key=lambda k: (-doc["buffers"][k]["size"], k))[:30]
    assert view["buffers"]["id"] == [doc["buffers"][k]["id"] for k in sorted(largest)]
    assert view["offsets"][plan_id] == [doc["buffers"][k]["offset"] for k in sorted(largest)]
    assert view["load"] == doc["lower_bound"]
    # the live curve's envelope keeps the peak
    assert max(view["live"]) == view["peak_live"] == doc["lower_bound"]
    # small plans are as before: every tensor, no aggregate
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 50_000)
    small = client.get(f"/plans/{plan_id}", headers={"accept": "application/json"}).json()["view"]
    assert "aggregate" not in small and len(small["buffers"]["id"]) == 300


def test_a_big_plan_has_its_chart_columns_ready_when_it_is_planned(client, monkeypatch):
    """Planned in this process, its page does not build them on the first open; a small plan's page never needs them."""
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 100)
    big, doc = _planned(client, 300)
    columns = chart_windows.cached(big)
    assert columns is not None
    assert sorted(columns.offsets.tolist()) == sorted(b["offset"] for b in doc["buffers"])
    small, _ = _planned(client, 60)
    assert chart_windows.cached(small) is None
