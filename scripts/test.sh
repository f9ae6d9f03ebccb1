#!/usr/bin/env bash
# Install everything memplan's tests need on a fresh machine, then run the whole suite.
# Debian packages, installed here when missing: chromium, which the browser tests drive through
# Playwright (never a browser download of Playwright's own), and postgresql, whose initdb and
# pg_ctl the tests use to start a throwaway server (tests/conftest.py). Python packages come
# from the lock (requirements/lock.txt, refreshed by scripts/lock.sh), checked by their hashes.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then apt_get="apt-get"; else apt_get="sudo apt-get"; fi
    $apt_get update -qq
    DEBIAN_FRONTEND=noninteractive $apt_get install -y -qq "${missing[@]}" >/dev/null
fi

python -m pip install -q --disable-pip-version-check --require-hashes -r requirements/lock.txt
python -m pip install -q --disable-pip-version-check --no-deps -e .

# One pytest process per core, four at most (pytest-xdist); each test file stays in one process, so
# its module fixtures (a served app, a database, a Dask cluster) are made once. Arguments after the
# command come last and win: `bash scripts/test.sh -n 0` runs everything in this one process.
workers=$(python -c "import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))")
# pytest exits 5 when it collects no test: that fails this script too.
python -m pytest -q -n "$workers" --dist loadfile "$@"
