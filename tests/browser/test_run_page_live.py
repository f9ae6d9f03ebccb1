"""A run's page opened while the run is under way, in real Chromium: it draws the plan the run
executes and follows the run's events (server-sent, from the database) with a cursor on both charts
and each step's time, then shows the finished run. The job's events are written here the way a
worker writes them (`JobContext.report`, `app.jobs.finish`), so that the page is sure to meet the run
under way; its result is the result of a real run of the same plan."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.jobs import finish
from app.settings import Settings
from app.storage import Storage, new_id
from tests.browser.harness import BROWSER, serving, shot, upload
from tests.patience import JOB_SECONDS
from tests.runtime.test_session import small_cnn

pytestmark = BROWSER


@pytest.fixture(scope="module")
def served(tmp_path_factory, dask_scheduler) -> Iterator[tuple[str, Storage]]:
    data = tmp_path_factory.mktemp("run-page-data")
    with serving(Settings(data_dir=data, scheduler=dask_scheduler)) as url:
        storage = Storage(data, owns_jobs=False)
        yield url, storage
        storage.close()


def _wait(page, what: str) -> None:
    page.wait_for_function(what, timeout=30_000)


def test_a_run_page_under_way_follows_the_run_on_its_plan(served, page):
    url, storage = served
    model_id = upload(page, url, small_cnn(), "cnn")
    made = page.request.post(
        url + f"/api/v1/models/{model_id}/plans", data={"strategies": ["first_fit"], "dims": {"N": 2}}
    )
    plan_id = made.json()["plans"][0]["id"]
    real = page.request.post(
        url + f"/api/v1/models/{model_id}/runs", multipart={"options": f'{{"plan_id": "{plan_id}"}}'}
    )
    assert real.status == 202, real.text()
    _wait_done(page, url, real.json()["id"])
    result = page.request.get(url + f"/api/v1/jobs/{real.json()['id']}").json()["result"]
    steps = result["steps"]

    job_id = new_id()
    links = {"page": "/runs/{id}", "plan": f"/plans/{plan_id}"}
    storage.create_job(
        job_id=job_id, kind="run", title="run cnn in the first_fit plan", links=links, created=time.time()
    )
    storage.update_job(job_id, state="running", message="running", heartbeat=time.time())
    page.goto(f"{url}/runs/{job_id}")
    _wait(page, "window.Memplan && Memplan.runView && Memplan.runView.run")
    page.evaluate("Memplan.runView.ready.then(() => true)")
    assert page.evaluate("RUN.result") is None and page.evaluate("RUN.view.selected") == plan_id
    for s in steps[:3]:
        storage.update_job(job_id, heartbeat=time.time(), progress=(s["step"] + 1) / len(steps))
        event = {
            "progress": (s["step"] + 1) / len(steps),
            "message": s["name"],
            "step": s["step"],
            "seconds": s["seconds"],
        }
        storage.add_job_event(job_id=job_id, event="progress", data=event)
        _wait(page, f"Memplan.runView.run.drawn === {s['step']}")
        cursor = page.evaluate(
            "document.getElementById('run-chart-live').layout.shapes.find((s) => s.name === 'cursor').x0"
        )
        assert cursor == s["step"]
    written = page.evaluate(
        "document.getElementById('run-chart-offsets').layout.shapes.filter((s) => s.name === 'write').map((s) => s.x0)"
    )
    assert written and set(written) == {steps[2]["step"]}  # the tensors step 2 writes, lit
    assert page.evaluate("Memplan.runView.run.times.size") == 3
    assert page.evaluate("document.getElementById('run-progress').value") == pytest.approx(3 / len(steps))
    shot(page, "run-page-under-way")
    finish(storage, job_id, "done", "done", result=result)
    page.wait_for_selector("#verdict", timeout=30_000)  # the page shows the finished run
    assert "outputs match" in page.inner_text("#verdict")
    _wait(page, "window.Memplan && Memplan.runView && Memplan.runView.ready")
    page.evaluate("Memplan.runView.ready.then(() => true)")
    bars = page.evaluate(
        "document.getElementById('run-chart-live').data.find((t) => t.name === 'ms per step').x.length"
    )
    assert bars == len(steps)
    shot(page, "run-page-finished")


def _wait_done(page, url: str, job_id: str) -> None:
    deadline = time.monotonic() + JOB_SECONDS
    while page.request.get(url + f"/api/v1/jobs/{job_id}").json()["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.2)
