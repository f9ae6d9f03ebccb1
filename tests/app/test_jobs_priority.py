"""Jobs are batch work: the workers of the service's cluster run at a lower OS priority than it."""

from __future__ import annotations

import os

from distributed import Client

from app.jobs import BatchPriority


def test_the_services_workers_run_niced_below_the_server(app, dask_scheduler):
    assert app.state.jobs is not None  # the app registered its plugin when it connected
    with Client(dask_scheduler, timeout=30) as client:
        niceness = client.run(os.nice, 0)
    assert niceness and all(n >= BatchPriority.NICENESS for n in niceness.values())
    assert os.nice(0) < BatchPriority.NICENESS  # the test process (the server's) keeps its priority
