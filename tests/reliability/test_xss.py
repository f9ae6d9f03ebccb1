"""Names with HTML and script are shown as text: in pages, chart tooltips and the exported report."""

from __future__ import annotations

import json
import urllib.request

from reliability.malformed import base_model
from tests.browser.harness import BROWSER

pytestmark = BROWSER

SCRIPT = "<script>window.__owned = 1</script>"
IMG = '"><img src=x onerror="window.__owned = 2">'
NAMES = {"x": SCRIPT, "r": IMG, "c": "<b onmouseover=window.__owned=3>conv</b>"}


def _post(url: str, body: bytes, content_type: str) -> dict:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def _no_script_ran(tab) -> None:
    assert tab.evaluate("window.__owned === undefined")


def test_hostile_tensor_and_node_names_never_run_as_script(server, page):  # noqa: F811
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    model = base_model(NAMES).SerializeToString()
    record = _post(server + "/api/v1/models?name=%3Cscript%3Ex.onnx", model, "application/octet-stream")
    planned = _post(
        server + f"/api/v1/models/{record['id']}/plans",
        json.dumps({"strategies": ["greedy_by_size", "naive"], "dims": {"batch": 1}}).encode(),
        "application/json",
    )
    plan_id = planned["plans"][0]["id"]

    page.goto(server + f"/models/{record['id']}")
    assert SCRIPT in page.inner_text("body")  # shown as the text it is
    _no_script_ran(page)

    page.goto(server + f"/plans/{plan_id}", wait_until="domcontentloaded")
    page.wait_for_function("window.Memplan && Memplan.plan && Memplan.plan.ready")
    page.evaluate("Memplan.plan.ready.then(() => true)")
    for rect in page.locator("#chart-offsets-a .point").all()[:6]:
        rect.hover(force=True)  # tooltips carry the tensor and node names
        page.wait_for_timeout(100)
    _no_script_ran(page)

    page.goto(server + f"/api/v1/plans/{plan_id}/export.html")
    page.wait_for_timeout(500)
    _no_script_ran(page)
    assert not dialogs
