"""Signing in from the browser with MEMPLAN_TOKEN set, and pages in read-only mode.

The real app through `TestClient` on a real SQLite file in a temporary folder. The oracle
for "signed in" is the service's own middleware: a write with the cookie the sign-in page
set must succeed, the same write without it must be refused.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from reliability.malformed import base_model

TOKEN = 's3cret token;="q"'  # a space, ';', '=' and quotes must survive the cookie's quoting
MODEL = base_model().SerializeToString()
HTML = {"accept": "text/html"}


def _upload(client: TestClient):
    """What the home page's upload does (static/app.js): a multipart POST with the browser's cookies."""
    return client.post("/api/v1/models", files={"file": ("m.onnx", MODEL, "application/octet-stream")})


def _sign_in(client: TestClient, token: str = TOKEN, next_path: str = "/", **headers: str):
    """What the sign-in page's form sends."""
    return client.post("/token", data={"token": token, "next": next_path}, headers=headers, follow_redirects=False)


def _nav(page: str) -> str:
    return re.search(r'<header class="top">.*?</header>', page, re.S).group(0)


def test_signed_out_pages_offer_sign_in_instead_of_write_controls(make_client):
    with make_client(token=TOKEN) as client:
        home = client.get("/").text
        assert 'id="file-input"' not in home and 'id="problem-form"' not in home and "data-delete" not in home
        assert (
            'href="/token?next=%2F" class="signin-link">Sign in</a> with this memplan\'s token to upload a model'
            in home
        )
        assert 'id="access-state">sign in</a>' in _nav(home)
        assert _upload(client).status_code == 401  # the controls would indeed have failed
        client.cookies.set("memplan_token", "not-the-token")
        assert 'id="access-state">sign in</a>' in _nav(client.get("/").text)


def test_sign_in_sets_a_strict_httponly_cookie_and_the_pages_writes_then_succeed(make_client):
    with make_client(token=TOKEN) as client:
        r = _sign_in(client, next_path="/pipelines?x=1", **HTML)
        assert r.status_code == 303 and r.headers["location"] == "/pipelines?x=1"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("memplan_token=")
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/"} <= attributes and "secure" not in attributes
        home = client.get("/").text
        assert 'id="file-input"' in home and 'id="access-state">signed in</span>' in _nav(home)
        assert 'id="signout-button"' in _nav(home)
        r = _upload(client)
        assert r.status_code == 201, r.text
        model_page = client.get(r.json()["links"]["page"]).text
        assert 'id="plan-form"' in model_page and "signin-link" not in model_page
        r = client.post("/examples/squeezenet", headers=HTML, follow_redirects=False)  # the gallery's own form
        assert r.status_code == 303 and r.headers["location"].startswith("/models/")


def test_the_cookie_is_secure_when_the_request_came_over_https(make_client):
    with make_client(base_url="https://testserver", token=TOKEN) as client:
        r = _sign_in(client)
        assert r.status_code == 303
        assert "secure" in {part.strip().lower() for part in r.headers["set-cookie"].split(";")}
        assert _upload(client).status_code == 201


def test_a_wrong_token_is_401_with_a_reason_and_sets_no_cookie(make_client):
    with make_client(token=TOKEN) as client:
        for wrong in ("", "s3cret", TOKEN + "x"):
            r = _sign_in(client, token=wrong)
            assert r.status_code == 401 and "set-cookie" not in r.headers
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "not this service's token" in r.json()["detail"]
        r = _sign_in(client, token="wrong", **HTML)  # the browser's form: the form again, with the reason
        assert r.status_code == 401 and "set-cookie" not in r.headers
        assert 'id="signin-error"' in r.text and 'id="signin-form"' in r.text
        assert not client.cookies and _upload(client).status_code == 401


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/path",
        "/\\evil.example",
        "\\\\evil.example",
        "javascript:alert(1)",
        "evil.example",
        "/\t/evil.example",
        "/" + "a" * 3000,
    ],
)
def test_open_redirects_are_refused_and_set_no_cookie(make_client, target):
    with make_client(token=TOKEN) as client:
        r = _sign_in(client, next_path=target)
        assert r.status_code == 400 and "location" not in r.headers and "set-cookie" not in r.headers
        assert r.json()["detail"].startswith("next:")
        r = client.post("/token/signout", data={"next": target}, follow_redirects=False)
        assert r.status_code == 400 and "location" not in r.headers
        assert client.get("/token", params={"next": target}).status_code == 400


