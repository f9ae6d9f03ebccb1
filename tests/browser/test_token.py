"""Signing in with MEMPLAN_TOKEN set, in real Chromium (Debian's, through Playwright), against the
real app served by uvicorn; then an upload from the home page, and what a refused write shows.

Screenshots go to test-artifacts/ (git-ignored), as in test_browser_app.py.
"""

from __future__ import annotations

import shutil

import pytest

from app.services.library import EXAMPLES_DIR
from app.settings import Settings
from tests.browser.harness import BROWSER, chromium, serving, shot

TOKEN = "correct horse battery staple"

pytestmark = BROWSER


@pytest.fixture()
def server(tmp_path, dask_scheduler):
    settings = Settings(data_dir=tmp_path / "data", max_upload_bytes=1 << 20, token=TOKEN, scheduler=dask_scheduler)
    with serving(settings) as url:
        yield url


@pytest.fixture()
def browser(tmp_path):
    with chromium(tmp_path / "chromium-profile") as context:
        yield context


def test_sign_in_through_the_form_upload_a_model_and_see_a_refused_write_explained(server, browser, tmp_path):
    page = browser.new_page()
    page.goto(server + "/")
    assert page.inner_text("#access-state") == "sign in"
    assert page.locator("#file-input").count() == 0  # no control that would be refused
    shot(page, "token-home-signed-out")

    page.locator(".signin-link").first.click()
    page.wait_for_url("**/token?next=%2F")
    page.fill("#token-input", "wrong")
    page.click("#signin-button")
    assert "not this service's token" in page.inner_text("#signin-error")
    assert not browser.cookies()
    shot(page, "token-signin-refused")
    page.fill("#token-input", TOKEN)
    page.click("#signin-button")
    page.wait_for_url(server + "/")
    assert page.inner_text("#access-state") == "signed in"
    (cookie,) = browser.cookies()
    assert cookie["name"] == "memplan_token" and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    shot(page, "token-home-signed-in")

    model = tmp_path / "light_squeezenet.onnx"
    shutil.copyfile(EXAMPLES_DIR / "light_squeezenet.onnx", model)
    page.set_input_files("#file-input", str(model))
    page.wait_for_url("**/models/*")
    assert page.inner_text("h1") == "light_squeezenet"
    model_path = page.url.removeprefix(server)

    browser.clear_cookies()  # as when the cookie expires while the page is open
    page.click("#plan-button")
    box = page.locator("#error-box")
    box.wait_for(state="visible")
    assert "401 · Token required" in box.inner_text() and "MEMPLAN_TOKEN" in box.inner_text()
    assert "[object" not in box.inner_text()
    assert page.get_attribute("#error-signin", "href") == "/token?next=" + model_path.replace("/", "%2F")
    shot(page, "token-write-refused")
    page.close()
