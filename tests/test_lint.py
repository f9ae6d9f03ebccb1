"""The code reads the way STYLE.md asks: ruff-clean and formatted everywhere, mypy-clean on
planner/, runtime/ and app/ (the packages other runtimes build on, and the service)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the test extra")
def test_ruff_check_and_format():
    lint = run("ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run("ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_on_planner_runtime_and_app():
    pytest.importorskip("mypy")
    typed = run(sys.executable, "-m", "mypy", "planner", "runtime", "app")
    assert typed.returncode == 0, typed.stdout + typed.stderr
