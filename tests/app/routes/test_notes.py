"""Reviewers' notes on plans through the real app, on SQLite and PostgreSQL: added, listed, in the
plan's JSON, deleted; bad input refused naming the field and what is accepted; writes behind the
token and read-only mode; markup shown as text on the page and in the offline report; and the
migration that adds the table, up and down."""

from __future__ import annotations

import time

from alembic import command
from sqlalchemy import inspect, text

from app import migrations, notes
from app.db import open_engine
from app.services import notes as note_service
from app.storage import Storage
from tests.app.routes.test_diffs import mlp_model

MARKUP = '<script>alert("x")</script><b>bold</b> & <img src=x onerror=alert(1)>'


def _plan(client, name: str = "mlp") -> dict:
    """A stored MLP planned by greedy_by_size: its plan JSON (tensors x, h, a, y; four steps)."""
    r = client.post(
        "/api/v1/models", files={"file": (f"{name}.onnx", mlp_model(32, extra_layer=False).SerializeToString())}
    )
    assert r.status_code == 201, r.text
    made = client.post(f"/api/v1/models/{r.json()['id']}/plans", json={"strategies": ["greedy_by_size"]})
    assert made.status_code == 200, made.text
    return client.get(f"/api/v1/plans/{made.json()['plans'][0]['id']}").json()


def _refused(r, status: int, *words: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    detail = r.json()["detail"]
    for word in words:
        assert word in detail, detail
    return detail


def test_notes_are_added_listed_in_the_plan_json_and_deleted(client):
    plan = _plan(client)
    url = f"/api/v1/plans/{plan['id']}/notes"
    assert plan["notes"] == [] and client.get(url).json() == []
    wide = client.post(url, json={"text": "  arena looks fine  ", "author": " Ada "})
    assert wide.status_code == 201, wide.text
    h = next(b for b in plan["buffers"] if b["id"] == "h")
    on_h = client.post(url, json={"text": "why is h\nso large?", "tensor": "h", "step": h["first"]})
    assert on_h.status_code == 201, on_h.text
    first, second = wide.json(), on_h.json()
    assert {k: first[k] for k in ("plan_id", "text", "tensor", "step", "author")} == {
        "plan_id": plan["id"],
        "text": "arena looks fine",  # stripped
        "tensor": None,
        "step": None,
        "author": "Ada",
    }
    assert (second["text"], second["tensor"], second["step"], second["author"]) == (
        "why is h\nso large?",
        "h",
        h["first"],
        None,
    )
    assert first["id"] != second["id"] and first["created"] <= second["created"]

    listed = client.get(url).json()
    assert listed == [first, second]  # oldest first
    doc = client.get(f"/api/v1/plans/{plan['id']}").json()
    assert doc["notes"] == listed
    assert {k: v for k, v in doc.items() if k != "notes"} == {k: v for k, v in plan.items() if k != "notes"}

    # The page's notes carry where this plan puts a note's tensor (a big plan's page holds only its largest).
    twin = client.get(f"/plans/{plan['id']}?format=json").json()
    assert [n.get("at") for n in twin["notes"]] == [None, [h["offset"], h["size"]]]
    assert [n["when"] for n in twin["notes"]] == [
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(n["created"])) for n in listed
    ]

    r = client.delete(f"{url}/{first['id']}")
    assert r.status_code == 204 and r.content == b""
    assert client.get(url).json() == [second]
    _refused(client.delete(f"{url}/{first['id']}"), 404, first["id"], url)


