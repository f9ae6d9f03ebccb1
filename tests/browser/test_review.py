"""Design-review views in real Chromium: two versions of a model compared side by side."""

from __future__ import annotations

from tests.app.routes.test_diffs import _mlp
from tests.browser.harness import BROWSER, shot

pytestmark = BROWSER


def _plan(page, server: str, model, name: str) -> str:
    upload = page.request.post(
        server + "/api/v1/models",
        multipart={
            "file": {
                "name": f"{name}.onnx",
                "mimeType": "application/octet-stream",
                "buffer": model.SerializeToString(),
            }
        },
    )
    assert upload.status == 201, upload.text()
    made = page.request.post(
        server + f"/api/v1/models/{upload.json()['id']}/plans", data={"strategies": ["greedy_by_size"]}
    )
    assert made.status == 200, made.text()
    return made.json()["plans"][0]["id"]


def test_a_diff_of_two_versions_draws_both_plans_on_one_scale_and_zooms_them_together(server, page):
    old = _plan(page, server, _mlp(32, extra_layer=False), "mlp")
    new = _plan(page, server, _mlp(64, extra_layer=True), "mlp-v2")
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
    old = _plan(page, server, _mlp(40, extra_layer=False), "mlp-a")
    new = _plan(page, server, _mlp(48, extra_layer=False), "mlp-b")
    page.goto(f"{server}/plans/{old}")
    page.fill("#diff-form input[name=other]", f"{server}/plans/{new}?compare=x")
    page.click("#diff-form button")
    page.wait_for_url(f"**/plans/{old}/diff/{new}*")
    assert "mlp-a" in page.inner_text("h1") and "mlp-b" in page.inner_text("h1")
