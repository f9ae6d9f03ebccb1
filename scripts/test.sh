#!/usr/bin/env bash
# Install everything memplan's tests need on a fresh machine, then run the whole suite.
# Browser tests drive Debian's chromium through Playwright; it is installed here when
# missing (never a browser download of Playwright's own).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then apt_get="apt-get"; else apt_get="sudo apt-get"; fi
    $apt_get update -qq
    DEBIAN_FRONTEND=noninteractive $apt_get install -y -qq chromium >/dev/null
fi

python -m pip install -q --disable-pip-version-check -e ".[test]"

# pytest exits 5 when it collects no test: that fails this script too.
python -m pytest -q "$@"