def test_a_notes_text_is_one_to_2000_characters_after_stripping(client):
    plan = _plan(client)
    url = f"/api/v1/plans/{plan['id']}/notes"
    for empty in ("", "   \n\t "):
        _refused(client.post(url, json={"text": empty}), 422, "text", "1 to 2,000 characters")
    _refused(client.post(url, json={"text": "x" * 2001}), 422, "text", "at most 2,000 characters", "2,001")
    longest = client.post(url, json={"text": "  " + "é" * 2000 + "\n"})
    assert longest.status_code == 201 and longest.json()["text"] == "é" * 2000
    _refused(client.post(url, json={"text": "ok", "author": "a" * 101}), 422, "author", "at most 100 characters")
    _refused(client.post(url, json={"text": "a\x00b"}), 422, "text", "NUL")
    _refused(client.post(url, json={"text": "ok", "author": "\x00"}), 422, "author", "NUL")
    lone = b'{"text": "a\\ud800b"}'  # a JSON escape that is no character
    _refused(client.post(url, content=lone, headers={"content-type": "application/json"}), 422, "text", "surrogate")
    _refused(client.post(url, json={}), 422, "text", "required")
    _refused(client.post(url, json={"text": 5}), 422, "text", "string")
    _refused(client.post(url, json={"text": "ok", "colour": "red"}), 422, "colour")
    assert [n["text"] for n in client.get(url).json()] == ["é" * 2000]


def test_a_tensor_and_a_step_must_be_the_plans(client):
    plan = _plan(client)
    url = f"/api/v1/plans/{plan['id']}/notes"
    steps = plan["steps"]
    detail = _refused(
        client.post(url, json={"text": "t", "tensor": "hh", "step": 0}), 422, "tensor", "'hh'", "accepted"
    )
    assert "did you mean 'h'" in detail and f"/api/v1/plans/{plan['id']}" in detail
    _refused(client.post(url, json={"text": "t", "tensor": "zzzz", "step": 0}), 422, "tensor", "e.g. ")
    for step in (steps, -1, 10**9):
        _refused(
            client.post(url, json={"text": "t", "tensor": "h", "step": step}),
            422,
            "step",
            f"accepted: 0 to {steps - 1}",
        )
    for half in ({"tensor": "h"}, {"step": 1}):
        _refused(client.post(url, json={"text": "t", **half}), 422, "tensor and step go together")
    last = client.post(url, json={"text": "t", "tensor": "y", "step": steps - 1})
    assert last.status_code == 201, last.text
    assert len(client.get(url).json()) == 1


def test_an_unknown_plan_is_404_naming_it(client):
    for r in (
        client.get("/api/v1/plans/nosuchplan/notes"),
        client.post("/api/v1/plans/nosuchplan/notes", json={"text": "hello"}),
        client.delete("/api/v1/plans/nosuchplan/notes/abc"),
    ):
        _refused(r, 404, "'nosuchplan'")


def test_a_plan_keeps_a_bounded_number_of_notes(client, monkeypatch):
    plan = _plan(client)
    url = f"/api/v1/plans/{plan['id']}/notes"
    monkeypatch.setattr(note_service, "NOTES_PER_PLAN", 2)
    for k in range(2):
        assert client.post(url, json={"text": f"n{k}"}).status_code == 201
    _refused(client.post(url, json={"text": "one more"}), 409, "2 notes", "delete some first")
    client.delete(f"{url}/{client.get(url).json()[0]['id']}")
    assert client.post(url, json={"text": "one more"}).status_code == 201


def test_notes_go_with_their_model(client, app):
    plan = _plan(client)
    client.post(f"/api/v1/plans/{plan['id']}/notes", json={"text": "bye", "tensor": "h", "step": 1})
    assert client.delete(f"/api/v1/models/{plan['model_id']}").status_code == 204
    with app.state.storage.reading() as session:
        assert session.execute(text("SELECT count(*) FROM notes")).scalar() == 0


