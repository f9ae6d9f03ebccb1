"""Storage on both databases it supports: a real SQLite file, and a real PostgreSQL (`postgresql`
in tests/conftest.py). Every test here runs on each (`database_url` is None for SQLite)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from app import migrations
from app.db import Base, open_engine
from app.storage import DatabaseUnavailable, JobRecord, PlanRecord, ProblemRecord, RunRecord, Storage

SHA = "ab" * 32


@pytest.fixture()
def open_storage(tmp_path, database_url) -> Iterator[Callable[..., Storage]]:
    """Opens storage on this test's database (more than once: two app processes share one database)."""
    opened: list[Storage] = []

    def make(**options: object) -> Storage:
        opened.append(Storage(tmp_path / "data", database_url, **options))  # type: ignore[arg-type]
        return opened[-1]

    yield make
    for storage in opened:
        storage.close()


@pytest.fixture()
def storage(open_storage) -> Storage:
    return open_storage()


def plan(plan_id: str, strategy: str, arena: int = 1 << 40) -> PlanRecord:
    return PlanRecord(
        id=plan_id,
        problem_id="",
        strategy=strategy,
        arena_bytes=arena,
        lower_bound=arena // 2,
        naive_bytes=arena * 2,
        seconds=0.25,
        valid=strategy != "broken",
        violations=["b1 overlaps b2 at step 3"] if strategy == "broken" else [],
        plan={"offsets": {"b1": 0, "b2": 64}, "name": "naïve ✓"},
    )


# ---- round trips ---------------------------------------------------------------------------------


def test_a_model_round_trips_and_the_same_content_is_stored_once(storage):
    summary = {"inputs": [{"name": "x", "shape": [1, 3]}], "ops": 12}
    record, created = storage.add_model(
        sha256=SHA, name="tiny", filename="tiny.onnx", fmt="onnx", size=3 << 30, summary=summary
    )
    assert created and record.id == SHA[:16] and record.bytes == 3 << 30 and record.summary == summary
    again, created = storage.add_model(sha256=SHA, name="other name", filename="x.onnx", fmt="onnx", size=1, summary={})
    assert not created and again == record
    assert storage.get_model(record.id) == record
    assert storage.list_models() == [record]
    assert storage.get_model("nope") is None


def test_models_are_listed_newest_first(storage):
    first, _ = storage.add_model(sha256="01" * 32, name="a", filename="a.onnx", fmt="onnx", size=1, summary={})
    time.sleep(0.01)
    second, _ = storage.add_model(sha256="02" * 32, name="b", filename="b.zip", fmt="zip", size=2, summary={})
    assert [m.id for m in storage.list_models()] == [second.id, first.id]


def test_problems_plans_and_runs_round_trip_and_go_with_their_model(storage):
    record, _ = storage.add_model(sha256=SHA, name="tiny", filename="tiny.onnx", fmt="onnx", size=10, summary={})
    problem = {"buffers": [{"id": "b1", "size": 64, "first": 0, "last": 2}], "steps": 3}
    made = storage.add_problem(
        problem=problem, options={"alignment": 64}, model_id=record.id, tensors={"b1": {"dtype": "float32"}}
    )
    problem_id = made.id
    assert (
        storage.get_problem(problem_id)
        == made
        == ProblemRecord(
            id=problem_id,
            model_id=record.id,
            options={"alignment": 64},
            problem=problem,
            tensors={"b1": {"dtype": "float32"}},
            created=made.created,
        )
    )
    light = storage.get_problem(problem_id, content=False)
    assert light == ProblemRecord(problem_id, record.id, {"alignment": 64}, None, None, made.created)
    given = [plan("p-z", "wic"), plan("p-a", "naive"), plan("p-m", "broken")]
    storage.add_plans(problem_id=problem_id, plans=given)
    stored = storage.plans_of(problem_id)
    assert [p.id for p in stored] == ["p-z", "p-a", "p-m"]  # the order given, not the ids'
    assert stored[2] == PlanRecord(**{**given[2].__dict__, "problem_id": problem_id})
    assert storage.get_plan("p-a").arena_bytes == 1 << 40 and storage.get_plan("p-m").valid is False
    # Without its placements: every other field as stored, and the Plan JSON left unread.
    head = storage.get_plan("p-z", placements=False)
    assert head == PlanRecord(**{**given[0].__dict__, "problem_id": problem_id, "plan": {}})
    assert storage.get_plan("p-z").plan == given[0].plan != {}
    storage.add_run(run_id="r1", model_id=record.id, plan_id="p-z", result={"peak": 1})
    again = storage.add_run(run_id="r1", model_id=record.id, plan_id="p-z", result={"peak": 2})
    assert storage.get_run("r1") == again == RunRecord("r1", record.id, "p-z", {"peak": 2}, again.created)  # replaced

    assert storage.delete_model(record.id)
    assert storage.get_model(record.id) is None and storage.get_problem(problem_id) is None
    assert storage.plans_of(problem_id) == [] and storage.get_plan("p-a") is None and storage.get_run("r1") is None
    assert not storage.delete_model(record.id)


