"""A whole `Session.run(inputs)` of a compiled program (`runtime.program`) as one compiled call: the model's
input copied into its place in the arena, the program run (`jit_program.RUN`), its time read, for the
program route's short call (`runtime.fast_run`).

A call from Python costs in proportion to what numba unboxes, so the entry takes two arguments: the
address of a *frame* (an int64 array made once per session by `fed_frame`: the arena's, the blob's and
the code's addresses and sizes, the input's byte offset in the arena, then the input's bound shape) and
the input array, of the model's dtype and rank in any layout (compiled once per machine and input type).
The entry checks the input's shape against the frame's before it writes anything, and reads the
monotonic clock around the program itself (`clock_gettime`, the clock of Python's ``perf_counter``),
which costs less inside than two clock reads in Python around the call. It returns the program's
nanoseconds (>= 0), `WRONG_SHAPE`, or a record failure as ``-1 - (record index + 1)``.
It holds the GIL: releasing and taking it back costs more than a small model's whole run.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from planner import jit
from runtime.arena import address
from runtime.kernels._jit import FASTMATH, numba
from runtime.kernels.quantized.jit_program import RUN

FRAME = 7  # the frame's fields before the input's shape: arena, blob and code as (address, size), the input's offset
WRONG_SHAPE = -1
_CLOCK = getattr(time, "CLOCK_MONOTONIC", None)  # absent on Windows: no entry there


def _run_fed(frame_at, x):  # pragma: no cover - compiled
    frame = numba.carray(BYTES_AT(frame_at), 8 * (FRAME + x.ndim)).view(np.int64)
    for i in range(x.ndim):
        if x.shape[i] != frame[FRAME + i]:
            return WRONG_SHAPE
    arena = numba.carray(BYTES_AT(frame[0]), frame[1])
    blob = numba.carray(BYTES_AT(frame[2]), frame[3])
    code = numba.carray(BYTES_AT(frame[4]), 8 * frame[5]).view(np.int64)
    into = frame[6]
    arena[into : into + x.size * x.itemsize].view(x.dtype).reshape(x.shape)[...] = x
    started = NOW_NS()
    failed = RUN(arena, blob, code)
    seconds = NOW_NS() - started
    return -1 - failed if failed else seconds


BYTES_AT: Any = None  # compiled code only: the uint8 pointer at an int64 address
NOW_NS: Any = None  # compiled code only: clock_gettime(CLOCK_MONOTONIC) in nanoseconds
RUN_FED: Any = None
if RUN is not None and _CLOCK is not None and sys.platform != "win32":
    from llvmlite import ir
    from numba.core import cgutils
    from numba.core import types as nb_types
    from numba.extending import intrinsic

    @intrinsic
    def BYTES_AT(typingctx, at):  # type: ignore[no-redef,no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.inttoptr(args[0], ir.PointerType(ir.IntType(8)))

        return nb_types.CPointer(nb_types.uint8)(nb_types.int64), codegen

    @intrinsic
    def NOW_NS(typingctx):  # type: ignore[no-redef,no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i32, i64 = ir.IntType(32), ir.IntType(64)
            spec = ir.LiteralStructType([i64, i64])  # struct timespec on 64-bit Linux and macOS
            call = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, spec.as_pointer()]),
                                                  "clock_gettime")  # fmt: skip
            slot = cgutils.alloca_once(builder, spec)
            builder.call(call, [ir.Constant(i32, _CLOCK), slot])
            seconds = builder.load(cgutils.gep_inbounds(builder, slot, 0, 0))
            nanoseconds = builder.load(cgutils.gep_inbounds(builder, slot, 0, 1))
            return builder.add(builder.mul(seconds, ir.Constant(i64, 1_000_000_000)), nanoseconds)

        return nb_types.int64(), codegen

    RUN_FED = jit.compiled(_run_fed, nogil=False, fastmath=FASTMATH, error_model="numpy")


def fed_entry(x: np.ndarray) -> Any:
    """The entry for inputs of `x`'s dtype and rank, compiled (or loaded from numba's cache) now: once
    per machine and input type, as it links `RUN`; or None where there is none (no
    numba, no monotonic clock, an element type numba lacks). Called as ``entry(address(frame), x)``
    with a `fed_frame`; like `jit_program.entry`'s it does not check its arguments' types: its caller
    passes only arrays of that dtype and rank, and keeps the frame and the arrays it names alive."""
    numeric = x.dtype.kind in "iu" or x.dtype in (np.float32, np.float64)  # numba has no float16
    if RUN_FED is None or not numeric or not x.dtype.isnative:
        return None
    signature = (numba.types.int64, numba.types.Array(numba.from_dtype(x.dtype), x.ndim, "A"))
    RUN_FED.compile(signature)
    return RUN_FED.overloads[signature].entry_point


def fed_frame(arena: np.ndarray, blob: np.ndarray, code: np.ndarray, into: int, shape: tuple[int, ...]) -> np.ndarray:
    """What the entry reads: the three contiguous arrays' addresses and sizes, `into`, the input's byte
    offset in the arena, and the input's `shape`."""
    assert all(a.flags.c_contiguous for a in (arena, blob, code)), "the program's arrays are contiguous"
    fields = (address(arena), arena.size, address(blob), blob.size, address(code), code.size, into, *shape)
    return np.array(fields, np.int64)