def test_writes_need_the_token_and_read_only_refuses_them(make_client):
    with make_client(token="t0ken") as client:
        signed = {"authorization": "Bearer t0ken"}
        made = client.post(
            "/api/v1/models",
            files={"file": ("m.onnx", mlp_model(8, extra_layer=False).SerializeToString())},
            headers=signed,
        )
        planned = client.post(
            f"/api/v1/models/{made.json()['id']}/plans", json={"strategies": ["naive"]}, headers=signed
        )
        url = f"/api/v1/plans/{planned.json()['plans'][0]['id']}/notes"
        _refused(client.post(url, json={"text": "no token"}), 401, "MEMPLAN_TOKEN")
        _refused(client.post(url, json={"text": "wrong"}, headers={"authorization": "Bearer nope"}), 401)
        note = client.post(url, json={"text": "with the token"}, headers=signed)
        assert note.status_code == 201, note.text
        _refused(client.delete(f"{url}/{note.json()['id']}"), 401, "MEMPLAN_TOKEN")
        assert client.get(url).json() == [note.json()]  # reads stay open
    with make_client(read_only=True, token="t0ken") as client:
        _refused(client.post(url, json={"text": "read-only"}, headers=signed), 403, "read-only")
        _refused(client.delete(f"{url}/{note.json()['id']}", headers=signed), 403, "read-only")
        assert client.get(url).json() == [note.json()]
        page = client.get(url.removeprefix("/api/v1").removesuffix("/notes"), headers={"accept": "text/html"}).text
        assert "with the token" in page and 'id="note-form"' not in page and "you cannot add a note here" in page


def test_markup_in_a_note_is_text_on_the_page_and_in_the_report(client):
    plan = _plan(client)
    url = f"/api/v1/plans/{plan['id']}/notes"
    note = client.post(url, json={"text": MARKUP, "tensor": "h", "step": 1, "author": "<i>Eve</i>"}).json()
    assert note["text"] == MARKUP and note["author"] == "<i>Eve</i>"  # kept as written
    page = client.get(f"/plans/{plan['id']}", headers={"accept": "text/html"}).text
    report = client.get(f"/api/v1/plans/{plan['id']}/export.html").text
    for html in (page, report):
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt; &amp; &lt;img" in html
        assert "&lt;i&gt;Eve&lt;/i&gt;" in html and "h@1" in html
        for raw in ('<script>alert("x")', "<b>bold</b>", "<img src=x", "<i>Eve</i>"):
            assert raw not in html
    assert 'id="note-form"' in page and 'id="note-form"' not in report
    # The report is one file: the notes' script is inside it, nothing is fetched from the server.
    assert "M.notes = function" in report and 'src="/static' not in report
    twin = client.get(f"/plans/{plan['id']}?format=json").json()
    assert [n["text"] for n in twin["notes"]] == [MARKUP] and twin["view"]["notes"] == twin["notes"]


# ---- the migration -----------------------------------------------------------------------------------


def test_revision_0004_adds_the_notes_table_and_takes_it_away(tmp_path, database_url):
    url = database_url or f"sqlite:///{tmp_path / 'data' / 'memplan.sqlite3'}"
    (tmp_path / "data").mkdir()
    engine = open_engine(url)
    try:
        with engine.begin() as connection:
            migrations.upgrade(connection, "0003")
            assert not inspect(connection).has_table("notes")
            connection.execute(
                text(
                    "INSERT INTO problems (id, model_id, options, problem, tensors, created) VALUES ('q', NULL, '{}', '{}', '{}', 1)"
                )
            )
            connection.execute(
                text("INSERT INTO plans VALUES ('p', 'q', 'naive', 1, 1, 1, 0.5, true, '[]', '{}', 1, 0)")
            )
        storage = Storage(tmp_path / "data", database_url)  # opening migrates to the head
        try:
            added = notes.add_note(storage, "p", text="kept", tensor=None, step=None, author=None, limit=10)
            assert notes.notes_of(storage, "p") == [added]
        finally:
            storage.close()
        with engine.begin() as connection:
            assert migrations.current(connection) == migrations.head() == "0004"
            command.downgrade(migrations.config(connection), "0003")
            assert not inspect(connection).has_table("notes")
            assert connection.execute(text("SELECT count(*) FROM plans")).scalar() == 1
            migrations.upgrade(connection)
            assert inspect(connection).has_table("notes")
    finally:
        engine.dispose()
