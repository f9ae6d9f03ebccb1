"""Compiled loops for the kernels numpy cannot run in one pass over memory.

numba (the optional ``fast`` extra) compiles the inner loops of a few kernels to machine code:
a depthwise convolution with its activation, a recurrent cell's step, a normalisation's two
passes. Without numba, or with ``MEMPLAN_JIT=0`` in the environment, every kernel takes its
numpy route; both routes are tested against the same oracles.

What a compiled loop may do:

- write only into the arrays it is given (arena views, the kernel's workspace) and allocate
  nothing, so that every byte stays in the arena (numba's own allocations would not even
  show in the traced outside-arena count);
- run on the calling thread only (the executor's timings are single-threaded);
- keep IEEE semantics for NaN and infinities: the fast-math flags below allow reassociation
  and contraction (vectorised sums, fused multiply-adds), not assuming finite values.

Loops are compiled on their first call with a given signature (kernels call theirs when a
session prepares) and cached on disk, beside the module or in the user's cache folder, so a
process pays the compilation once per machine, not once per run; where no folder is
writable, each process compiles its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

numba: Any
try:
    import numba
except ImportError:  # the core runs without the `fast` extra
    numba = None

ENV = "MEMPLAN_JIT"
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}  # no "nnan"/"ninf": NaN and inf propagate

F = TypeVar("F", bound=Callable[..., Any])


def enabled() -> bool:
    """Whether compiled loops are used: numba importable and ``MEMPLAN_JIT`` not 0/false/off/no."""
    return numba is not None and os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")


ENABLED = enabled()  # read once, at import: a kernel's route is fixed for the process


def compiled(fn: F, *, inline: bool = False) -> F | None:
    """`fn` compiled by numba when compiled loops are enabled, else None (the caller keeps its
    numpy route). `fn` must follow the rules in this module's docstring. With `inline`, `fn` is
    a helper inlined into the compiled loops that call it (a scalar formula, say)."""
    if not ENABLED:
        return None
    options: dict[str, Any] = {"nogil": True, "fastmath": FASTMATH, "error_model": "numpy"}
    if inline:
        options["inline"] = "always"
    try:
        loop: F = numba.njit(cache=True, **options)(fn)
    except RuntimeError:
        # No writable place for the cache (a read-only install without a home folder):
        # compile in every process instead of failing to import the kernels.
        loop = numba.njit(cache=False, **options)(fn)
    return loop
