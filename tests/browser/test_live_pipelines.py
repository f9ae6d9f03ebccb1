"""A pipeline run followed on the pipeline's own page, in real Chromium: the joint plan's chart is on
the page, a cursor follows the executing step on the offset and live-bytes charts, the measured time
of every step lands on the same axis, the canary checks every step, the verdict (the models chained
through onnxruntime) arrives, and the user is still on the pipeline's page. The run's page is its
permalink, with the same chart and times. Server, browser and page fixtures: tests/conftest.py."""

from __future__ import annotations

from tests import memory_models
from tests.browser.harness import BROWSER, shot, upload
from tests.patience import JOB_MS

pytestmark = BROWSER


def _pipeline(page, server: str) -> dict:
    first = upload(page, server, memory_models.mlp(features=32, hidden=64, classes=16, seed=1), "live_a")
    second = upload(page, server, memory_models.mlp(features=16, hidden=32, classes=10, seed=2), "live_b")
    body = {"models": {"a": first, "b": second}, "connections": {"a:y": "b:x"}, "dims": {"a": {"N": 3}, "b": {"N": 3}}}
    made = page.request.post(server + "/api/v1/pipelines", data=body)
    assert made.status == 201, made.text()
    return made.json()


def test_a_pipeline_run_is_followed_live_on_its_joint_plan_to_its_verdict(server, page):
    pipeline = _pipeline(page, server)
    page.goto(server + pipeline["links"]["page"])
    page.wait_for_function("window.Memplan && Memplan.pipeline && Memplan.pipeline.ready && Memplan.pipeline.run")
    page.evaluate("Memplan.pipeline.ready.then(() => true)")
    assert page.evaluate("document.getElementById('run-chart-offsets').layout.images.length") == 1
    # Every step the page's cursor is drawn at is recorded, to see it move with the run.
    page.evaluate(
        """(() => {
          const el = document.getElementById('run-chart-live'); window.cursorAt = [];
          el.on('plotly_relayout', () => {
            const c = (el.layout.shapes || []).find((s) => s.name === 'cursor');
            if (c && window.cursorAt[window.cursorAt.length - 1] !== c.x0) window.cursorAt.push(c.x0);
          });
        })()"""
    )
    page.check("#pipeline-run-form [name=canary]")
    page.click("#pipeline-run-button")
    page.wait_for_selector("#live-verdict:not([hidden])", timeout=JOB_MS)
    assert "outputs match onnxruntime" in page.inner_text("#live-verdict")
    steps = page.evaluate("PIPELINE.view.steps")
    run = page.evaluate(
        "({events: Memplan.pipeline.run.events, times: Memplan.pipeline.run.times.size, "
        "drawn: Memplan.pipeline.run.drawn, hit: Memplan.pipeline.run.hit || null})"
    )
    assert run["events"] >= 1 and run["times"] == steps and run["drawn"] is not None and run["hit"] is None
    cursor = page.evaluate("window.cursorAt")
    assert cursor and all(0 <= s < steps for s in cursor) and cursor == sorted(cursor)  # forward, on the axis
    bars = page.evaluate("document.getElementById('run-chart-live').data.find((t) => t.name === 'ms per step').x")
    assert sorted(bars) == list(range(steps))
    assert page.url.endswith(pipeline["links"]["page"])  # still on the pipeline's page
    shot(page, "pipeline-live-run-verdict")
    # The run's permalink: the joint plan it ran in, with the measured time of every step.
    page.click("#live-link")
    page.wait_for_selector("#copies", timeout=JOB_MS)
    page.wait_for_function("window.Memplan && Memplan.runView && Memplan.runView.ready")
    page.evaluate("Memplan.runView.ready.then(() => true)")
    assert "outputs match" in page.inner_text("#verdict")
    bars = page.evaluate(
        "document.getElementById('run-chart-live').data.find((t) => t.name === 'ms per step').x.length"
    )
    assert bars == steps
    shot(page, "pipeline-run-page")
