"""The charts show what they draw, in real Chromium: axis titles drawn (plotly's title objects),
nothing clipped or overlapping (the second axis, the legend and the x axis title, the peak label, the
LOAD label and the bars' own labels), scales set by the placing strategies rather than the yardsticks,
and a run's chart brought into view when the run starts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.settings import Settings
from tests import memory_models
from tests.browser.harness import BROWSER, serving, shot, upload
from tests.patience import JOB_MS
from tests.runtime.test_session import small_cnn

pytestmark = BROWSER

BOX = "(el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"


@pytest.fixture(scope="module")
def url(tmp_path_factory, dask_scheduler) -> Iterator[str]:
    with serving(Settings(data_dir=tmp_path_factory.mktemp("charts"), scheduler=dask_scheduler)) as served:
        yield served


def _box(page, selector: str) -> list[float]:
    return page.locator(selector).first.evaluate(BOX)


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(inner: list[float], outer: list[float]) -> bool:
    return (
        inner[0] >= outer[0] - 1 and inner[1] >= outer[1] - 1 and inner[2] <= outer[2] + 1 and inner[3] <= outer[3] + 1
    )


def test_the_pipeline_chart_titles_its_axis(url, page):
    first = upload(page, url, memory_models.mlp(features=32, hidden=64, classes=16, seed=1), "first")
    second = upload(page, url, memory_models.mlp(features=16, hidden=48, classes=10, seed=2), "second")
    body = {"models": {"a": first, "b": second}, "connections": {"a:y": "b:x"}, "dims": {"a": {"N": 4}, "b": {"N": 4}}}
    made = page.request.post(url + "/api/v1/pipelines", data=body).json()
    page.goto(url + made["links"]["page"])
    page.wait_for_selector("#chart-pipeline .main-svg")
    assert page.locator("#chart-pipeline .ytitle").text_content() == "bytes"


def test_the_run_chart_comes_into_view_and_nothing_on_it_is_clipped(url, page):
    model_id = upload(page, url, small_cnn(), "cnn")
    made = page.request.post(
        f"{url}/api/v1/models/{model_id}/plans",
        data={"strategies": ["greedy_by_size", "naive", "bump", "best_fit"], "dims": {"N": 2}},
    ).json()
    page.goto(f"{url}/plans/{made['plans'][0]['id']}")
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.run")
    page.evaluate("Memplan.plan.ready.then(() => true)")
    # Live bytes: the legend clear of the x axis title, the peak label inside the chart.
    live = _box(page, "#chart-live .main-svg")
    assert not _overlap(_box(page, "#chart-live .legend"), _box(page, "#chart-live .xtitle"))
    assert not _overlap(_box(page, "#chart-offsets-a .legend"), _box(page, "#chart-offsets-a .xtitle"))
    peak = page.locator("#chart-live .textpoint text", has_text="peak")
    assert _inside(peak.evaluate(BOX), live)
    # Strategies: scaled by the placing strategies, the LOAD label clear of every bar's label.
    layout = page.evaluate("document.getElementById('chart-compare').layout.yaxis.range")
    ratios = {p["strategy"]: p["arena_bytes"] / made["plans"][0]["lower_bound"] for p in made["plans"]}
    placing = max(r for s, r in ratios.items() if s not in ("naive", "bump"))
    assert layout[1] <= max(1.02, placing + (placing - 1) * 0.25 + 0.01) + 1e-9
    load_label = page.locator("#chart-compare .annotation", has_text="LOAD").first.evaluate(BOX)
    for label in page.locator("#chart-compare .bartext").all():
        assert not _overlap(label.evaluate(BOX), load_label)
    # The run: the chart it follows is brought into view.
    page.click("#run-button")
    page.wait_for_selector("#live-verdict:not([hidden])", timeout=JOB_MS)
    top = page.evaluate("document.getElementById('chart-offsets-a').getBoundingClientRect().top")
    assert -2 <= top < page.evaluate("window.innerHeight") / 2  # its top on screen, not 900 px below
    # Its per-step times' axis and title inside the chart.
    assert _inside(_box(page, "#chart-live .y2title"), _box(page, "#chart-live .main-svg"))
    shot(page, "first-hour-charts-run")


def test_an_in_place_alias_is_named_on_the_offset_chart_not_left_as_a_collision(url, page):
    problem = {
        "schema": "memplan.problem/1",
        "steps": 4,
        "buffers": [
            {"id": "r1", "size": 4096, "first": 0, "last": 1, "kind": "activation"},
            {"id": "r2", "size": 4096, "first": 1, "last": 2, "kind": "activation", "alias_of": "r1"},
            {"id": "r3", "size": 1024, "first": 2, "last": 3, "kind": "activation"},
        ],
    }
    made = page.request.post(url + "/api/v1/problems/plan?strategies=greedy_by_size", data=problem).json()
    page.goto(url + made["links"]["page"])
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.ready")
    page.evaluate("Memplan.plan.ready.then(() => true)")
    offsets = page.evaluate("VIEW.offsets[Memplan.plan.a.planId]")
    assert offsets[0] == offsets[1]  # the alias sits at its input's offset: the overlap the chart explains
    assert "in place over its input" in page.locator("#chart-offsets-a .legend").text_content()
    point = page.evaluate("Memplan.pixelOf(Memplan.plan.a, VIEW, 1)")
    page.mouse.move(point["x"], point["y"])
    tooltip = page.locator(".mp-tooltip:visible")
    tooltip.wait_for()
    assert "in place over r1" in tooltip.inner_text()
    shot(page, "first-hour-alias")


def test_a_diff_lists_and_outlines_the_tensors_placed_at_different_offsets(url, page):
    csv = "id,lower,upper,size\n" + "".join(f"t{i},{i % 5},{i % 5 + 3},{256 * (i % 4 + 1)}\n" for i in range(12))
    made = page.request.post(
        url + "/api/v1/problems/plan?strategies=greedy_by_size,naive", data=csv, headers={"Content-Type": "text/csv"}
    ).json()
    a, b = (p["id"] for p in made["plans"])
    placed = {}
    for plan_id in (a, b):  # the oracle: each plan's own Plan JSON
        doc = page.request.get(f"{url}/api/v1/plans/{plan_id}").json()
        placed[plan_id] = {buf["id"]: buf["offset"] for buf in doc["buffers"]}
    moved = sorted(name for name in placed[a] if placed[a][name] != placed[b][name])
    assert moved  # naive stacks every tensor: most move
    page.goto(f"{url}/plans/{a}/diff/{b}")
    page.wait_for_function("window.Memplan && Memplan.diff && Memplan.diff.moved")
    rows = page.locator("#moved-table tbody tr td:first-child").all_inner_texts()
    assert sorted(rows) == moved
    outlined = page.evaluate("[Memplan.diff.a.foundShapes.length, Memplan.diff.b.foundShapes.length]")
    assert outlined == [len(moved), len(moved)]
    shot(page, "first-hour-diff-moved")


def test_the_sweep_heatmap_is_scaled_by_the_placing_strategies_and_shows_whole_names(url, page):
    from tests.cli.test_sweep import batched_mlp

    long_name = "a_model_with_a_rather_long_descriptive_name"
    model_id = upload(page, url, batched_mlp(24), long_name)
    body = {"models": [model_id], "strategies": ["naive", "bump", "greedy_by_size", "best_fit"], "dims": [{"batch": 8}]}
    sweep = page.request.post(url + "/api/v1/sweeps", data=body).json()
    page.goto(f"{url}/sweeps/{sweep['id']}")
    page.wait_for_function("window.Memplan && Memplan.sweep && Memplan.sweep.ready")
    page.evaluate("Memplan.sweep.ready.then(() => true)")
    page.wait_for_function("document.getElementById('sweep-state').textContent === 'done'", timeout=JOB_MS)
    chart = "document.querySelector('#sweep-heatmaps .js-plotly-plot')"
    trace = page.evaluate(f"(() => {{ const t = {chart}.data[0]; return {{x: t.x, z: t.z, zmax: t.zmax}}; }})()")
    ratios = dict(zip(trace["x"], trace["z"][0], strict=True))
    placing = max(ratios[s] for s in ("greedy_by_size", "best_fit"))
    assert trace["zmax"] == max(1.02, placing) < max(ratios["naive"], ratios["bump"])
    svg = page.locator("#sweep-heatmaps .main-svg").first.evaluate(BOX)
    label = page.locator("#sweep-heatmaps .ytick text").first
    assert long_name in label.text_content() and _inside(label.evaluate(BOX), svg)
