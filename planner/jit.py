"""Compiled loops, when numba is installed: the one switch for memplan's planner and kernels.

numba (the optional ``fast`` extra) compiles a few hot loops to machine code: the placement
engine's big gap queries here, and the kernels' loops (`runtime.kernels._jit` builds on this
module). Without numba, or with ``MEMPLAN_JIT=0`` in the environment, every caller takes its
numpy route, which gives the same answers (both routes are tested against the same oracles).
Loops are compiled on their first call and cached on disk where a folder is writable
(``NUMBA_CACHE_DIR`` when set, else beside the sources, else the user's cache folder); where
none is, each process compiles its own.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from types import CodeType, ModuleType
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


ENABLED = enabled()  # read once, at import: a caller's route is fixed for the process
# Every loop `compiled` made in this process, in order: numba's per-loop stats (signatures,
# cache hits and misses, cache path) say what a process compiled and what it loaded from the cache.
LOOPS: list[Any] = []


def compiled(fn: F, **options: Any) -> F | None:
    """`fn` compiled by numba (nogil, and numba's `options`) when enabled, else None (the
    caller keeps its numpy route)."""
    if not ENABLED:
        return None
    options = {"nogil": True, **options}
    try:
        loop: F = numba.njit(cache=True, **options)(fn)
    except RuntimeError:
        # No writable place for the cache (a read-only install without a home folder, or a
        # function with no source file): compile in every process instead of failing.
        loop = numba.njit(cache=False, **options)(fn)
    LOOPS.append(loop)
    return loop


def entries() -> list[Any]:
    """The loops of `LOOPS` that only Python calls: neither inlined into their callers
    (``inline="always"``) nor named in another loop's code (as a global, a module's attribute
    or a closure's value). numba records a loop's signatures when Python calls it or when a
    loop that calls it compiles, never for an inlined one: in a process that compiled (not
    loaded) its loops, the entries with signatures say which of them ran."""
    called = {id(callee) for loop in LOOPS for callee in _callees(loop)}
    return [loop for loop in LOOPS if loop.targetoptions.get("inline") != "always" and id(loop) not in called]


def _callees(loop: Any) -> list[Any]:
    """The objects `loop`'s Python function names: its globals (and their attributes, for a
    module), and its closure's values."""
    function = loop.py_func
    names = set(_names(function.__code__))
    found: list[Any] = []
    for name in names:
        value = function.__globals__.get(name)
        found += [getattr(value, n, None) for n in names] if isinstance(value, ModuleType) else [value]
    for cell in function.__closure__ or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    return found


def _names(code: CodeType) -> list[str]:
    """The global and attribute names `code` and the functions defined in it read."""
    nested = [c for c in code.co_consts if isinstance(c, CodeType)]
    return [*code.co_names, *(name for c in nested for name in _names(c))]


def move(array: np.ndarray, to: int, frm: int, count: int) -> None:
    """Copy ``array[frm : frm + count]`` to ``array[to : to + count]`` as C's memmove does
    (the two may overlap); compiled code moves the bytes in one call."""
    array[to : to + count] = array[frm : frm + count].copy()


def view(address: int, length: int) -> np.ndarray:
    """The `length` int64 values at `address` (an ``array("q")``'s buffer, which the caller
    keeps alive and unchanged while the view is read), without copying them."""
    return np.ctypeslib.as_array(ctypes.cast(int(address), ctypes.POINTER(ctypes.c_int64)), (length,))


if ENABLED:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, overload

    @intrinsic
    def _pointer(typingctx: Any, address: Any) -> Any:
        """An int64 address as a pointer to int64, in compiled code."""
        signature = types.CPointer(types.int64)(types.int64)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

        return signature, codegen

    @intrinsic
    def _memmove(typingctx: Any, to: Any, frm: Any, nbytes: Any) -> Any:
        """C's memmove between two int64 addresses, in compiled code."""
        signature = types.void(types.int64, types.int64, types.int64)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            byte_pointer = ir.IntType(8).as_pointer()
            to, frm, nbytes = args
            destination = builder.inttoptr(to, byte_pointer)
            source = builder.inttoptr(frm, byte_pointer)
            cgutils.raw_memmove(builder, destination, source, nbytes, 1)
            return context.get_dummy_value()

        return signature, codegen

    @overload(move)
    def _move(array, to, frm, count):  # type: ignore[no-untyped-def]  # numba matches the signatures
        def impl(array, to, frm, count):  # type: ignore[no-untyped-def]
            if count > 0:
                base = array.ctypes.data
                _memmove(base + 8 * to, base + 8 * frm, 8 * count)

        return impl

    @overload(view)
    def _view(address, length):  # type: ignore[no-untyped-def]  # numba matches the signatures
        def impl(address, length):  # type: ignore[no-untyped-def]
            return numba.carray(_pointer(address), length)

        return impl
