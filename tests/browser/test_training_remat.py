"""A training demo with recomputation, on its page in real Chromium: the search's Pareto curve is
drawn with the point chosen, and the steps recomputation added (named "<node>/remat" in the step's
schedule) are shaded on the unified plan's live-bytes chart, one band per run of neighbouring steps.
The figures the page draws are checked against the job's own result, the bands against the plan's
step names."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.settings import Settings
from tests.browser.harness import BROWSER, assert_remat_chart, serving, shot
from tests.patience import JOB_SECONDS

pytestmark = BROWSER


@pytest.fixture(scope="module")
def served(tmp_path_factory, dask_scheduler) -> Iterator[str]:
    data = tmp_path_factory.mktemp("training-remat-data")
    with serving(Settings(data_dir=data, scheduler=dask_scheduler)) as url:
        yield url


def _bands(step_names: list[str]) -> list[tuple[float, float]]:
    """Runs of neighbouring recomputed steps, as (first - 0.5, last + 0.5)."""
    bands: list[list[float]] = []
    for s, name in enumerate(step_names):
        if not name.endswith("/remat"):
            continue
        if bands and bands[-1][1] == s - 0.5:
            bands[-1][1] = s + 0.5
        else:
            bands.append([s - 0.5, s + 0.5])
    return [(a, b) for a, b in bands]


def test_a_demo_with_recomputation_draws_its_curve_and_shades_the_recomputed_steps(served, page):
    url = served
    made = page.request.post(
        url + "/api/v1/training/demo", data={"model": "cnn", "steps": 2, "batch": 8, "remat": "auto"}
    )
    assert made.ok, made.text()
    job_id = made.json()["id"]
    deadline = time.monotonic() + JOB_SECONDS
    while (job := page.request.get(url + f"/api/v1/jobs/{job_id}").json())["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, "the demo did not finish"
        time.sleep(0.2)
    assert job["state"] == "done", job["error"]
    remat = job["result"]["remat"]
    assert remat["recomputed"], "the CNN's step has activations worth recomputing"
    page.goto(url + f"/training/demo/{job_id}")
    assert_remat_chart(page, "chart-remat", remat)
    summary = page.inner_text("#remat-summary")
    assert f"{len(remat['recomputed'])} tensors recomputed" in summary and f"{remat['arena_bytes']:,}" in summary
    step_names = page.evaluate("TRAINING.view.step_names")
    expected = _bands(step_names)
    assert expected, "the recomputed steps are in the plan's schedule"
    page.wait_for_function(
        "(() => { const el = document.getElementById('run-chart-live');"
        " return el && el.layout && (el.layout.shapes || []).some((s) => s.name === 'recomputed'); })()"
    )
    drawn = page.evaluate(
        "(document.getElementById('run-chart-live').layout.shapes || [])"
        ".filter((s) => s.name === 'recomputed').map((s) => [s.x0, s.x1])"
    )
    assert [tuple(b) for b in drawn] == expected
    shot(page, "training-remat")
