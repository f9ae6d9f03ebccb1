"""A newcomer's first hour, walked in real Chromium against the real app: open sizes are asked for,
never guessed; a plan says what it was planned with; earlier work is listed; a verdict that float32
cannot decide is shown as ill-conditioned with its evidence, not as a red failure. One server and
one data folder for the module (the tests' own storage writes what only a long run would make)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from app.settings import Settings
from app.storage import Storage
from tests.app.routes.test_lists import conv_nchw
from tests.browser.harness import BROWSER, serving, shot, upload

pytestmark = BROWSER


@pytest.fixture(scope="module")
def served(tmp_path_factory, dask_scheduler) -> Iterator[tuple[str, Storage]]:
    data = tmp_path_factory.mktemp("first-hour")
    with serving(Settings(data_dir=data, scheduler=dask_scheduler)) as url:
        storage = Storage(data)
        yield url, storage
        storage.close()


@pytest.fixture(scope="module")
def conv_model(served, browser) -> str:
    url, _ = served
    page = browser.new_page()
    try:
        return upload(page, url, conv_nchw(), "conv_nchw")
    finally:
        page.close()


def test_open_spatial_sizes_are_asked_for_and_the_plan_says_what_it_was_planned_with(served, conv_model, page):
    url, _ = served
    page.goto(f"{url}/models/{conv_model}")
    assert page.input_value("input[name='dim:N']") == "1"  # a batch of one is said, as "(batch)"
    assert page.input_value("input[name='dim:H']") == "" and page.input_value("input[name='dim:W']") == ""
    page.click("#plan-button")
    page.wait_for_selector("#error-box:not([hidden])")
    assert "H" in page.inner_text("#error-box") and "/models/" in page.url  # asked, nothing planned
    page.fill("input[name='dim:H']", "64")
    page.fill("input[name='dim:W']", "48")
    page.click("#plan-button")
    page.wait_for_url("**/plans/*")
    planned = page.inner_text("#planned-with")
    assert "1 × 3 × 64 × 48" in planned and "H = 64" in planned
    assert "alignment" in planned and "in place" in planned
    shot(page, "first-hour-planned-with")


def test_a_models_plans_runs_and_pipelines_can_be_found_again(served, conv_model, page):
    url, _ = served
    made = page.request.post(
        f"{url}/api/v1/models/{conv_model}/plans",
        data={"strategies": ["greedy_by_size"], "dims": {"N": 1, "H": 16, "W": 16}},
    ).json()
    plan_id = made["plans"][0]["id"]
    page.goto(f"{url}/models/{conv_model}")
    listed = page.locator(f"#plans-list a[href='/plans/{plan_id}']")
    assert listed.count() == 1 and "H=16" in page.inner_text("#plans-list")
    page.click("nav a[href='/plans']")
    assert page.locator(f"#all-plans a[href='/plans/{plan_id}']").count() == 1
    answer = page.request.get(f"{url}/api/v1/plans?limit=1")
    assert answer.status == 200 and answer.json()["items"][0]["id"] == plan_id
    for listing in ("/api/v1/pipelines", "/api/v1/sweeps", f"/api/v1/models/{conv_model}/runs"):
        assert page.request.get(url + listing).status == 200, listing
    page.goto(f"{url}/pipelines")
    assert page.locator("#pipelines-card").is_visible()
    shot(page, "first-hour-lists")


def _ill_conditioned_run(storage: Storage, model_id: str, plan_id: str) -> str:
    """A run stored with the verdict runtime.oracle.verify gives an output float32 cannot decide (its
    documented fields: verdict, check, per output ill_conditioned and evidence)."""
    run_id = uuid.uuid4().hex[:16]
    evidence = "the oracle run twice in other summation orders differs by 512 on these logits, as memplan does"
    verdict = {
        "verdict": "ill-conditioned",
        "passed": None,
        "oracle": "onnxruntime",
        "check": "every element within rtol*|onnxruntime| + max(atol, rtol*rms of its output)",
        "rtol": 1e-3,
        "atol": 1e-4,
        "outputs": [
            {
                "name": "y",
                "max_abs_diff": 512.0,
                "mismatched": 1000,
                "close": False,
                "ill_conditioned": 1000,
                "evidence": evidence,
            },
        ],
        "notes": [],
    }
    result = {
        "model_id": model_id,
        "plan_id": plan_id,
        "strategy": "greedy_by_size",
        "seconds": 0.01,
        "steps": [],
        "outputs": [],
        "verdict": verdict,
        "arena_bytes": 1024,
        "stats": {},
        "inputs": "random, seed 0",
        "copies": 0,
        "copied_bytes": 0,
        "fallbacks": {},
        "created": time.time(),
    }
    storage.add_run(run_id=run_id, model_id=model_id, plan_id=plan_id, result=result)
    return run_id


def test_an_ill_conditioned_verdict_is_yellow_with_its_evidence_not_a_red_failure(served, conv_model, page):
    url, storage = served
    made = page.request.post(
        f"{url}/api/v1/models/{conv_model}/plans", data={"strategies": ["naive"], "dims": {"N": 1, "H": 8, "W": 8}}
    ).json()
    run_id = _ill_conditioned_run(storage, conv_model, made["plans"][0]["id"])
    page.goto(f"{url}/runs/{run_id}")
    verdict = page.locator("#verdict")
    assert verdict.get_attribute("data-verdict") == "ill-conditioned"
    assert "fail" not in verdict.get_attribute("class") and "ill-conditioned" in verdict.inner_text()
    colour = page.evaluate("getComputedStyle(document.getElementById('verdict')).color")
    assert colour != "rgb(185, 28, 28)"  # not the failure's red
    assert "summation orders" in page.inner_text("#verdict-evidence-1")
    assert "rtol" in page.inner_text("#verdict-check")
    page.goto(f"{url}/models/{conv_model}")
    assert "ill-conditioned" in page.inner_text("#runs-list")
    shot(page, "first-hour-ill-conditioned")
