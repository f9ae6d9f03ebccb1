"""reliability.suite_run reads pytest's own closing line and durations (as `pytest -q --durations`
prints them: run here on a two-test file), and says the machine it ran on."""

from __future__ import annotations

import subprocess
import sys

from reliability.suite_run import CLOSING, DURATION, cpu_model, section


def test_it_reads_what_pytest_prints(tmp_path):
    (tmp_path / "test_two.py").write_text(
        "import time\n\ndef test_slow():\n    time.sleep(0.3)\n\ndef test_fails():\n    assert False\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=5", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    (closing, seconds) = CLOSING.findall(done.stdout)[-1]
    assert closing.startswith("1 failed, 1 passed") and float(seconds) >= 0.3
    slowest = DURATION.findall(done.stdout)
    assert slowest[0][2].endswith("test_two.py::test_slow") and float(slowest[0][0]) >= 0.3
    text = section(
        {
            "commit": "abc1234",
            "cpu": cpu_model(),
            "cores": 2,
            "workers": 2,
            "python": "3.11",
            "load_before": 0.5,
            "load_after": 1.5,
            "returncode": done.returncode,
            "seconds": 90.0,
            "pytest": closing,
            "pytest_seconds": float(seconds),
            "slowest": slowest,
        }
    )
    assert "1 failed, 1 passed" in text and "exit status 1" in text and "test_slow (call)" in text
    assert "pytest processes: 2" in text
    assert cpu_model()
