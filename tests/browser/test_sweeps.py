"""A sweep started from its form in real Chromium, followed live to its table and heatmaps."""

from __future__ import annotations

from tests.browser.harness import BROWSER, shot, upload
from tests.cli.test_sweep import batched_mlp
from tests.patience import JOB_MS

pytestmark = BROWSER


def test_a_sweep_from_the_form_fills_its_table_and_heatmaps(server, page):
    upload(page, server, batched_mlp(16), "sweep-small")
    upload(page, server, batched_mlp(40), "sweep-wide")
    page.goto(server + "/sweeps")
    for box in page.locator("[name=model]").all():
        box.uncheck()
    page.check("text=sweep-small")
    page.check("text=sweep-wide")
    for box in page.locator("[name=strategy]").all():
        if box.get_attribute("value") not in ("greedy_by_size", "naive", "best_fit"):
            box.uncheck()
    page.fill("[name=dims]", "batch=1,8")
    page.click("#sweep-button")
    page.wait_for_url("**/sweeps/*")
    page.wait_for_function("window.Memplan && Memplan.sweep && Memplan.sweep.ready")
    page.evaluate("Memplan.sweep.ready.then(() => true)")
    page.wait_for_function("document.getElementById('sweep-state').textContent === 'done'", timeout=JOB_MS)
    assert page.locator("#sweep-table tbody tr").count() == 2 * 3 * 2
    assert page.locator("#sweep-heatmaps .js-plotly-plot").count() == 2  # batch=1 and batch=8
    z = page.evaluate("document.querySelector('#sweep-heatmaps .js-plotly-plot').data[0].z")
    assert all(v is None or v >= 1 for row in z for v in row)
    shot(page, "sweep")
