"""A newcomer's first hour, walked in real Chromium against the real app: open sizes are asked for,
never guessed; a plan says what it was planned with; earlier work is listed; a verdict that float32
cannot decide is shown as ill-conditioned with its evidence, not as a red failure. One server and
one data folder for the module (the tests' own storage writes what only a long run would make)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from app.settings import Settings
from app.storage import Storage
from tests import memory_models
from tests.app.routes.test_lists import conv_nchw
from tests.browser.harness import BROWSER, assert_remat_chart, serving, shot, upload
from tests.patience import JOB_MS
from tests.runtime.test_session import small_cnn

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
    note = page.request.post(f"{url}/api/v1/plans/{plan_id}/notes", data={"text": "the first hour's note"})
    assert note.status == 201
    page.click("a.brand")
    assert "the first hour's note" in page.inner_text("#notes-list")
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


def test_a_runs_headline_is_its_timed_runs_median_and_the_job_says_where_else_its_time_went(served, page):
    url, _ = served
    model_id = upload(page, url, small_cnn(), "cnn")
    made = page.request.post(
        f"{url}/api/v1/models/{model_id}/plans", data={"strategies": ["greedy_by_size"], "dims": {"N": 2}}
    ).json()
    page.goto(f"{url}/plans/{made['plans'][0]['id']}")
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.run")
    page.click("#run-button")
    page.wait_for_selector("#live-verdict:not([hidden])", timeout=JOB_MS)
    assert "median of" in page.inner_text("#live-status")
    page.click("#live-link")
    page.wait_for_selector("#job-phases")
    job = page.request.get(page.url.replace("/runs/", "/api/v1/jobs/")).json()
    result = job["result"]
    steps = sum(s["seconds"] for s in result["steps"])
    # The headline is a run's own time: no progress reports in it, so below the followed run's wall time;
    # its steps' times (each the median over the same timed runs) add up to about it.
    assert result["seconds"] < result["stats"]["followed_run_seconds"]
    assert 0.5 * result["seconds"] <= steps <= 1.5 * result["seconds"]
    shown = page.inner_text("#run-seconds")
    assert f"{1000 * result['seconds']:.2f} ms" in shown and "median of" in shown
    phases = page.inner_text("#job-phases")
    for phase in ("loading the model", "timed runs", "the run followed live", "oracle"):
        assert phase in phases
    assert "False" not in page.inner_text("main") and "None" not in page.inner_text("main")
    shot(page, "first-hour-run-time")


def cumsum_model() -> onnx.ModelProto:
    """x [2, 8] -> CumSum along axis 1 -> Relu: an op memplan has no kernel for, on a graph input."""
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "cumsum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [axis],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_memplan_cannot_run_says_so_up_front_and_offers_no_run(served, page):
    url, _ = served
    model_id = upload(page, url, cumsum_model(), "cumsum")
    page.goto(f"{url}/models/{model_id}")
    assert "CumSum" in page.inner_text("#missing-kernels")
    page.click("#plan-button")
    page.wait_for_url("**/plans/*")
    assert "CumSum" in page.inner_text("#cannot-run") and page.locator("#run-button").count() == 0
    refused = page.request.post(f"{url}/api/v1/models/{model_id}/runs", data={"strategy": "greedy_by_size"})
    detail = refused.json()["detail"]
    assert refused.status == 422 and "CumSum" in detail and "runtime.kernels" not in detail


def abs_model() -> onnx.ModelProto:
    """x [2, 8] -> MatMul (trainable w) -> Abs: an op with no backward kernel on the way to the output."""
    weight = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Abs", ["m"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "absnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_training_card_says_what_the_model_lacks_before_the_click(served, page):
    url, _ = served
    model_id = upload(page, url, abs_model(), "absnet")
    page.goto(f"{url}/models/{model_id}")
    before = page.inner_text("#training-readiness")
    assert "Abs" in before and "backward kernel" in before  # runtime.training's own answer
    page.click("#training-plan-button")
    page.wait_for_selector("#training-plan-status.warn")
    assert "Abs" in page.inner_text("#training-plan-status")
    assert page.is_hidden("#error-box") and page.is_hidden("#chart-training-categories")  # no blank chart
    shot(page, "first-hour-training-card")


def test_a_training_steps_charts_name_and_colour_each_category_alike(served, page):
    url, _ = served
    model_id = upload(page, url, memory_models.mlp(features=8, hidden=16, classes=4, seed=5), "trainable")
    page.goto(f"{url}/models/{model_id}")
    page.fill("input[name='dim:N']", "4")
    page.click("#training-plan-button")
    page.wait_for_selector("#chart-training-categories .main-svg")
    script = "(id) => document.getElementById(id).data.map((t) => [t.name, (t.marker || {}).color || t.fillcolor])"
    bars = dict(page.evaluate(script, "chart-training-categories"))
    page.goto(url + page.get_attribute("#training-plan-link", "href"))
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.ready")
    page.evaluate("Memplan.plan.ready.then(() => true)")
    offsets = dict(page.evaluate(script, "chart-offsets-a"))
    shared = set(bars) & set(offsets)
    assert {"back-prop", "gradient", "non-const"} <= shared  # ONE's names on both charts
    assert all(bars[name] == offsets[name] for name in shared), (bars, offsets)


def test_the_api_page_works_without_internet(served, page):
    url, _ = served
    outside: list[str] = []

    def local_only(route) -> None:
        if route.request.url.startswith(url) or route.request.url.startswith("data:"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", local_only)
    page.goto(url + "/docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=20_000)
    assert page.locator(".opblock-summary-path[data-path='/api/v1/plans']").count() >= 1
    assert outside == []
    page.unroute("**/*")
    shot(page, "first-hour-api-docs")


def test_the_smaller_things(served, conv_model, page):
    url, _ = served
    page.goto(url + "/")
    assert "GiB (2,147,483,648 bytes)" in page.inner_text("#upload-limit")  # in words, the exact bytes beside
    # A clean canary run says so, on the live panel and on the run's page.
    model_id = upload(page, url, small_cnn(), "cnn-canary")
    made = page.request.post(
        f"{url}/api/v1/models/{model_id}/plans", data={"strategies": ["greedy_by_size"], "dims": {"N": 1}}
    ).json()
    plan_id = made["plans"][0]["id"]
    page.goto(f"{url}/plans/{plan_id}")
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.run")
    page.check("#run-form input[name='canary']")
    page.click("#run-button")
    page.wait_for_selector("#live-verdict:not([hidden])", timeout=JOB_MS)
    assert "canary" in page.inner_text("#live-verdict")
    page.click("#live-link")
    page.wait_for_selector("#canary-clean")
    assert (
        page.locator("#run-state").inner_text() != page.locator("#run-message").inner_text()
        or not page.locator("#run-progress-card").is_visible()
    )
    # The peak filter brings the table it filters into view.
    page.goto(f"{url}/plans/{plan_id}")
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.review")
    page.click("#peak-filter")
    top = page.evaluate("document.getElementById('tensor-table').getBoundingClientRect().top")
    assert -2 <= top < page.evaluate("window.innerHeight")
    # The saved report has no controls that need the server.
    report = page.request.get(f"{url}/api/v1/plans/{plan_id}/export.html").text()
    assert 'id="run-form"' not in report and 'id="diff-form"' not in report
    # The pipeline form lists the connections the chosen models allow.
    page.goto(url + "/pipelines")
    page.select_option("select[name='model-a']", conv_model)
    page.select_option("select[name='model-b']", model_id)
    assert page.input_value("textarea[name='connections']") == "a:y -> b:x"
    assert "a's outputs: y" in page.inner_text("#connection-hint")


def test_a_long_tensor_name_wraps_in_its_column(served, page):
    url, _ = served
    name = "backbone/stage4/block17/" * 8 + "conv"
    made = page.request.post(
        url + "/api/v1/problems/plan?strategies=greedy_by_size",
        data=f"id,lower,upper,size\n{name},0,2,4096\nshort,1,3,64\n",
        headers={"Content-Type": "text/csv"},
    ).json()
    page.goto(url + made["links"]["page"])
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.review")
    page.wait_for_selector("#tensor-table td")
    table = page.evaluate(
        "(() => { const t = document.getElementById('tensor-table'); return [t.scrollWidth, t.parentElement.clientWidth]; })()"
    )
    assert table[0] <= table[1]  # no sideways scrolling for one long name


def test_the_gallerys_squeezenet_run_is_not_a_red_failure(served, page):
    url, _ = served
    page.goto(url + "/")
    page.click("button[data-example='squeezenet']")
    page.wait_for_url("**/models/*")
    model_id = page.url.rsplit("/", 1)[-1]
    made = page.request.post(f"{url}/api/v1/models/{model_id}/plans", data={"strategies": ["greedy_by_size"]}).json()
    page.goto(f"{url}/plans/{made['plans'][0]['id']}")
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.run")
    page.click("#run-button")
    page.wait_for_selector("#live-verdict:not([hidden])", timeout=JOB_MS)
    live = page.locator("#live-verdict")
    assert live.get_attribute("data-verdict") in ("passed", "ill-conditioned"), live.inner_text()
    assert "fail" not in live.get_attribute("class")
    page.click("#live-link")
    page.wait_for_selector("#verdict")
    verdict = page.locator("#verdict").get_attribute("data-verdict")
    assert verdict in ("passed", "ill-conditioned")
    if verdict == "ill-conditioned":  # then the page shows why, beside the verdict
        assert page.locator(".ill-evidence").count() >= 1
    shot(page, "first-hour-squeezenet-verdict")


def test_the_training_card_plans_with_recomputation_and_says_what_it_bought(served, page):
    from runtime.training import models as training_models

    url, _ = served
    cnn = training_models.small_cnn(batch=4, size=8, channels=(4, 8), classes=10, seed=0)
    page.goto(f"{url}/models/{upload(page, url, cnn, 'remat_card')}")
    page.fill("#training-plan-form [name=remat]", "auto")
    with page.expect_response("**/training-plans") as answer:
        page.click("#training-plan-button")
    assert answer.value.request.post_data_json["remat"] == "auto" and answer.value.status == 201
    remat = answer.value.json()["remat"]
    page.wait_for_selector("#training-plan-remat:not([hidden])")
    said = page.inner_text("#training-plan-remat")
    assert f"{remat['arena_bytes']:,} bytes instead of {remat['arena_bytes_without']:,}" in said
    assert f"recomputing {len(remat['recomputed'])} tensor" in said
    assert remat["arena_bytes"] <= remat["arena_bytes_without"]
    # The search's Pareto curve and the point chosen, drawn in the card from the same answer.
    assert_remat_chart(page, "chart-training-remat", remat)
    shot(page, "first-hour-training-remat")
