"""The training demo followed live on its own page, in real Chromium: started from the page's form
with the canary on, the page draws the unified plan as soon as the demo stored it, a cursor follows
the executing node on the offset and live-bytes charts, the tensors a node writes light up, node
times land on the same step axis, the verdict (the first loss against onnx.reference's, the loss
falling) and the figures arrive without leaving the page. A second test writes a demo's events the
way a worker does (`JobContext.report`, `app.jobs.finish`) to end it on a canary hit, drawn in red at
its tensor and step: a demo in the arena it planned never corrupts, so no real run could show one."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.jobs import finish
from app.settings import Settings
from app.storage import Storage, new_id
from tests.browser.harness import BROWSER, serving, shot
from tests.patience import JOB_MS, JOB_SECONDS

pytestmark = BROWSER

# Installed before the demo's page loads (an init script): it samples the cursor and the lit writes
# from the moment the charts exist, so a demo that runs fast is still met under way.
CURSOR_LOG = """(() => {
  window.cursorAt = [];
  const log = (el) => {
    const c = (el.layout.shapes || []).find((s) => s.name === 'cursor');
    if (c && window.cursorAt[window.cursorAt.length - 1] !== c.x0) window.cursorAt.push(c.x0);
    const offsets = document.getElementById('run-chart-offsets');
    if (offsets && offsets.layout && (offsets.layout.shapes || []).some((s) => s.name === 'write'))
      window.litAt = (window.litAt || 0) + 1;
  };
  const hook = setInterval(() => {  // every relayout of the live chart, from the moment it is drawn
    const el = document.getElementById('run-chart-live');
    if (!el || !el.on) return;
    el.on('plotly_relayout', () => log(el));
    clearInterval(hook);
  }, 2);
})()"""


@pytest.fixture(scope="module")
def served(tmp_path_factory, dask_scheduler) -> Iterator[tuple[str, Storage]]:
    data = tmp_path_factory.mktemp("training-live-data")
    with serving(Settings(data_dir=data, scheduler=dask_scheduler)) as url:
        storage = Storage(data, owns_jobs=False)
        yield url, storage
        storage.close()


def test_a_training_demo_is_followed_live_on_its_unified_plan_to_its_verdict(served, page):
    url, _ = served
    page.add_init_script(CURSOR_LOG)
    page.goto(url + "/training")
    # The small CNN, long enough for the page to meet it under way: a demo that ends before the page
    # follows it is shown finished instead (1,500 MLP steps can end within the second the page takes to
    # fetch the plan, and 1,500 CNN steps, some 7 s, did once on a quiet machine with warm caches).
    page.select_option("#training-form [name=model]", "cnn")
    page.fill("#training-form [name=steps]", "5000")
    page.fill("#training-form [name=batch]", "16")
    page.check("#training-form [name=canary]")
    page.click("#training-button")
    page.wait_for_url("**/training/demo/*")
    # Generous: on a machine busy with other work the page and the job start slowly.
    page.wait_for_function("window.Memplan && Memplan.training && Memplan.training.run", timeout=JOB_MS)
    page.evaluate("Memplan.training.plan.ready.then(() => true)")
    page.wait_for_selector("#live-verdict:not([hidden])", timeout=JOB_MS)
    verdict = page.inner_text("#live-verdict")
    assert "checked: first loss" in verdict and "onnx.reference" in verdict and "fell" in verdict, verdict
    steps = page.evaluate("Memplan.training.view.steps")
    run = page.evaluate(
        "({events: Memplan.training.run.events, times: Memplan.training.run.times.size, "
        "hit: Memplan.training.run.hit || null, failed: Memplan.training.run.failed || null})"
    )
    assert run["events"] > steps and run["times"] == steps and run["hit"] is None and run["failed"] is None
    cursor = page.evaluate("window.cursorAt")
    # On the plan's axis. A step's node events arrive together (one write per step), so the cursor
    # may show each batch at the same node: where it stood, not how often it moved, is what is checked.
    assert cursor and all(0 <= s < steps for s in cursor)
    assert page.evaluate("window.litAt || 0") > 0  # a node's writes were lit as it ran
    bars = page.evaluate("document.getElementById('run-chart-live').data.find((t) => t.name === 'ms per step').x")
    assert sorted(bars) == list(range(steps))
    page.wait_for_selector("#accuracy", timeout=30_000)
    assert "→" in page.inner_text("#loss-drop")
    assert page.evaluate("document.getElementById('chart-categories').data.length") > 1
    assert "/training/demo/" in page.url  # still on the demo's page
    shot(page, "training-live-verdict")
    page.reload()  # the permalink: the finished demo, its verdict and the last step's node times
    page.wait_for_selector("#verdict", timeout=30_000)
    assert "checked" in page.inner_text("#verdict") and "canary" in page.inner_text("#verdict")
    shot(page, "training-finished")


def test_a_canary_hit_in_a_training_step_is_drawn_in_red_where_it_happened(served, page):
    url, storage = served
    made = page.request.post(url + "/api/v1/training/demo", data={"model": "mlp", "steps": 2, "batch": 8})
    real_id = made.json()["id"]
    deadline = time.monotonic() + JOB_SECONDS
    while (job := page.request.get(url + f"/api/v1/jobs/{real_id}").json())["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, "the demo did not finish"
        time.sleep(0.2)
    result = job["result"]
    plan = page.request.get(url + f"/api/v1/plans/{result['plan_id']}").json()
    nodes = result["steps"]
    job_id = new_id()
    storage.create_job(
        job_id=job_id,
        kind="training",
        title="train the mlp demo",
        links={"page": "/training/demo/{id}"},
        created=time.time(),
    )
    storage.update_job(job_id, state="running", message="running", heartbeat=time.time())
    storage.add_job_event(
        job_id=job_id, event="progress", data={"progress": 0.0, "message": "planned", "plan_id": result["plan_id"]}
    )
    page.goto(f"{url}/training/demo/{job_id}")
    page.wait_for_function("window.Memplan && Memplan.training && Memplan.training.run", timeout=30_000)
    page.evaluate("Memplan.training.plan.ready.then(() => true)")
    assert page.evaluate("TRAINING.view.selected") == result["plan_id"]  # drawn before any node ran
    hit_at = 3
    for s in nodes[: hit_at + 1]:
        event = {"progress": 0.1, "message": s["name"], "train_step": 0, "step": s["step"], "seconds": s["seconds"]}
        storage.add_job_event(job_id=job_id, event="progress", data=event)
        page.wait_for_function(f"Memplan.training.run.drawn === {s['step']}", timeout=30_000)
    # The node at `hit_at` wrote over the largest tensor live there that it does not write.
    where = {b["id"]: b for b in plan["buffers"]}
    live = [b for b in plan["buffers"] if b["first"] < hit_at <= b["last"] and b["offset"] is not None]
    victim = max(live, key=lambda b: (b["size"], b["id"]))
    lo, hi = victim["offset"], victim["offset"] + min(victim["size"], 256)
    hit = {
        "step": hit_at,
        "node": nodes[hit_at]["name"],
        "tensors": [{"name": victim["id"], "first_byte": lo, "end": hi, "bytes": hi - lo}],
    }
    detail = f"training stopped: canary: step {hit_at} changed live tensor(s) '{victim['id']}'"
    finish(storage, job_id, "failed", detail, error={"status": 422, "detail": detail, "canary": hit})
    page.wait_for_function("Memplan.training.run.hit", timeout=30_000)
    assert where[victim["id"]]["size"] > 0
    red = page.evaluate(
        "document.getElementById('run-chart-offsets').layout.shapes.filter((s) => s.name === 'canary')"
        ".map((s) => [s.x0, s.y0, s.y1])"
    )
    assert [hit_at, lo, hi] in red
    notes = page.evaluate("document.getElementById('run-chart-offsets').layout.annotations.map((a) => a.text)")
    assert any(f"{hi - lo:,} bytes clobbered at step {hit_at}" in n for n in notes), notes
    assert "canary" in page.inner_text("#live-status")
    shot(page, "training-canary-hit")
    page.reload()  # the failed demo's page: its events replayed on the plan, to the hit in red
    page.wait_for_function("window.Memplan && Memplan.training && Memplan.training.run", timeout=30_000)
    page.wait_for_function("Memplan.training.run.hit", timeout=30_000)
    red = page.evaluate(
        "document.getElementById('run-chart-offsets').layout.shapes.filter((s) => s.name === 'canary')"
        ".map((s) => [s.x0, s.y0, s.y1])"
    )
    assert [hit_at, lo, hi] in red and "canary" in page.inner_text("#live-status")
