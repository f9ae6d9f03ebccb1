"""A run followed on the plan page itself, in real Chromium: the cursor moves with the executing
step, step times land on the same axis, the verdict arrives; a deliberately broken plan run with
the canary shows the hit in red at its step and tensor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.settings import Settings
from app.storage import Storage
from tests.app.routes.test_live_runs import store_broken_plan
from tests.browser.harness import BROWSER, serving, shot, upload
from tests.patience import JOB_MS
from tests.runtime.test_session import small_cnn

pytestmark = BROWSER


@pytest.fixture(scope="module")
def served(tmp_path_factory, dask_scheduler) -> Iterator[tuple[str, Storage]]:
    """The app on its own data folder, whose storage the test can write a broken plan into."""
    data = tmp_path_factory.mktemp("live-data")
    with serving(Settings(data_dir=data, scheduler=dask_scheduler)) as url:
        storage = Storage(data)
        yield url, storage
        storage.close()


def _plan(page, url: str) -> tuple[str, dict]:
    model_id = upload(page, url, small_cnn(), "cnn")
    made = page.request.post(
        url + f"/api/v1/models/{model_id}/plans", data={"strategies": ["greedy_by_size"], "dims": {"N": 2}}
    )
    assert made.status == 200, made.text()
    return model_id, made.json()


def _open(page, url: str, plan_id: str) -> None:
    page.goto(f"{url}/plans/{plan_id}")
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.ready && Memplan.plan.run")
    page.evaluate("Memplan.plan.ready.then(() => true)")


def test_a_run_followed_on_the_plan_page_to_its_verdict(served, page):
    url, _ = served
    _, made = _plan(page, url)
    _open(page, url, made["plans"][0]["id"])
    page.click("#run-button")
    page.wait_for_selector("#live-verdict:not([hidden])", timeout=JOB_MS)
    assert "outputs match" in page.inner_text("#live-verdict")
    run = page.evaluate(
        "({events: Memplan.plan.run.events, times: Memplan.plan.run.times.size, drawn: Memplan.plan.run.drawn})"
    )
    steps = page.evaluate("VIEW.steps")
    assert run["events"] >= 1 and run["times"] == steps and run["drawn"] is not None
    names = page.evaluate("document.getElementById('chart-live').data.map((t) => t.name)")
    assert "ms per step" in names
    assert page.url.endswith(made["plans"][0]["id"])  # still on the plan page
    assert "/runs/" in page.get_attribute("#live-link", "href")
    shot(page, "live-run-verdict")
    # The run's permalink shows the plan it ran in, with the measured time of every step.
    page.click("#live-link")
    page.wait_for_function("window.Memplan && Memplan.runView && Memplan.runView.ready")
    page.evaluate("Memplan.runView.ready.then(() => true)")
    bars = page.evaluate(
        "document.getElementById('run-chart-live').data.find((t) => t.name === 'ms per step').x.length"
    )
    assert bars == steps
    assert page.evaluate("document.getElementById('run-chart-offsets').layout.images.length") == 1
    page.evaluate("Plotly.relayout('run-chart-offsets', {'xaxis.range': [1, 3]})")
    page.wait_for_function("document.getElementById('run-chart-live').layout.xaxis.range[0] === 1")
    shot(page, "run-page-plan-chart")


def test_a_canary_hit_is_drawn_in_red_at_its_step_and_tensor(served, page):
    url, storage = served
    _, made = _plan(page, url)
    broken, start, overlap = store_broken_plan(
        storage, page.request.get(url + f"/api/v1/plans/{made['plans'][0]['id']}").json()
    )
    _open(page, url, broken)
    assert page.is_checked("#run-form [name=canary]") and page.is_disabled("#run-form [name=canary]")
    page.click("#run-button")
    page.wait_for_function("Memplan.plan.run.hit", timeout=60_000)
    hit = page.evaluate("Memplan.plan.run.hit")
    assert hit["step"] == 2 and hit["tensors"][0]["name"] == "r" and hit["tensors"][0]["bytes"] == overlap
    shapes = page.evaluate("Memplan.plan.a.el.layout.shapes.filter((s) => s.name === 'canary')")
    assert shapes and shapes[0]["x0"] == 2 and shapes[0]["y0"] == start
    note = page.evaluate("Memplan.plan.a.el.layout.annotations.map((a) => a.text).join(' ')")
    assert f"{overlap:,} bytes clobbered at step 2" in note
    assert "canary" in page.inner_text("#live-status")
    shot(page, "live-run-canary-hit")
