"""Notes on a plan in real Chromium: one reviewer adds notes (a click on a tensor picks it and the
step), a second browser sees them and adds its own, which reaches the first without a reload;
markup in a note is shown as text in the list, on the chart and in its hover; the offline report
lists and draws them from a file."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from planner.csvio import write_csv
from planner.generate import network_like
from tests.app.routes.test_diffs import mlp_model
from tests.browser.harness import BROWSER, CHROMIUM, FLAGS, shot, upload

pytestmark = BROWSER

MARKUP = '<script>alert("x")</script><b>bold</b> <img src=x onerror=alert(1)>'
MARKS = "(el) => (el.layout.annotations || []).filter((a) => a.name === 'note').length"


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[Any]:
    """One headless Chromium with room for several contexts: two reviewers, each with their own
    cookies and storage. (The shared `browser` fixture is one persistent context, and one thread
    drives one Playwright.)"""
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture()
def reviewer(chromium_browser) -> Iterator[Any]:
    """Opens pages in a new browser context each time it is called."""
    contexts = []

    def open_page() -> Any:
        contexts.append(chromium_browser.new_context(viewport={"width": 1400, "height": 1000}))
        contexts[-1].set_default_timeout(30_000)
        return contexts[-1].new_page()

    yield open_page
    for context in contexts:
        context.close()


def _open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.ready && Memplan.plan.notes")
    page.evaluate("Memplan.plan.ready.then(() => true)")


def _notes(page) -> list[str]:
    return page.locator("#notes-list li .note-text").all_inner_texts()


def test_a_note_added_in_one_browser_is_seen_in_another_and_markup_stays_text(server, reviewer):
    page = reviewer()
    model_id = upload(page, server, mlp_model(32, extra_layer=True), "mlp-notes")
    made = page.request.post(
        f"{server}/api/v1/models/{model_id}/plans", data={"strategies": ["greedy_by_size", "naive"]}
    )
    plan_id = next(p["id"] for p in made.json()["plans"] if p["strategy"] == "greedy_by_size")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    _open(page, f"{server}/plans/{plan_id}")
    assert page.is_visible("#notes-empty") and _notes(page) == []

    # A click on the tensor h in the left offset chart picks it, at the step under the pointer.
    view = page.evaluate("VIEW")
    h = view["buffers"]["id"].index("h")
    at = page.evaluate(f"Memplan.pixelOf(Memplan.plan.a, VIEW, {h})")
    page.mouse.click(at["x"], at["y"])
    assert page.input_value("#note-form input[name=tensor]") == "h"
    step = int(page.input_value("#note-form input[name=step]"))
    assert view["buffers"]["first"][h] <= step <= view["buffers"]["last"][h]
    page.fill("#note-form textarea[name=text]", MARKUP)
    page.fill("#note-form input[name=author]", "<i>Eve</i>")
    page.click("#note-add")
    page.wait_for_function("document.querySelectorAll('#notes-list li').length === 1")
    assert _notes(page) == [MARKUP]
    assert page.inner_text("#notes-list li .note-at") == f"h@{step}"
    assert "<i>Eve</i>" in page.inner_text("#notes-list li .note-by")
    assert page.locator("#notes-list b, #notes-list img, #notes-list i, #notes-list script").count() == 0
    assert page.input_value("#note-form textarea[name=text]") == ""
    # Drawn on the chart of this plan, at the tensor, its markup as text; the other plan's chart has none.
    assert page.evaluate(f"({MARKS})(Memplan.plan.a.el)") == 1
    assert page.evaluate(f"({MARKS})(Memplan.plan.b.el)") == 0
    label = page.locator("#chart-offsets-a .annotation-text").first
    assert label.text_content().startswith('✎ <script>alert("x")')
    label.hover()
    hover = page.locator("#chart-offsets-a .hoverlayer")
    page.wait_for_function("document.querySelector('#chart-offsets-a .hoverlayer').textContent.includes('<b>bold</b>')")
    assert f"<i>Eve</i> on h at step {step}:" in hover.text_content()
    # Annotations set by someone else (as a run's canary hit does) are kept, and ours come back beside them.
    page.evaluate("Plotly.relayout(Memplan.plan.a.el, {annotations: [{text: 'canary', x: 1, y: 1, name: 'canary'}]})")
    page.wait_for_function(f"({MARKS})(Memplan.plan.a.el) === 1")
    assert page.evaluate("Memplan.plan.a.el.layout.annotations.map((a) => a.name)") == ["canary", "note"]
    # A plan-wide note is listed, not drawn.
    page.click("#note-plan-wide")
    assert page.input_value("#note-form input[name=tensor]") == ""
    page.fill("#note-form textarea[name=text]", "arena is 1.3x LOAD")
    page.click("#note-add")
    page.wait_for_function("document.querySelectorAll('#notes-list li').length === 2")
    assert page.evaluate(f"({MARKS})(Memplan.plan.a.el)") == 1
    shot(page, "notes-first-browser")

    # A second reviewer (a context of their own: cookies, storage) opens the permalink: both notes, drawn.
    permalink = server + page.get_attribute("#permalink", "href")
    other = reviewer()
    other.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    _open(other, permalink)
    assert _notes(other) == [MARKUP, "arena is 1.3x LOAD"]
    assert other.evaluate(f"({MARKS})(Memplan.plan.a.el)") == 1
    assert other.input_value("#note-form input[name=author]") == ""  # the name is remembered per browser
    other.fill("#note-form textarea[name=text]", "agreed & <u>noted</u>")
    other.fill("#note-form input[name=author]", "Bob")
    other.click("#note-add")
    other.wait_for_function("document.querySelectorAll('#notes-list li').length === 3")
    shot(other, "notes-second-browser")

    # The first page asks again every few seconds: Bob's note arrives without a reload.
    page.wait_for_function("document.querySelectorAll('#notes-list li').length === 3")
    assert _notes(page)[-1] == "agreed & <u>noted</u>" and page.locator("#notes-list u").count() == 0
    page.reload()
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.notes")
    assert page.input_value("#note-form input[name=author]") == "<i>Eve</i>"
    assert len(_notes(page)) == 3

    # Deleting one takes it off the list and, for a note on a tensor, off the chart.
    page.locator("#notes-list li").first.locator(".note-delete").click()
    page.wait_for_function("document.querySelectorAll('#notes-list li').length === 2")
    page.wait_for_function(f"({MARKS})(Memplan.plan.a.el) === 0")
    listed = page.request.get(f"{server}/api/v1/plans/{plan_id}/notes").json()
    assert [n["text"] for n in listed] == ["arena is 1.3x LOAD", "agreed & <u>noted</u>"]
    assert dialogs == []


def test_the_offline_report_lists_and_draws_the_notes(server, reviewer, tmp_path):
    page = reviewer()
    model_id = upload(page, server, mlp_model(24, extra_layer=False), "mlp-report")
    made = page.request.post(f"{server}/api/v1/models/{model_id}/plans", data={"strategies": ["greedy_by_size"]})
    plan_id = made.json()["plans"][0]["id"]
    url = f"{server}/api/v1/plans/{plan_id}/notes"
    assert page.request.post(url, data={"text": MARKUP, "tensor": "h", "step": 0}).status == 201
    assert page.request.post(url, data={"text": "plan-wide"}).status == 201
    report = tmp_path / "report.html"
    report.write_text(page.request.get(f"{server}/api/v1/plans/{plan_id}/export.html").text(), encoding="utf-8")
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report.as_uri())
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.notes")
    page.evaluate("Memplan.plan.ready.then(() => true)")
    assert _notes(page) == [MARKUP, "plan-wide"]
    assert page.locator("#notes-list b, #notes-list img, #note-form, .note-delete").count() == 0
    assert page.evaluate(f"({MARKS})(Memplan.plan.a.el)") == 1
    assert page.locator("#chart-offsets-a .annotation-text").first.text_content().startswith("✎ <script>")
    assert all(r.startswith(("file:", "data:")) for r in requests), requests
    shot(page, "notes-report")


def test_a_big_plans_page_draws_a_note_on_a_tensor_it_does_not_hold(server, reviewer):
    # Past 50,000 tensors the page carries only the largest (app/services/chart_windows.py): a note on
    # a small tensor is drawn from the position the page's notes carry.
    body = write_csv(network_like(55_000, seed=3)).encode()
    made = urllib.request.urlopen(
        urllib.request.Request(
            server + "/api/v1/problems/plan?strategies=first_fit", data=body, headers={"Content-Type": "text/csv"}
        )
    )
    plan_id = json.loads(made.read())["plans"][0]["id"]
    with urllib.request.urlopen(f"{server}/api/v1/plans/{plan_id}") as r:
        doc = json.loads(r.read())
    small = sorted(
        (b for b in doc["buffers"] if b["size"] > 0 and b["offset"] is not None), key=lambda b: (b["size"], b["id"])
    )
    page = reviewer()
    page.set_default_timeout(60_000)
    url = f"{server}/api/v1/plans/{plan_id}/notes"
    assert (
        page.request.post(url, data={"text": "tiny <one>", "tensor": small[0]["id"], "step": small[0]["last"]}).status
        == 201
    )
    _open(page, f"{server}/plans/{plan_id}")
    assert page.evaluate("VIEW.aggregate.tensors") == 55_000
    assert small[0]["id"] not in page.evaluate("VIEW.buffers.id")
    marks = page.evaluate("(Memplan.plan.a.el.layout.annotations || []).filter((a) => a.name === 'note')")
    assert [(m["x"], m["y"]) for m in marks] == [(small[0]["last"] + 0.5, small[0]["offset"] + small[0]["size"] / 2)]
    # Another reviewer's note arrives by the poll; the first stays drawn.
    assert (
        page.request.post(url, data={"text": "second", "tensor": small[1]["id"], "step": small[1]["first"]}).status
        == 201
    )
    page.wait_for_function("document.querySelectorAll('#notes-list li').length === 2")
    assert page.evaluate(f"({MARKS})(Memplan.plan.a.el)") >= 1
    shot(page, "notes-big-plan")
