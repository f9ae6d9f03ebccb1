"""Typed scratch arrays carved out of a kernel's workspace (the `ws` byte view).

A kernel's ``workspace`` function and its body must agree on the layout, so both go through
this module: `scratch_bytes` adds up the blocks a kernel will `Scratch.take`, each rounded
up to `ALIGN` bytes so every block starts where BLAS and SIMD loops like it.
"""

from __future__ import annotations

import contextvars
import functools
import math
import threading
import tracemalloc
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

ALIGN = 64
T = TypeVar("T")


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def same_start(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the first elements of `a` and `b` are at the same address. Read through
    `ctypes.data`, not `__array_interface__`: that dict's keys are interned anew on every call,
    which now and then rebuilds CPython's table of interned strings (about 1 MB in a process
    that has loaded several models), and a traced run would count that beside the arena."""
    return bool(a.ctypes.data == b.ctypes.data)


def units_within(budget: int, unit_bytes: int, total: int) -> int:
    """How many units of `unit_bytes` (rows, channels, planes) a band of at most `budget`
    bytes holds: at least one, at most `total`."""
    return max(1, min(total, budget // max(1, unit_bytes)))


def block_bytes(shape: Iterable[int], dtype: np.dtype | type) -> int:
    """Bytes one block of `shape` and `dtype` takes in a workspace, alignment included."""
    return _round_up(math.prod(int(n) for n in shape) * np.dtype(dtype).itemsize)


def scratch_bytes(*blocks: tuple[Iterable[int], np.dtype | type]) -> int:
    """Workspace bytes for the blocks ``(shape, dtype)`` a kernel takes, in any order."""
    return sum(block_bytes(shape, dtype) for shape, dtype in blocks)


_SHARED = threading.local()


def shared_scratch(nbytes: int) -> np.ndarray:
    """A byte buffer of at least `nbytes` for a bound call made without a workspace (scratch kept
    outside the arena, ``MemoryOptions(workspace=False)``): one per thread, shared by every such
    call in it (a kernel's scratch is dead once it returns, and calls in one thread do not
    overlap), replaced by a larger one when a call needs more. A bound call keeps its views of
    it (`runtime.kernels.same_arrays`, the buffer among its arrays: made again after a
    replacement). One buffer for all the steps keeps it in cache, where one per step would not
    (figures: docs/BENCHMARKS.md, "Figures behind the code"). It lies beside the arena, as the
    scratch of ``workspace=False`` is meant to: a traced run counts it (`shared_scratch_held`)."""
    buffer = getattr(_SHARED, "buffer", None)
    if buffer is None or buffer.size < nbytes:
        buffer = _SHARED.buffer = np.empty(max(_round_up(nbytes), ALIGN), np.uint8)
    _SHARED.taken = True
    return buffer


def shared_scratch_held() -> int:
    """Bytes of this thread's shared scratch (`shared_scratch`) if a call inside the last
    `loop_ufunc_buffers` (a session's step loop), traced by tracemalloc, took it, else 0; read
    once, then 0 until the next such loop. The buffer is made at prepare, before a traced run
    starts, so tracemalloc never sees it: a session adds these bytes to what it reports beside
    the arena (`RunStats.outside_arena_bytes`)."""
    held = getattr(_SHARED, "held", 0)
    _SHARED.held = 0
    return int(held)


class Scratch:
    """Hands out arrays from `ws` front to back; allocates them when `ws` is None.

    Taking more than `ws` holds raises ValueError naming both sizes: a kernel's workspace
    function under-counted, which is a bug worth hearing about rather than a silent
    allocation outside the arena.
    """

    def __init__(self, ws: np.ndarray | None, owner: str) -> None:
        self.ws = ws
        self.owner = owner
        self.used = 0

    def take(self, shape: Iterable[int], dtype: np.dtype | type) -> np.ndarray:
        shape = tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        if self.ws is None:
            return np.empty(shape, dtype=dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        start, end = self.used, self.used + nbytes
        if end > self.ws.size:
            raise ValueError(f"{self.owner}: workspace of {self.ws.size} bytes is too small, needs at least {end}")
        self.used = start + _round_up(nbytes)
        return self.ws[start:end].view(dtype).reshape(shape)


# Elements per numpy ufunc buffer inside memplan's kernels. numpy buffers operands that are
# strided or broadcast over short rows (a bias per channel of a 13x13 map, a pooling tap) in
# 8192-element chunks: 32 KB allocated outside the arena per call. 2048 costs no measurable
# time on such loops and a quarter of the bytes.
UFUNC_BUFFER = 2048
# A ufunc whose output is itself a strided slice buffers all three operands: kernels that
# accumulate into such slices (separable pooling) use half the usual size, at no cost in time.
STRIDED_UFUNC_BUFFER = 1024


# The ufunc buffer size a caller has set around many kernel calls (a session's loop, through
# `loop_ufunc_buffers`), or 0: a kernel wrapper that wants that size then skips np.setbufsize,
# which costs about 2 us a call in numpy 2.4, twice per kernel call.
_LOOP_BUFFER: contextvars.ContextVar[int] = contextvars.ContextVar("memplan_loop_ufunc_buffer", default=0)


class loop_ufunc_buffers:  # noqa: N801 - a context manager used like a function
    """``with loop_ufunc_buffers():`` runs the body (a session's loop over its steps) with
    `UFUNC_BUFFER`-element ufunc buffers, set once, for every kernel wrapped by
    `small_ufunc_buffers` (or calling `ufunc_into`) inside it."""

    def __enter__(self) -> None:
        self._previous = np.setbufsize(UFUNC_BUFFER)
        self._token = _LOOP_BUFFER.set(UFUNC_BUFFER)
        _SHARED.taken, _SHARED.held = False, 0  # `shared_scratch_held` of this loop alone

    def __exit__(self, *_: object) -> None:
        _LOOP_BUFFER.reset(self._token)
        np.setbufsize(self._previous)
        buffer = getattr(_SHARED, "buffer", None)
        taken = getattr(_SHARED, "taken", False) and tracemalloc.is_tracing()
        _SHARED.held = buffer.nbytes if buffer is not None and taken else 0


def buffers_set(size: int) -> bool:
    """Whether a caller has already set `size`-element ufunc buffers around this call."""
    return _LOOP_BUFFER.get() == size


class small_ufunc_buffers:  # noqa: N801 - used like the function (decorator or `with`) it replaced
    """Run the body (``with small_ufunc_buffers():``) or every call of a decorated kernel with
    `size`-element ufunc buffers. numpy keeps the setting per context (thread), and the
    previous value comes back on exit. The decorator is a plain wrapper, not a generator-based
    context manager: it runs once per kernel call, where a few microseconds add up; inside
    `loop_ufunc_buffers` with the same size it only calls the kernel."""

    def __init__(self, size: int = UFUNC_BUFFER) -> None:
        self.size = size
        self._previous: list[int] = []

    def __enter__(self) -> None:
        self._previous.append(np.setbufsize(self.size))

    def __exit__(self, *_: object) -> None:
        np.setbufsize(self._previous.pop())

    def __call__(self, fn: Callable[..., T]) -> Callable[..., T]:
        size = self.size

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            if _LOOP_BUFFER.get() == size:
                return fn(*args, **kwargs)
            previous = np.setbufsize(size)
            try:
                return fn(*args, **kwargs)
            finally:
                np.setbufsize(previous)

        return wrapper


def ufunc_into(ufunc: Any, *operands: Any, out: np.ndarray, **kwargs: Any) -> None:
    """``ufunc(*operands, out=out, **kwargs)``; when an operand is broadcast to `out`, numpy
    allocates its iteration buffers (32 KiB of float32 for a bias over rows) beside the
    arena, so such calls run with `UFUNC_BUFFER`-element buffers."""
    if all(getattr(x, "shape", None) == out.shape for x in operands) or buffers_set(UFUNC_BUFFER):
        ufunc(*operands, out=out, **kwargs)
        return
    previous = np.setbufsize(UFUNC_BUFFER)
    try:
        ufunc(*operands, out=out, **kwargs)
    finally:
        np.setbufsize(previous)
