#!/usr/bin/env bash
# Refresh requirements/lock.txt: every dependency of memplan, its test and optional extras, pinned
# with hashes for Python 3.11 on Linux x86_64 (the CI machine and the Docker image). Commit the result.
# scripts/test.sh and the Dockerfile install exactly this (pip install --require-hashes -r
# requirements/lock.txt), then memplan itself with --no-deps: a dependency added to pyproject.toml
# reaches them only through this script.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "pip-tools>=7.4"
python -m piptools compile --quiet --strip-extras --generate-hashes --allow-unsafe --no-emit-index-url --no-emit-find-links \
    --extra ort --extra fast --extra train --extra test \
    --output-file requirements/lock.txt pyproject.toml
# The lock names no index: pip installs it from whichever index it is configured with.
