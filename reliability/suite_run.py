"""The README's test command, run as a newcomer would: a fresh clone, a fresh virtual environment.

``python -m reliability.suite_run`` clones the repository's committed HEAD into a temporary folder,
makes a new virtual environment there (no packages of this machine's own), runs exactly
``bash scripts/test.sh`` in it (which installs from the lock, then runs the whole suite with pytest),
and writes the machine, the time, the result and the slowest tests into docs/RELIABILITY.md's
``test-suite-run`` section. numba's cache starts empty too (`NUMBA_CACHE_DIR` in the clone), as
on a new machine. Exit status: the test command's.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SLOWEST = 12  # tests listed by duration
CLOSING = re.compile(r"^=*\s*(\d[^\n]*\b(?:passed|failed)\b[^\n]*?) in ([\d.]+)s", re.MULTILINE)
DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)$", re.MULTILINE)


def cpu_model() -> str:
    """The CPU's name as the kernel reports it (Linux), else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_suite(keep: bool = False) -> dict[str, Any]:
    """Clone, make the environment, run the test command; what was seen."""
    folder = Path(tempfile.mkdtemp(prefix="memplan-suite-"))
    clone = folder / "memplan"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    venv_bin = folder / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(folder / "venv"))
    env["NUMBA_CACHE_DIR"] = str(folder / "numba-cache")
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    started = time.perf_counter()
    done = subprocess.run(
        ["bash", "scripts/test.sh", f"--durations={SLOWEST}", "-p", "no:cacheprovider"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    output = done.stdout + done.stderr
    (folder / "output.txt").write_text(output)
    closing = CLOSING.findall(output)
    result = {
        "commit": commit.stdout.strip(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "workers": max(1, min(4, len(os.sched_getaffinity(0)))),  # as scripts/test.sh counts them
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "returncode": done.returncode,
        "seconds": seconds,
        "pytest": closing[-1][0] if closing else "no closing line",
        "pytest_seconds": float(closing[-1][1]) if closing else None,
        "slowest": DURATION.findall(output)[:SLOWEST],
        "output": str(folder / "output.txt"),
    }
    if not keep:
        shutil.rmtree(clone, ignore_errors=True)
        shutil.rmtree(folder / "venv", ignore_errors=True)
    return result


def section(r: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%d", time.gmtime())
    load = ", ".join(f"{v:.1f}" for v in (r["load_before"], r["load_after"]) if isinstance(v, float))
    lines = [
        "The README's test command on a fresh clone in a fresh virtual environment, numba's cache empty "
        f"(`python -m reliability.suite_run`), {when}, commit {r['commit']}:",
        "",
        f"- machine: {r['cpu']}, {r['cores']} cores, Python {r['python']}; load average before / after: {load}",
        f"- pytest processes: {r['workers']} (scripts/test.sh: one per core, four at most)",
        f"- result: {r['pytest']} (exit status {r['returncode']})",
        f"- time: {float(r['seconds']) / 60:.1f} min for the whole command (install from the lock included), "
        + (f"{float(r['pytest_seconds']) / 60:.1f} min of tests" if r["pytest_seconds"] else "no pytest time"),
        "",
        "| slowest tests | s |",
        "|---|---:|",
    ]
    for seconds, phase, test in r["slowest"]:
        lines.append(f"| {test} ({phase}) | {float(seconds):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from app.services.docsections import replace_section

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "RELIABILITY.md")
    parser.add_argument("--keep", action="store_true", help="keep the clone and its environment")
    args = parser.parse_args(argv)
    found = run_suite(keep=args.keep)
    print(section(found))
    print(f"full output: {found['output']}")
    replace_section(args.docs, "test-suite-run", section(found), title="memplan reliability")
    return int(found["returncode"])


if __name__ == "__main__":
    raise SystemExit(main())
