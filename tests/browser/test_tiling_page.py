"""Tiling from the model page in real Chromium: the search runs as a job the page follows, and the
plan page it lands on draws the tiled stage and the curve the job found. Server and browser
fixtures: tests/conftest.py."""

from __future__ import annotations

from runtime.training.models import mobilenet_v2_like
from tests.browser.harness import BROWSER, shot, upload
from tests.patience import JOB_MS

# Skipped without Chromium; the server, browser and page fixtures are in tests/conftest.py.
pytestmark = BROWSER


def test_planning_with_tiling_follows_the_search_job_to_the_tiled_plan(server, page):
    blocks = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2))  # under the upload limit, and tileable
    model_id = upload(page, server, mobilenet_v2_like(size=64, width=0.35, classes=10, blocks=blocks), "tiled")
    page.goto(server + f"/models/{model_id}")
    # One fast strategy: the search is what the page follows.
    for box in page.locator("#plan-form input[name=strategy]").all():
        box.set_checked(box.get_attribute("value") == "greedy_by_size")
    page.check("[name=io][value=external]")
    page.set_checked("[name=tile]", True)
    with page.expect_response(lambda r: r.url.endswith(f"/api/v1/models/{model_id}/plans")) as answered:
        page.click("#plan-button")
    job = answered.value.json()["job"]
    assert job is not None  # the request did not search; it handed the search to a job
    page.wait_for_url("**/plans/*", timeout=JOB_MS)
    result = page.request.get(server + f"/api/v1/jobs/{job['id']}").json()["result"]
    assert page.url.endswith(result["page"])
    tiling = result["tiling"]
    assert tiling is not None, result["tiling_note"]
    assert page.locator("#tiling").count() == 1
    assert page.locator(".tiling-point").count() == len(tiling["curve"])
    assert f"{tiling['arena_bytes_untiled']:,} bytes" in page.inner_text("#tiling")
    shot(page, "plan-tiled")
