"""Fuzz the REST API from its own OpenAPI description: no 5xx, and responses match their schemas."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from app.main import Settings, create_app


@pytest.fixture(scope="module")
def app(tmp_path_factory, dask_scheduler):
    data = tmp_path_factory.mktemp("fuzz")
    # Short planning budget: a fuzzed time_limit must not stall the suite.
    app = create_app(Settings(data_dir=data, plan_seconds=1.0, max_queued_jobs=4, scheduler=dask_scheduler))
    yield app
    app.state.jobs.close()


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture(scope="module")
def api_schema(app):
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_answers_every_generated_request_without_a_server_error(case):
    case.call_and_validate(checks=[not_a_server_error, response_schema_conformance])
