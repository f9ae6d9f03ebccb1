"""Design-review views in real Chromium: two versions of a model compared side by side."""

from __future__ import annotations

from tests.app.routes.test_diffs import mlp_model
from tests.browser.harness import BROWSER, shot, upload

pytestmark = BROWSER


def _plan(page, server: str, model, name: str) -> str:
    model_id = upload(page, server, model, name)
    made = page.request.post(server + f"/api/v1/models/{model_id}/plans", data={"strategies": ["greedy_by_size"]})
    assert made.status == 200, made.text()
    return made.json()["plans"][0]["id"]


def test_a_diff_of_two_versions_draws_both_plans_on_one_scale_and_zooms_them_together(server, page):
    old = _plan(page, server, mlp_model(32, extra_layer=False), "mlp")
    new = _plan(page, server, mlp_model(64, extra_layer=True), "mlp-v2")
    page.goto(f"{server}/plans/{old}/diff/{new}")
    page.wait_for_function("window.Memplan && Memplan.diff && Memplan.diff.ready")
    page.evaluate("Memplan.diff.ready.then(() => true)")
    ranges = page.evaluate(
        "['a', 'b'].map((s) => { const l = Memplan.diff[s].el._fullLayout; return [l.xaxis.range, l.yaxis.range]; })"
    )
    assert ranges[0] == ranges[1]
    assert page.evaluate("['a', 'b'].every((s) => Memplan.diff[s].el.layout.images.length === 1)")
    assert "+" in page.inner_text("#delta-bytes") and "h2" in page.inner_text("#only-in-b")
    page.evaluate("Plotly.relayout(Memplan.diff.a.el, {'xaxis.range': [1, 3]})")
    page.wait_for_function("Memplan.diff.b.el._fullLayout.xaxis.range[0] === 1")
    assert "x0=1.00" in page.get_attribute("#permalink", "href")
    shot(page, "diff-two-versions")


def test_the_plan_page_opens_a_diff_with_another_plan(server, page):
    old = _plan(page, server, mlp_model(40, extra_layer=False), "mlp-a")
    new = _plan(page, server, mlp_model(48, extra_layer=False), "mlp-b")
    page.goto(f"{server}/plans/{old}")
    page.fill("#diff-form input[name=other]", f"{server}/plans/{new}?compare=x")
    page.click("#diff-form button")
    page.wait_for_url(f"**/plans/{old}/diff/{new}*")
    assert "mlp-a" in page.inner_text("h1") and "mlp-b" in page.inner_text("h1")


def test_review_tools_on_a_plan_page(server, page):
    made = page.request.post(server + "/api/v1/examples/squeezenet")
    model_id = made.json()["id"]
    plans = page.request.post(
        server + f"/api/v1/models/{model_id}/plans", data={"strategies": ["naive", "greedy_by_size"]}
    )
    greedy = next(p for p in plans.json()["plans"] if p["strategy"] == "greedy_by_size")
    page.goto(f"{server}/plans/{greedy['id']}")
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.ready && Memplan.plan.review")
    page.evaluate("Memplan.plan.ready.then(() => true)")
    view = page.evaluate("VIEW")
    # Strategies in × LOAD; the live chart shows the arena and the gap under it.
    assert page.evaluate("document.getElementById('chart-compare').layout.yaxis.title.text") == "arena × LOAD"
    assert "fragmentation" in page.evaluate("document.getElementById('chart-live').data.map((t) => t.name)")
    # The histogram counts every tensor that has bytes.
    counted = page.evaluate("document.getElementById('chart-sizes').data.reduce((n, t) => n + t.x.length, 0)")
    assert counted == sum(1 for s in view["buffers"]["size"] if s > 0)
    # The table starts largest first; a click on "name" sorts by name, a second click the other way.
    first = page.locator("#tensor-table tbody tr").first.locator("td").nth(4).inner_text()
    assert int(first.replace(",", "")) == max(view["buffers"]["size"])
    page.click("#tensor-table th[data-key=name]")
    names = page.locator("#tensor-table tbody tr td:first-child").all_inner_texts()
    assert names == sorted(names, reverse=True)
    page.click("#tensor-table th[data-key=name]")
    names = page.locator("#tensor-table tbody tr td:first-child").all_inner_texts()
    assert names == sorted(names)
    # Only the tensors alive at the peak: listed in the table and outlined on both offset charts.
    peak = view["peak_step"]
    alive = [
        i
        for i in range(len(view["buffers"]["id"]))
        if view["buffers"]["first"][i] <= peak <= view["buffers"]["last"][i]
    ]
    page.click("#peak-filter")
    page.wait_for_function(f"Memplan.plan.a.outlined === {min(len(alive), 200)}")
    assert page.locator("#tensor-table tbody tr").count() == min(len(alive), 500)
    assert page.get_attribute("#peak-filter", "aria-pressed") == "true"
    shot(page, "plan-review-tools")