def test_sign_out_clears_the_cookie_and_writes_are_refused_again(make_client):
    with make_client(token=TOKEN) as client:
        _sign_in(client)
        assert _upload(client).status_code == 201
        r = client.post("/token/signout", data={"next": "/models"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/models"
        cookie = r.headers["set-cookie"].lower()
        assert cookie.startswith('memplan_token=""') and "max-age=0" in cookie and "path=/" in cookie
        assert "memplan_token" not in client.cookies
        assert _upload(client).status_code == 401
        assert 'id="access-state">sign in</a>' in _nav(client.get("/").text)


def test_a_refused_form_post_from_a_page_gets_a_page_with_a_sign_in_link(make_client):
    with make_client(token=TOKEN) as client:
        r = client.post("/examples/squeezenet", headers={**HTML, "referer": "http://testserver/models?sort=name"})
        assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")
        assert 'href="/token?next=%2Fmodels%3Fsort%3Dname" id="signin-link"' in r.text
        r = client.post("/examples/squeezenet", headers={**HTML, "referer": "https://evil.example/x"})
        assert r.status_code == 401 and 'href="/token?next=%2F"' in r.text  # another site's page is no way back
        r = client.post("/api/v1/examples/squeezenet", headers=HTML)  # the API stays problem+json
        assert r.status_code == 401 and r.json()["status"] == 401


def test_the_sign_in_page_and_its_json_twin(make_client):
    with make_client(token=TOKEN) as client:
        page = client.get("/token", params={"next": "/models/abc"}).text
        assert 'id="signin-form"' in page and 'name="next" value="/models/abc"' in page
        assert client.get("/token?format=json").json()["signed_in"] is False
        _sign_in(client)
        assert client.get("/token?format=json").json()["signed_in"] is True


def test_without_a_token_the_nav_says_nothing_and_every_control_is_there(make_client):
    with make_client() as client:
        home = client.get("/").text
        assert "access-state" not in home and "signin-link" not in home and 'id="file-input"' in home
        assert "needs no token" in client.get("/token").text
        assert _sign_in(client, token="anything").status_code == 303  # nothing to check, nothing set
        assert _upload(client).status_code == 201


def test_read_only_pages_say_so_and_offer_no_write_controls(make_client):
    with make_client() as client:
        model_id = _upload(client).json()["id"]
        body = {"strategies": ["greedy_by_size"], "dims": {"batch": 1}}
        plan_id = client.post(f"/api/v1/models/{model_id}/plans", json=body).json()["plans"][0]["id"]
        assert 'id="run-form"' in client.get(f"/plans/{plan_id}").text  # writable: the control is there
    controls = ['id="file-input"', 'id="problem-form"', "data-delete", 'id="plan-form"', 'id="training-plan-form"']
    controls += ['id="run-form"', 'id="pipeline-form"', 'id="training-form"', "signin-link", 'id="signout-button"']
    with make_client(token=TOKEN, read_only=True) as client:
        client.cookies.set("memplan_token", TOKEN)  # even signed in: read-only refuses every write
        for path in ("/", f"/models/{model_id}", f"/plans/{plan_id}", "/pipelines", "/training"):
            page = client.get(path).text
            assert 'id="read-only-notice"' in page and 'id="access-state">read-only</span>' in page, path
            assert not [c for c in controls if c in page], path
        home = client.get("/").text
        assert "This memplan is read-only: you cannot upload a model here." in home
        assert home.count("disabled>") == home.count('class="example"')  # the gallery is shown, not usable
        assert _sign_in(client).status_code == 403 and _upload(client).status_code == 403


def test_the_open_sign_in_endpoint_reads_only_a_small_form(make_client):
    with make_client(token=TOKEN) as client:
        r = client.post("/token", data={"token": "x" * 20_000, "next": "/"}, follow_redirects=False)
        assert r.status_code == 413 and "set-cookie" not in r.headers and "at most" in r.json()["detail"]
        chunks = iter([b"token=", b"x"])  # a streamed body declares no length
        r = client.post("/token", content=chunks, headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.status_code == 413


def test_wrong_tokens_are_rate_limited_per_address(make_client, tmp_path):
    from app.routes.security import MAX_FAILURES

    with make_client(token=TOKEN) as client:
        for _ in range(MAX_FAILURES):
            assert _sign_in(client, token="guess").status_code == 401
        limited = _sign_in(client, token="guess")
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert "too many wrong tokens" in limited.json()["detail"]
        # Even the right token waits: the limit is on trying, not on failing.
        right = _sign_in(client)
        assert right.status_code == 429 and "memplan_token" not in right.headers.get("set-cookie", "")
    with make_client(
        data_dir=tmp_path / "other", token=TOKEN
    ) as fresh:  # a new service process starts with a clean slate
        assert _sign_in(fresh).status_code == 303
