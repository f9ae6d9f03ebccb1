"""Compiled loops for the planner's hottest queries, when numba is installed.

numba (the optional ``fast`` extra) compiles a few of the engine's loops to machine code.
Without numba, or with ``MEMPLAN_JIT=0`` in the environment, the engine takes its numpy
route, which gives the same answers (both routes are tested against the same oracles).
Loops are compiled on their first call and cached on disk where a folder is writable.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

numba: Any
try:
    import numba
except ImportError:  # the core runs without the `fast` extra
    numba = None

ENV = "MEMPLAN_JIT"

F = TypeVar("F", bound=Callable[..., Any])


def enabled() -> bool:
    """Whether compiled loops are used: numba importable and ``MEMPLAN_JIT`` not 0/false/off/no."""
    return numba is not None and os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")


ENABLED = enabled()  # read once, at import: the engine's route is fixed for the process


def compiled(fn: F) -> F | None:
    """`fn` compiled by numba (integer code only) when enabled, else None."""
    if not ENABLED:
        return None
    try:
        loop: F = numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # no writable place for the cache: compile in every process
        loop = numba.njit(cache=False, nogil=True)(fn)
    return loop


def view(address: int, length: int) -> np.ndarray:
    """The `length` int64 values at `address` (an ``array("q")``'s buffer, which the caller
    keeps alive and unchanged while the view is read), without copying them."""
    return np.ctypeslib.as_array(ctypes.cast(int(address), ctypes.POINTER(ctypes.c_int64)), (length,))


if ENABLED:
    from numba import types
    from numba.extending import intrinsic, overload

    @intrinsic
    def _pointer(typingctx: Any, address: Any) -> Any:
        """An int64 address as a pointer to int64, in compiled code."""
        signature = types.CPointer(types.int64)(types.int64)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

        return signature, codegen

    @overload(view)
    def _view(address, length):  # type: ignore[no-untyped-def]  # numba matches the signatures
        def impl(address, length):  # type: ignore[no-untyped-def]
            return numba.carray(_pointer(address), length)

        return impl
