"""The switch for compiled loops: MEMPLAN_JIT turns them off, and without numba nothing breaks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime.kernels import JIT_ENV


def _in_child(env_value: str | None, *, block_numba: bool = False) -> str:
    """Whether compiled loops are on in a fresh interpreter with MEMPLAN_JIT set to `env_value`."""
    code = (
        ("import sys; sys.modules['numba'] = None\n" if block_numba else "")
        + "from runtime import kernels\n"
        + "print(kernels.JIT_ENABLED)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != JIT_ENV}
    if env_value is not None:
        env[JIT_ENV] = env_value
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_the_environment_turns_compiled_loops_off(value: str) -> None:
    assert _in_child(value) == "False"


def test_without_numba_every_loop_is_left_to_numpy() -> None:
    assert _in_child(None, block_numba=True) == "False"


def test_with_numba_compiled_loops_are_on_by_default() -> None:
    try:
        import numba  # noqa: F401
    except ImportError:
        pytest.skip("numba is not installed (the `fast` extra)")
    assert _in_child(None) == "True"
    assert _in_child("1") == "True"


def test_a_loop_with_nowhere_to_cache_is_still_compiled() -> None:
    """A function numba cannot cache (its source is no file, as in a read-only install with no
    cache folder) is compiled without the cache instead of failing."""
    from runtime.kernels import JIT_ENABLED, compiled_loop

    if not JIT_ENABLED:
        pytest.skip("compiled loops are off in this process")
    namespace: dict = {}
    exec(compile("def double(x):\n    for i in range(x.shape[0]):\n        x[i] *= 2\n", "<memory>", "exec"), namespace)
    loop = compiled_loop(namespace["double"])
    assert loop is not None
    import numpy as np

    x = np.arange(4, dtype=np.float32)
    loop(x)
    assert x.tolist() == [0.0, 2.0, 4.0, 6.0]
