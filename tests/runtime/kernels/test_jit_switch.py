"""The switch for compiled loops: MEMPLAN_JIT turns them off, and without numba nothing breaks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.kernels import _jit


def _enabled_in_child(env_value: str | None, *, block_numba: bool = False) -> str:
    """What `_jit.ENABLED` is in a fresh interpreter with MEMPLAN_JIT set to `env_value`."""
    code = (
        ("import sys; sys.modules['numba'] = None\n" if block_numba else "")
        + "from runtime.kernels import _jit\n"
        + "print(_jit.ENABLED, _jit.ENABLED or _jit.compiled(lambda x: x + 1) is None)\n"
    )
    import os

    env = {k: v for k, v in os.environ.items() if k != _jit.ENV}
    if env_value is not None:
        env[_jit.ENV] = env_value
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_the_environment_turns_compiled_loops_off(value: str) -> None:
    assert _enabled_in_child(value) == "False True"


def test_without_numba_every_loop_is_left_to_numpy() -> None:
    assert _enabled_in_child(None, block_numba=True) == "False True"


def test_a_compiled_loop_computes_what_its_python_does() -> None:
    if _jit.numba is None:
        pytest.skip("numba is not installed (the `fast` extra)")
    assert _enabled_in_child("1") == "True True"

    def axpy(a, x, y):
        for i in range(x.shape[0]):
            y[i] += a * x[i]

    import numpy as np

    loop = _jit.compiled(axpy) if _jit.ENABLED else None
    if loop is None:
        pytest.skip("compiled loops are turned off in this process")
    x = np.arange(5, dtype=np.float32)
    y = np.ones(5, dtype=np.float32)
    loop(np.float32(2), x, y)
    np.testing.assert_array_equal(y, 1 + 2 * np.arange(5, dtype=np.float32))
