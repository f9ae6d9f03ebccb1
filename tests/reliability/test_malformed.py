"""A sample of the malformed-model generator through upload, plan and run: 4xx with a reason, never 5xx."""

from __future__ import annotations

import pytest

from reliability import malformed

SLOW_S = 20.0


@pytest.fixture
def client(make_client):
    with make_client(raise_server_exceptions=False) as c:  # a server error must come back as a 500, not raise
        yield c


def test_generator_is_deterministic_and_covers_every_family():
    first = [(c.name, c.data) for c in malformed.generate(40, seed=3)]
    again = [(c.name, c.data) for c in malformed.generate(40, seed=3)]
    assert first == again
    assert {c.kind for c in malformed.generate(len(malformed.FAMILIES))} == {
        "truncate",
        "bitflip",
        "garbage",
        "dims",
        "wiring",
        "types",
        "attribute",
        "nested",
        "names",
        "external",
    }


def test_a_sample_of_hostile_models_is_refused_with_a_reason(client):
    report = malformed.exercise(client, malformed.generate(100, seed=0))
    failures = report.failures(SLOW_S)
    assert not failures, malformed.markdown(report, SLOW_S, 0)
    assert len(report.outcomes) == 100
    refused = [o for o in report.outcomes if o.stage != "accepted"]
    assert all(400 <= o.status < 500 and o.detail for o in refused)
    # Names with markup are valid: they plan and run, and are stored as given.
    names = [o for o in report.outcomes if o.kind == "names"]
    assert names and all(o.stage == "accepted" for o in names)
    # Hostile external data never gets past planning.
    external = [o for o in report.outcomes if o.kind == "external"]
    assert external and all(o.stage in ("upload", "plan") for o in external)


def test_a_zip_bomb_and_an_escaping_location_are_named_in_the_refusal(client):
    import random

    bomb = next(
        c for k in range(200) if (c := malformed.external_data(random.Random(k), k)).name.startswith("external-bomb")
    )
    r = client.post("/api/v1/models", files={"file": ("m.zip", bomb.data)})
    assert r.status_code == 422 and "zip_max_ratio" in r.json()["detail"]
    absolute = next(
        c
        for k in range(200)
        if (c := malformed.external_data(random.Random(k), k)).name.startswith("external-absolute")
    )
    r = client.post("/api/v1/models", files={"file": ("m.zip", absolute.data)})
    model_id = r.json()["id"]
    r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["naive"], "dims": {"batch": 1}})
    assert r.status_code == 422 and "absolute" in r.json()["detail"]
