"""A plan of 100,000 tensors in real Chromium: the page opens on an aggregate (the largest
rectangles and an occupancy raster), and zooming or panning fetches the rectangles of the
window in view from GET /api/v1/plans/{id}/chart and draws them.

Oracle: the rectangles the page drew for a window are checked one by one against the plan's
own JSON (every buffer with its offset), fetched apart from the page.
"""

from __future__ import annotations

import json
import urllib.request

from planner.csvio import write_csv
from planner.generate import network_like
from tests.browser.harness import BROWSER, shot

pytestmark = BROWSER

TENSORS = 100_000


def _post(url: str, body: bytes, content_type: str) -> dict:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def _get(url: str) -> dict:
    with urllib.request.urlopen(url) as response:
        return json.loads(response.read())


PICTURE = "Memplan.plan.a.big.canvas.toDataURL('image/png')"
RANGES = "(() => { const l = Memplan.plan.a.el._fullLayout; return [l.xaxis.range, l.yaxis.range]; })()"


def test_a_100k_tensor_plan_opens_on_an_aggregate_and_panning_fetches_the_window(server, page):
    # first_fit: a real packing in seconds at this size (the exact and search strategies take minutes)
    body = write_csv(network_like(TENSORS, seed=1)).encode()
    result = _post(server + "/api/v1/problems/plan?strategies=first_fit", body, "text/csv")
    plan_id = result["plans"][0]["id"]
    doc = _get(server + f"/api/v1/plans/{plan_id}")
    by_id = {b["id"]: b for b in doc["buffers"]}

    page.set_default_timeout(60_000)
    page.goto(server + result["links"]["page"])
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.ready")
    page.evaluate("Memplan.plan.ready.then(() => true)")
    # The page holds an aggregate, not 100,000 rectangles, and says so.
    assert page.evaluate("VIEW.aggregate.tensors") == TENSORS
    assert page.evaluate("VIEW.buffers.id.length") < TENSORS
    assert page.evaluate("Memplan.plan.a.el.data.length") <= 6  # the legend's traces and the corners
    page.wait_for_function("Memplan.plan.a.big.fetches >= 1")  # the whole view, at the window's limit
    note = page.inner_text("#aggregate-note")
    assert "aggregate" in note and f"{TENSORS:,} tensors" in note
    whole = page.evaluate(PICTURE)
    shot(page, "big-plan-aggregate")

    # Zoom to a twentieth of the schedule around its middle: few enough tensors to draw them all.
    steps = doc["steps"]
    x0, x1 = round(steps * 0.475), round(steps * 0.525)
    page.evaluate(f"Plotly.relayout(Memplan.plan.a.el, {{'xaxis.range': [{x0}, {x1}]}})")
    page.wait_for_function(f"Memplan.plan.a.big.fetches >= 2 && Memplan.plan.a.big.detail.window.x0 === {x0}")
    detail = page.evaluate("Memplan.plan.a.big.detail")
    window = detail["window"]
    inside = [
        b
        for b in doc["buffers"]
        if b["first"] < window["x1"]
        and b["last"] + 1 > window["x0"]
        and b["offset"] < window["y1"]
        and b["offset"] + b["size"] > window["y0"]
    ]
    assert not detail["truncated"] and detail["total"] == detail["count"] == len(inside) > 0
    assert sorted(detail["rects"]["id"]) == sorted(b["id"] for b in inside)
    for k, name in enumerate(detail["rects"]["id"]):
        assert (detail["rects"]["offset"][k], detail["rects"]["size"][k]) == (
            by_id[name]["offset"],
            by_id[name]["size"],
        )
    zoomed = page.evaluate(PICTURE)
    assert zoomed != whole
    assert f"{len(inside):,} tensors in view, all drawn" in page.inner_text("#aggregate-note")
    # The right chart follows and fetches its own window.
    page.wait_for_function(f"Memplan.plan.b.big.detail && Memplan.plan.b.big.detail.window.x0 === {x0}")

    # Pan with the mouse (the chart's pan tool): the view moves and the new window is fetched.
    page.evaluate("Plotly.relayout(Memplan.plan.a.el, {dragmode: 'pan'})")
    page.locator("#chart-offsets-a").scroll_into_view_if_needed()
    before = page.evaluate(RANGES)
    fetched = page.evaluate("Memplan.plan.a.big.fetches")
    box = page.locator("#chart-offsets-a .nsewdrag").bounding_box()
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(cx, cy)
    page.mouse.down()
    for k in range(1, 11):
        page.mouse.move(cx - k * 20, cy + k * 5)
    page.mouse.up()
    page.wait_for_function(f"Memplan.plan.a.big.fetches > {fetched}")
    after = page.evaluate(RANGES)
    assert after[0][0] > before[0][0] and after != before  # dragged left: later steps come into view
    page.wait_for_function(
        "Memplan.plan.a.big.detail.window.x0 === Memplan.plan.a.el._fullLayout.xaxis.range[0]"
        " && Memplan.plan.a.big.painted > 0"
    )
    assert page.evaluate(PICTURE) != zoomed

    # Hover over the largest rectangle drawn: its tooltip names it.
    target = page.evaluate(
        "(() => { const c = Memplan.plan.a, r = c.big.detail.rects, l = c.el._fullLayout, box = c.el.getBoundingClientRect();"
        " const xr = l.xaxis.range, yr = l.yaxis.range;"
        " for (let i = 0; i < r.id.length; i++) {"
        "   const x = Math.max(r.first[i], xr[0]) / 2 + Math.min(r.last[i] + 1, xr[1]) / 2;"
        "   const y = Math.max(r.offset[i], yr[0]) / 2 + Math.min(r.offset[i] + r.size[i], yr[1]) / 2;"
        "   const hit = Memplan.bigRectAt(c, x, y); if (!hit || hit.rects.id[hit.i] !== r.id[i]) continue;"
        "   return {id: r.id[i], x: box.left + l.xaxis._offset + l.xaxis.c2p(x), y: box.top + l.yaxis._offset + l.yaxis.c2p(y)}; }"
        " return null; })()"
    )
    assert target is not None
    page.mouse.move(target["x"], target["y"])
    tip = page.locator(".mp-tooltip:visible")
    assert tip.get_attribute("data-tensor") == target["id"]
    assert f"{by_id[target['id']]['size']:,} bytes" in tip.inner_text()
    shot(page, "big-plan-panned")
