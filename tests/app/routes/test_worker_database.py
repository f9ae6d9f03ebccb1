"""The database password never travels in a job's task arguments (everyone connected to the
scheduler can read those); workers complete it from their own environment."""

from __future__ import annotations

from app.jobs import worker_database_url
from tests.patience import JOB_SECONDS

CSV = "id,lower,upper,size\na,0,2,64\nb,1,3,32\nc,3,4,64\n"


def test_jobs_carry_no_password_and_still_reach_the_database(client):
    storage, jobs = client.app.state.storage, client.app.state.jobs
    password = storage._engine.url.password if storage.db_path is None else None
    if password is not None:  # PostgreSQL: the URL the workers are handed hides it
        assert password not in jobs.env.database_url and ":***@" in jobs.env.database_url
    else:
        assert jobs.env.database_url is None  # the data folder's SQLite
    r = client.post(
        "/api/v1/problems/plan?strategies=hill_climb&background=true",
        content=CSV,
        headers={"content-type": "text/csv"},
    )
    assert r.status_code == 200, r.text
    job_id = r.json()["job"]["id"]
    assert jobs.wait(job_id, JOB_SECONDS)
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "done", job.get("message") or job


def test_a_worker_completes_a_hidden_password_from_its_environment():
    hidden = "postgresql+psycopg://memplan:***@db:5432/memplan"
    full = "postgresql+psycopg://memplan:s3cret@db:5432/memplan"
    assert worker_database_url(None, {}) is None
    assert (
        worker_database_url("postgresql+psycopg://memplan@db/memplan", {}) == "postgresql+psycopg://memplan@db/memplan"
    )
    assert worker_database_url(hidden, {"MEMPLAN_DATABASE_URL": full}) == full
    # The worker's own URL for another database is not borrowed: the client's password file decides.
    other = "postgresql+psycopg://memplan:other@db:5432/elsewhere"
    assert (
        worker_database_url(hidden, {"MEMPLAN_DATABASE_URL": other}) == "postgresql+psycopg://memplan@db:5432/memplan"
    )
    # The database as this worker reaches it wins over everything.
    local = "postgresql+psycopg://memplan:s3cret@10.0.0.5:5432/memplan"
    assert worker_database_url(hidden, {"MEMPLAN_WORKER_DATABASE_URL": local, "MEMPLAN_DATABASE_URL": full}) == local