def test_a_problem_without_a_model_and_a_run_without_one(storage):
    problem_id = storage.add_problem(problem={"buffers": []}, options={}, model_id=None).id
    assert storage.get_problem(problem_id).tensors == {}
    storage.add_run(run_id="pipeline-run", model_id=None, plan_id=None, result={"ok": True})
    assert storage.get_run("pipeline-run").result == {"ok": True}


def test_blobs_are_content_addressed_files_in_the_data_folder(storage, tmp_path):
    temp = storage.incoming_path()
    temp.write_bytes(b"onnx bytes")
    kept = storage.keep_blob(temp, SHA, "onnx")
    assert kept == tmp_path / "data" / "blobs" / "ab" / f"{SHA}.onnx" and kept.read_bytes() == b"onnx bytes"
    duplicate = storage.incoming_path()
    duplicate.write_bytes(b"onnx bytes")
    assert storage.keep_blob(duplicate, SHA, "onnx") == kept and not duplicate.exists()
    record, _ = storage.add_model(sha256=SHA, name="m", filename="m.onnx", fmt="onnx", size=10, summary={})
    assert storage.model_file(record) == kept
    storage.delete_model(record.id)
    assert not kept.exists()


# ---- several writers -----------------------------------------------------------------------------


def test_writers_in_two_processes_worth_of_storage_do_not_lose_or_mix_rows(open_storage):
    first, second = open_storage(), open_storage()  # two engines: what two app processes would have
    errors: list[BaseException] = []

    def write(storage: Storage, worker: int) -> None:
        try:
            for k in range(15):
                sha = f"{worker:02x}{k:02x}" * 16
                record, created = storage.add_model(
                    sha256=sha, name=f"m{worker}-{k}", filename="m.onnx", fmt="onnx", size=k, summary={"k": k}
                )
                assert created
                problem_id = storage.add_problem(problem={"k": k}, options={}, model_id=record.id).id
                storage.add_plans(problem_id=problem_id, plans=[plan(f"{worker}-{k}", "naive")])
        except BaseException as e:  # reported below, with the thread's failure
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s, w)) for w, s in enumerate([first, second] * 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(first.list_models()) == len(second.list_models()) == 6 * 15


def test_two_uploads_of_the_same_content_at_once_make_one_model(open_storage):
    storages = [open_storage() for _ in range(2)]
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def upload(storage: Storage) -> None:
        barrier.wait()
        results.append(
            storage.add_model(sha256=SHA, name="same", filename="same.onnx", fmt="onnx", size=1, summary={})[1]
        )

    threads = [threading.Thread(target=upload, args=(storages[i % 2],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]


# ---- jobs ----------------------------------------------------------------------------------------


def new_job(storage: Storage, job_id: str = "j1", created: float = 100.0) -> None:
    storage.create_job(job_id=job_id, kind="plan", title="Plan tiny", links={"plan": "/plans/p1"}, created=created)


def test_a_created_job_is_queued_with_every_column(storage):
    new_job(storage)
    assert storage.get_job("j1") == JobRecord(
        id="j1",
        kind="plan",
        title="Plan tiny",
        state="queued",
        progress=0.0,
        message="waiting for a worker",
        result=None,
        error=None,
        links={"plan": "/plans/p1"},
        created=100.0,
        finished=None,
        heartbeat=None,
        worker=None,
        attempts=0,
        cancel_requested=False,
    )
    assert storage.get_job("nope") is None


def test_update_job_changes_the_fields_given_and_refuses_others(storage):
    new_job(storage)
    storage.update_job("j1", state="running", progress=0.5, heartbeat=101.5, worker="tcp://127.0.0.1:4000", attempts=1)
    storage.update_job("j1", state="done", result={"plans": ["p1"]}, finished=102.0, worker=None)
    job = storage.get_job("j1")
    assert (job.state, job.progress, job.result, job.finished) == ("done", 0.5, {"plans": ["p1"]}, 102.0)
    assert (job.heartbeat, job.worker, job.attempts, job.links) == (101.5, None, 1, {"plan": "/plans/p1"})
    storage.update_job("j1", error={"message": "boom"}, result=None)
    assert storage.get_job("j1").error == {"message": "boom"} and storage.get_job("j1").result is None
    with pytest.raises(ValueError, match="links"):
        storage.update_job("j1", links={})
    with pytest.raises(KeyError, match="nope"):
        storage.update_job("nope", state="running")


def test_event_seqs_count_from_zero_per_job_with_many_writers_at_once(open_storage):
    storages = [open_storage(), open_storage()]
    new_job(storages[0], "j1")
    new_job(storages[0], "j2")
    seqs: dict[str, list[int]] = {"j1": [], "j2": []}
    errors: list[BaseException] = []

    def append(storage: Storage, job_id: str, writer: int) -> None:
        try:
            for k in range(20):
                seqs[job_id].append(
                    storage.add_job_event(job_id=job_id, event="progress", data={"writer": writer, "k": k})
                )
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [
        threading.Thread(target=append, args=(storages[w % 2], job_id, w)) for w in range(4) for job_id in ("j1", "j2")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for job_id in ("j1", "j2"):
        assert sorted(seqs[job_id]) == list(range(80))
        events = storages[1].job_events(job_id)
        assert [e["seq"] for e in events] == list(range(80))
        for writer in range(4):  # each writer's events keep its order
            assert [e["data"]["k"] for e in events if e["data"]["writer"] == writer] == list(range(20))


APPEND_EVENTS = """
import sys
from pathlib import Path
from app.storage import Storage
storage = Storage(Path(sys.argv[1]), sys.argv[2] or None, owns_jobs=False)
for k in range(30):
    storage.add_job_event(job_id="j1", event="progress", data={"writer": sys.argv[3], "k": k})
storage.close()
"""


def test_event_seqs_stay_unique_with_two_processes_appending(storage, database_url, tmp_path):
    new_job(storage)
    writers = [
        subprocess.Popen([sys.executable, "-c", APPEND_EVENTS, str(tmp_path / "data"), database_url or "", name])
        for name in ("a", "b")
    ]
    assert [w.wait(120) for w in writers] == [0, 0]
    events = storage.job_events("j1")
    assert [e["seq"] for e in events] == list(range(60))
    for name in ("a", "b"):
        assert [e["data"]["k"] for e in events if e["data"]["writer"] == name] == list(range(30))


def test_job_events_after_a_seq_and_up_to_a_limit(storage):
    new_job(storage)
    for k in range(5):
        assert storage.add_job_event(job_id="j1", event="progress" if k < 4 else "done", data={"k": k}) == k
    assert [e["seq"] for e in storage.job_events("j1", after=1)] == [2, 3, 4]
    assert storage.job_events("j1", after=1, limit=2) == [
        {"seq": 2, "event": "progress", "data": {"k": 2}},
        {"seq": 3, "event": "progress", "data": {"k": 3}},
    ]
    assert storage.job_events("j1", after=4) == [] and storage.job_events("nope") == []
    with pytest.raises(KeyError, match="nope"):
        storage.add_job_event(job_id="nope", event="progress", data={})


def test_a_batch_of_events_takes_consecutive_seqs_between_single_ones(storage):
    new_job(storage)
    assert storage.add_job_event(job_id="j1", event="running", data={"k": 0}) == 0
    assert storage.add_job_events(job_id="j1", event="progress", datas=[{"k": 1}, {"k": 2}, {"k": 3}]) == [1, 2, 3]
    assert storage.add_job_events(job_id="j1", event="progress", datas=[]) == []
    assert storage.add_job_event(job_id="j1", event="done", data={"k": 4}) == 4
    events = storage.job_events("j1")
    assert [(e["seq"], e["event"], e["data"]["k"]) for e in events] == [
        (0, "running", 0),
        (1, "progress", 1),
        (2, "progress", 2),
        (3, "progress", 3),
        (4, "done", 4),
    ]
    with pytest.raises(KeyError, match="nope"):
        storage.add_job_events(job_id="nope", event="progress", datas=[{}])


def test_cancel_is_requested_only_of_an_unfinished_job(storage):
    new_job(storage, "queued")
    new_job(storage, "finished")
    storage.update_job("finished", state="done", finished=1.0)
    assert storage.request_cancel("queued") and storage.get_job("queued").cancel_requested is True
    assert not storage.request_cancel("finished") and storage.get_job("finished").cancel_requested is False
    assert not storage.request_cancel("nope")


def test_jobs_are_counted_and_listed_by_state(storage):
    for k, state in enumerate(["queued", "running", "running", "done"]):
        new_job(storage, f"j{k}", created=10.0 - k)
        storage.update_job(f"j{k}", state=state)
    assert storage.count_jobs(("queued", "running")) == 3 and storage.count_jobs(("failed",)) == 0
    assert storage.count_jobs(()) == 0 and storage.jobs_in(()) == []
    assert [j.id for j in storage.jobs_in(("running", "queued"))] == ["j2", "j1", "j0"]  # oldest first


# ---- after a crash -------------------------------------------------------------------------------


def test_recover_removes_leftovers_and_interrupts_jobs_only_when_it_owns_them(open_storage, tmp_path):
    storage = open_storage()
    new_job(storage, "queued")
    new_job(storage, "running")
    storage.update_job("running", state="running")
    (storage.incoming / "half.part").write_bytes(b"half")
    (storage.incoming / "x.d").mkdir()
    orphan = storage.blob_path("cd" * 32, "onnx")
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"no record")
    storage.close()

    shared = open_storage(owns_jobs=False)  # another process's upload may be in flight: fresh files stay
    assert shared.recovered == {"partial_uploads": 0, "orphan_blobs": 0, "interrupted_jobs": 0}
    assert shared.get_job("running").state == "running" and orphan.exists()

    owner = open_storage(owns_jobs=True)
    assert owner.recovered == {"partial_uploads": 2, "orphan_blobs": 1, "interrupted_jobs": 2}
    assert not any(owner.incoming.iterdir()) and not orphan.exists()
    job = owner.get_job("running")
    assert job.state == "interrupted" and job.message == "interrupted: the service stopped while this job was running"
    assert job.finished is not None


def test_the_default_is_to_own_the_jobs_only_on_the_data_folders_sqlite(storage, database_url):
    assert storage.owns_jobs is (database_url is None)


def test_old_leftovers_are_removed_even_with_a_shared_database(open_storage):
    storage = open_storage()
    leftover = storage.incoming / "old.part"
    leftover.write_bytes(b"old")
    an_hour_ago = time.time() - 3600
    os.utime(leftover, (an_hour_ago, an_hour_ago))
    storage.close()
    assert open_storage(owns_jobs=False).recovered["partial_uploads"] == 1 and not leftover.exists()


# ---- the database and its migrations -------------------------------------------------------------


def test_an_empty_database_is_migrated_to_head_and_matches_the_models(storage):
    engine = open_engine(storage.url)
    try:
        with engine.connect() as connection:
            assert migrations.current(connection) == migrations.head()
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
            assert differences == []
            assert set(inspect(connection).get_table_names()) >= {"models", "problems", "plans", "runs", "jobs"}
    finally:
        engine.dispose()


def test_the_sqlite_default_is_a_wal_file_with_foreign_keys_in_the_data_folder(tmp_path):
    storage = Storage(tmp_path / "data")
    storage.close()
    assert storage.db_path == tmp_path / "data" / "memplan.sqlite3"
    engine = open_engine(storage.url)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()


def test_a_database_left_at_the_first_revision_is_upgraded_when_storage_opens(tmp_path, database_url):
    url = database_url or f"sqlite:///{tmp_path / 'data' / 'memplan.sqlite3'}"
    (tmp_path / "data").mkdir()
    engine = open_engine(url)
    with engine.begin() as connection:
        migrations.upgrade(connection, migrations.FIRST)
        connection.execute(
            text(
                "INSERT INTO jobs (id, kind, title, state, progress, message, created) "
                "VALUES ('old', 'plan', 'Plan', 'done', 1, 'done', 1)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO problems (id, model_id, options, problem, tensors, created) VALUES ('q', NULL, '{}', '{}', '{}', 1)"
            )
        )
        for k, plan_id in enumerate(["z", "a"]):
            connection.execute(
                text("INSERT INTO plans VALUES (:id, 'q', 'naive', 1, 1, 1, 0.5, :valid, '[]', '{}', 1)").bindparams(
                    id=plan_id, valid=bool(k)
                )
            )
    with engine.connect() as connection:
        assert migrations.current(connection) == migrations.FIRST
    engine.dispose()

    storage = Storage(tmp_path / "data", database_url)
    try:
        job = storage.get_job("old")
        assert (job.links, job.attempts, job.cancel_requested, job.heartbeat) == ({}, 0, False, None)
        assert storage.add_job_event(job_id="old", event="done", data={}) == 0
        if database_url is None:  # SQLite listed plans in rowid order before; they still are
            assert [p.id for p in storage.plans_of("q")] == ["z", "a"]
        assert sorted(p.id for p in storage.plans_of("q")) == ["a", "z"]
        engine = open_engine(storage.url)
        with engine.connect() as connection:
            assert migrations.current(connection) == migrations.head()
        engine.dispose()
    finally:
        storage.close()


def test_a_sqlite_file_made_before_migrations_is_adopted(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "memplan.sqlite3") as conn:  # the schema memplan created before Alembic
        conn.executescript(
            """
            CREATE TABLE models (id TEXT PRIMARY KEY, sha256 TEXT UNIQUE NOT NULL, name TEXT NOT NULL,
                filename TEXT NOT NULL, format TEXT NOT NULL, bytes INTEGER NOT NULL, created REAL NOT NULL,
                summary TEXT NOT NULL);
            CREATE TABLE problems (id TEXT PRIMARY KEY, model_id TEXT REFERENCES models(id) ON DELETE CASCADE,
                options TEXT NOT NULL, problem TEXT NOT NULL, tensors TEXT NOT NULL, created REAL NOT NULL);
            CREATE TABLE plans (id TEXT PRIMARY KEY, problem_id TEXT NOT NULL REFERENCES problems(id)
                ON DELETE CASCADE, strategy TEXT NOT NULL, arena_bytes INTEGER NOT NULL,
                lower_bound INTEGER NOT NULL, naive_bytes INTEGER NOT NULL, seconds REAL NOT NULL,
                valid INTEGER NOT NULL, violations TEXT NOT NULL, plan TEXT NOT NULL, created REAL NOT NULL);
            CREATE TABLE runs (id TEXT PRIMARY KEY, model_id TEXT REFERENCES models(id) ON DELETE CASCADE,
                plan_id TEXT, result TEXT NOT NULL, created REAL NOT NULL);
            CREATE TABLE jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, title TEXT NOT NULL, state TEXT NOT NULL,
                progress REAL NOT NULL, message TEXT NOT NULL, result TEXT, error TEXT,
                created REAL NOT NULL, finished REAL);
            CREATE INDEX plans_by_problem ON plans(problem_id);
            INSERT INTO models VALUES ('m1', 'ee', 'kept', 'kept.onnx', 'onnx', 10, 1.0, '{"ops": 3}');
            """
        )
    conn.close()
    storage = Storage(data)
    try:
        assert storage.get_model("m1").summary == {"ops": 3}
        new_job(storage)
        assert storage.add_job_event(job_id="j1", event="queued", data={}) == 0
    finally:
        storage.close()


# ---- a database that cannot be reached -----------------------------------------------------------


def test_an_unreachable_database_names_its_url_without_the_password(tmp_path):
    port = _closed_port()
    with pytest.raises(DatabaseUnavailable) as caught:
        Storage(tmp_path / "data", f"postgresql+psycopg://memplan:s3cret@127.0.0.1:{port}/memplan")
    message = str(caught.value)
    assert f"postgresql+psycopg://memplan:***@127.0.0.1:{port}/memplan" in message
    assert "s3cret" not in message and "Connection refused" in message and "\n" not in message


def test_a_missing_database_on_a_running_server_is_named(tmp_path, postgresql):
    url = postgresql.url("no_such_database")
    with pytest.raises(DatabaseUnavailable, match='database "no_such_database" does not exist') as caught:
        Storage(tmp_path / "data", url)
    assert postgresql.password not in str(caught.value)


def test_memplan_serve_says_so_in_one_line_and_exits_2(tmp_path):
    env = {
        **os.environ,
        "MEMPLAN_DATA": str(tmp_path / "data"),
        "MEMPLAN_DATABASE_URL": f"postgresql+psycopg://memplan:s3cret@127.0.0.1:{_closed_port()}/memplan",
        # A scheduler address (never reached: storage opens first), so that serve starts no local cluster.
        "MEMPLAN_SCHEDULER": "tcp://127.0.0.1:9",
    }
    env.pop("MEMPLAN_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", "9"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memplan: error: cannot open the database postgresql+psycopg://")
    assert "***" in lines[0] and "s3cret" not in done.stderr


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound, never listening: connections to it are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
