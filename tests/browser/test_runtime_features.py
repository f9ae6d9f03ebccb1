"""The memory API and training pages in real Chromium: the run page's zero-copy toggle, the
training demo's falling loss chart and the memory options the training forms send, the pipeline
page. Server and browser fixtures: tests/conftest.py."""

from __future__ import annotations

import time

from runtime.training import models as training_models
from tests import memory_models
from tests.browser.harness import BROWSER, shot, upload
from tests.patience import JOB_MS, JOB_SECONDS

# Skipped without Chromium; the server, browser and page fixtures are in tests/conftest.py.
pytestmark = BROWSER


def _finished_run(page) -> None:
    page.wait_for_selector("#copies", timeout=JOB_MS)  # the page reloads once the run is done


def test_run_page_zero_copy_toggle_shows_zero_copies(server, page):
    model_id = upload(page, server, memory_models.mlp(seed=7), "toggle")
    job = page.request.post(server + f"/api/v1/models/{model_id}/runs", data={"dims": {"N": 2}}).json()
    page.goto(server + f"/runs/{job['id']}")
    _finished_run(page)
    assert page.inner_text("#copies") == "2" and page.inner_text("#zero-copy") == "off"
    page.set_checked("#zero-copy-toggle", True)
    page.click("#rerun-button")
    page.wait_for_url(lambda url: job["id"] not in url)
    _finished_run(page)
    assert page.inner_text("#copies") == "0" and page.inner_text("#copied-bytes") == "0"
    assert page.inner_text("#zero-copy").startswith("on") and "outputs match" in page.inner_text("#verdict")
    shot(page, "run-zero-copy")


def test_training_demo_page_shows_a_falling_loss_chart(server, page):
    page.goto(server + "/training")
    page.fill("[name=steps]", "40")
    page.select_option("[name=model]", "mlp")
    page.click("#training-button")
    page.wait_for_url("**/training/demo/*")
    page.wait_for_selector("#loss-drop", timeout=JOB_MS)
    page.wait_for_function("document.getElementById('chart-loss').data !== undefined")
    losses = page.evaluate("document.getElementById('chart-loss').data[0].y")
    assert len(losses) == 40 and sum(losses[-5:]) < 0.5 * sum(losses[:5])
    bars = page.evaluate("document.getElementById('chart-categories').data.map((t) => t.name)")
    assert "non-const" in bars and "optimizer variables" in bars
    # The unified plan of the training step, with the last step's time per node on its step axis.
    page.wait_for_function("window.Memplan && Memplan.runView && Memplan.runView.ready")
    page.evaluate("Memplan.runView.ready.then(() => true)")
    times = page.evaluate(
        "document.getElementById('run-chart-live').data.find((t) => t.name === 'ms per step').x.length"
    )
    # The view the page followed live, or the one it was served with when the demo ended first.
    steps = "((Memplan.training && Memplan.training.view) || TRAINING.view).steps"
    assert times == page.evaluate(steps) > 0
    shot(page, "training-demo")
    page.reload()  # the finished demo's page draws the same plan with the last step's times
    page.wait_for_function("window.Memplan && Memplan.runView && Memplan.runView.ready")
    page.evaluate("Memplan.runView.ready.then(() => true)")
    assert page.evaluate(steps) == times


def _set_memory(page, form: str) -> None:
    page.fill(f"{form} [name=alignment]", "256")
    page.uncheck(f"{form} [name=workspace]")
    page.uncheck(f"{form} [name=prepared_weights]")


def test_training_forms_send_their_memory_options(server, page):
    """The model page's training-plan form and the demo's form send alignment, workspace and prepared
    weights in their REST bodies; the plan's answer and the demo's stored job carry them."""
    options = {"alignment": 256, "workspace": False, "prepared_weights": False}
    cnn = training_models.small_cnn(batch=4, size=8, channels=(4, 8), classes=10, seed=0)
    page.goto(server + f"/models/{upload(page, server, cnn, 'train_memory')}")
    _set_memory(page, "#training-plan-form")
    with page.expect_response("**/training-plans") as answer:
        page.click("#training-plan-button")
    sent = answer.value.request.post_data_json
    assert {k: sent[k] for k in options} == options and answer.value.status == 201
    planned = answer.value.json()
    assert {k: planned["options"][k] for k in options} == options and planned["capacities"]["disposable"] == 0
    page.goto(server + "/training")
    page.fill("[name=steps]", "2")
    _set_memory(page, "#training-form")
    with page.expect_request("**/api/v1/training/demo") as request:
        page.click("#training-button")
    assert {k: request.value.post_data_json[k] for k in options} == options
    page.wait_for_url("**/training/demo/*")
    job_url = server + "/api/v1/jobs/" + page.url.rsplit("/", 1)[1]
    deadline = time.monotonic() + JOB_SECONDS
    while (job := page.request.get(job_url).json())["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, "the demo did not finish"
        time.sleep(0.2)
    assert job["state"] == "done" and {k: job["result"]["demo"][k] for k in options} == options
    page.wait_for_selector("#training-memory", timeout=30_000)
    assert page.inner_text("#training-memory") == "alignment 256 bytes, workspace off, prepared weights off"
    shot(page, "training-memory-options")


def test_pipeline_of_two_uploaded_models_is_planned_and_run(server, page):
    first = upload(page, server, memory_models.mlp(features=32, hidden=64, classes=16, seed=1), "pipe_a")
    second = upload(page, server, memory_models.mlp(features=16, hidden=32, classes=10, seed=2), "pipe_b")
    page.goto(server + "/pipelines")
    page.select_option("[name=model-a]", first)
    page.select_option("[name=model-b]", second)
    page.fill("[name=connections]", "a:y -> b:x")
    page.fill("[name=dims]", '{"a": {"N": 3}, "b": {"N": 3}}')
    page.check("input[name=io][value=external]")
    page.click("#pipeline-button")
    page.wait_for_url("**/pipelines/*")
    joint = int(page.inner_text("#joint-bytes").replace(",", ""))
    separate = int(page.inner_text("#separate-bytes").replace(",", ""))
    assert 0 < joint <= separate
    page.check("#pipeline-run-form [name=zero_copy]")
    page.click("#pipeline-run-button")
    page.wait_for_selector("#live-verdict:not([hidden])", timeout=JOB_MS)  # followed on the pipeline's page
    page.click("#live-link")
    _finished_run(page)
    assert page.inner_text("#copies") == "0" and "outputs match" in page.inner_text("#verdict")
    shot(page, "pipeline-run")
