"""How long a test waits for work done elsewhere: a job on a Dask worker, a page following it.

A deadline only decides how soon a broken test fails; a passing test goes on as soon as the work is
done. So the waits for whole jobs are generous and the same everywhere: the suite must pass on a
machine busy with other work, where a run that takes two seconds on a quiet machine can take a minute.
"""

from __future__ import annotations

JOB_SECONDS = 300.0
"""Longest wait for a job (plan, run, pipeline, sweep, training demo) to finish."""

JOB_MS = int(JOB_SECONDS * 1000)
"""The same, in milliseconds, for Playwright's waits on a page that follows a job to its end."""
